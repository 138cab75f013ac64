"""A classifier script that keeps its whole dataset in CPU tensors (the hook's device-memory subject).

Usage: host_data_train.py STEPS [--data-mib M] [--feed loader|slices|index] [--batch B] [--decoder-mib D]

The dataset (M MiB of float32 features and int64 labels) is made before the model and stays a host
tensor, as an image-classification script that loads its data into memory does; on a GPU only one
batch at a time would reach the device. ``--feed loader``: a DataLoader over a TensorDataset (its
collation stacks a new batch tensor); ``slices``: ``X[i:i+B]`` (a view into the host data, then
``.to(device)``, which on a GPU copies one batch); ``index``: ``X[perm[i:i+B]]`` (indexing copies).
``--decoder-mib``: a module of that size built and kept on the host, never run during training (as
LTX-2's trainer keeps its VAE decoder on the CPU until validation: validation_runner.py:482-516).
Prints "step N loss X" per step and "done".
"""

import argparse
import sys

import torch

FEATURES = 256


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--data-mib", type=float, default=32.0)
    parser.add_argument("--feed", choices=["loader", "slices", "index"], default="loader")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--decoder-mib", type=float, default=0.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = int(args.data_mib * 2**20 / (FEATURES * 4 + 8))
    x = torch.randn(rows, FEATURES)
    y = torch.randint(0, 10, (rows,))
    decoder = None
    if args.decoder_mib:
        side = int((args.decoder_mib * 2**20 / 4) ** 0.5)
        decoder = torch.nn.Linear(side, side, bias=False)  # stays on the host: never .to(device)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(
        device
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def batches():
        if args.feed == "loader":
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=args.batch)
            while True:
                yield from loader
        while True:
            perm = torch.randperm(rows)
            for i in range(0, rows - args.batch + 1, args.batch):
                if args.feed == "slices":
                    yield x[i : i + args.batch], y[i : i + args.batch]
                else:
                    yield x[perm[i : i + args.batch]], y[perm[i : i + args.batch]]

    stream = batches()
    for step in range(1, args.steps + 1):
        xb, yb = next(stream)
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    del decoder
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
