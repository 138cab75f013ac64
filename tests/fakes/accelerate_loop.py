"""A tiny real training loop under accelerate: ``Accelerator.prepare`` wraps the DataLoader in a
``DataLoaderShard``, which takes one batch ahead (accelerate/data_loader.py:586 and 598 at 16cb6eb).
Run with the trial-side hook to see what it counts per optimizer step.

    accelerate_loop.py BATCH GA STEPS DATASET_SIZE
"""

import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> int:
    batch, accum, steps, size = (int(a) for a in sys.argv[1:5])
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accum)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(size, 8), torch.randn(size, 1))
    loader = DataLoader(data, batch_size=batch, shuffle=True, drop_last=True)  # as LTX-2's trainer.py:685-689
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    done = 0
    while done < steps:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()  # accelerate skips the real step until the GA-th micro-batch
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                done += 1
                if done >= steps:
                    break
    return 0


if __name__ == "__main__":
    sys.exit(main())
