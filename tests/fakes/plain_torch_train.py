"""A plain PyTorch training script that knows nothing of autotune (the hook's test subject).

Usage: plain_torch_train.py STEPS [--crash-at N] [--optimizer sgd|adamw]
Prints one line per step ("step N loss X") and "done", so a test can compare runs with and without
the hook. --crash-at raises a RuntimeError before step N's optimizer step.
"""

import argparse
import sys

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-at", type=int, default=None)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt_cls = torch.optim.SGD if args.optimizer == "sgd" else torch.optim.AdamW
    optimizer = opt_cls(model.parameters(), lr=1e-2)
    x = torch.randn(64, 16)
    y = x.sum(dim=1, keepdim=True)
    for step in range(1, args.steps + 1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if args.crash_at == step:
            raise RuntimeError(f"deliberate crash at step {step}")
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
