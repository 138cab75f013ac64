"""A plain PyTorch training script that knows nothing of autotune (the hook's test subject).

Usage: plain_torch_train.py STEPS [--crash-at N] [--optimizer sgd|adamw] [--lr LR] [--hidden H]
       [--data N --batch B [--accumulate K] [--workers W]] [--threads T] [--quiet]
Prints one line per step ("step N loss X") and "done", so a test can compare runs with and without
the hook. --crash-at raises a RuntimeError before step N's optimizer step. With --data, batches come
from a DataLoader over N items at batch B (the last batch of an epoch is partial when B does not
divide N), K micro-batches per optimizer step; without it, one fixed batch of 64. --quiet prints
only "done": nothing a reader of printed formats could parse (the loss only the hook sees).
"""

import argparse
import sys

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-at", type=int, default=None)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--data", type=int, default=None)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # a busy host: threads fighting for cores swamp the timing
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)
    )
    opt_cls = torch.optim.SGD if args.optimizer == "sgd" else torch.optim.AdamW
    optimizer = opt_cls(model.parameters(), lr=args.lr)
    x = torch.randn(64 if args.data is None else args.data, 16)
    y = x.sum(dim=1, keepdim=True)

    def batches():
        if args.data is None:
            while True:
                yield x, y
        dataset = torch.utils.data.TensorDataset(x, y)
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
        while True:
            yield from loader

    stream = batches()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        for _ in range(args.accumulate):
            xb, yb = next(stream)
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
        if args.crash_at == step:
            raise RuntimeError(f"deliberate crash at step {step}")
        optimizer.step()
        if not args.quiet:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
