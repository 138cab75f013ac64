"""A fake diffusers-style flag trainer (Sana's train_dreambooth_lora_sana.py flags), really training.

argparse rejects any flag it does not know, as the real script does, and a tiny
torch model trains for --max_train_steps optimizer steps under a tqdm bar with a
``loss=`` postfix, stepping once per --gradient_accumulation_steps micro-batches.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--pretrained_model_name_or_path", required=True)
    p.add_argument("--instance_data_dir")
    p.add_argument("--instance_prompt")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--train_batch_size", type=int, default=4)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--max_train_steps", type=int)
    p.add_argument("--learning_rate", type=float, default=1e-4)
    p.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"])
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--use_8bit_adam", action="store_true")
    p.add_argument("--offload", action="store_true")
    p.add_argument("--cache_latents", action="store_true")
    p.add_argument("--checkpointing_steps", type=int, default=500)
    p.add_argument("--validation_prompt")
    p.add_argument("--push_to_hub", action="store_true")
    p.add_argument("--report_to", default="tensorboard")
    p.add_argument("--seed", type=int)
    # Taken and unused, as in the README's launch block (train_dreambooth_lora_sana.py:332, 377, 461, 470).
    p.add_argument("--validation_epochs", type=int, default=50)
    p.add_argument("--resolution", type=int, default=512)
    p.add_argument("--lr_scheduler", default="constant")
    p.add_argument("--lr_warmup_steps", type=int, default=500)
    p.add_argument("--step_sleep", type=float, default=0.0, help="fake: seconds added per optimizer step")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.validation_prompt or args.push_to_hub:
        print("error: a trial must not validate or push", file=sys.stderr)
        return 3
    print(f"model: {args.pretrained_model_name_or_path}", flush=True)  # what a launcher's $VAR became
    torch.manual_seed(args.seed or 0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    print(
        f"8-bit Adam: {args.use_8bit_adam}, checkpointing: {args.gradient_checkpointing}, "
        f"offload: {args.offload}, cache_latents: {args.cache_latents}",
        flush=True,
    )
    bar = tqdm(range(args.max_train_steps), desc="Steps", mininterval=0, file=sys.stderr)
    for _ in range(args.max_train_steps):
        for _ in range(args.gradient_accumulation_steps):
            x = torch.randn(args.train_batch_size, 16)
            loss = torch.nn.functional.mse_loss(model(x), x)
            (loss / args.gradient_accumulation_steps).backward()
        optimizer.step()
        optimizer.zero_grad()
        if args.step_sleep:
            time.sleep(args.step_sleep)  # a controlled step time for the parser to find
        bar.update(1)
        bar.set_postfix(loss=round(loss.item(), 4), lr=args.learning_rate)
    bar.close()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "pytorch_lora_weights.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
