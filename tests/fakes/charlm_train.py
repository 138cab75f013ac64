"""A small character-level transformer LM trained with a plain PyTorch loop: a script written as a
user writes one, knowing nothing of autotune (#15's "done when" subject).

Unlike the reference trainer it has no metrics file, no config file, no memory accounting and no
print format any reader of ours knows: it logs ``[ep 1 | 12/40] train_loss=2.3104 lr=3.0e-04
(45.1 ms/it)``. Its data loader yields partial batches (the corpus is cut into a number of windows
that is not a multiple of most batch sizes), it checkpoints activations with ``--grad-ckpt true``,
and a huge ``--lr`` makes the loss NaN. Everything autotune knows of it comes from the trial-side
hook: step times, the emulated card's peak, the loss passed to ``backward()``, the real batch.

Usage: charlm_train.py --batch-size B --max-iters N [--grad-ckpt true|false] [--lr X]
                       [--out DIR] [--windows W] [--threads T]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset

CONTEXT = 64
VOCAB = 96


def corpus(n_chars: int) -> torch.Tensor:
    """Deterministic pseudo-text (nothing is downloaded): a repeating sentence with seeded noise."""
    text = "the quick brown fox jumps over the lazy dog while autotune measures every step. "
    ids = torch.tensor([ord(c) % VOCAB for c in text], dtype=torch.long)
    reps = ids.repeat(n_chars // len(ids) + 1)[:n_chars]
    gen = torch.Generator().manual_seed(1)
    noise = torch.randint(0, VOCAB, (n_chars,), generator=gen)
    swap = torch.rand(n_chars, generator=gen) < 0.05
    return torch.where(swap, noise, reps)


class Windows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, data: torch.Tensor, count: int) -> None:
        self.data = data
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = (i * 37) % (len(self.data) - CONTEXT - 1)
        chunk = self.data[start : start + CONTEXT + 1]
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class CharLM(nn.Module):
    def __init__(self, width: int = 64, layers: int = 3, heads: int = 4, ckpt: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.zeros(CONTEXT, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.head = nn.Linear(width, VOCAB)
        self.ckpt = ckpt

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.ckpt and self.training else block(x)
        return self.head(x)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-iters", type=int, required=True)
    parser.add_argument("--grad-ckpt", choices=["true", "false"], default="false")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--windows", type=int, default=203, help="training windows (a prime: partial batches)"
    )
    parser.add_argument("--out", type=Path, default=None, help="where the final weights go")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steady on a shared host)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = corpus(20_000)
    loader = DataLoader(Windows(data, args.windows), batch_size=args.batch_size, shuffle=True)
    model = CharLM(ckpt=args.grad_ckpt == "true")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    it, epoch = 0, 0
    while it < args.max_iters:
        epoch += 1
        for xb, yb in loader:
            t0 = time.perf_counter()
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), yb.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            it += 1
            value = loss.item()
            ms = (time.perf_counter() - t0) * 1000
            shown = f"{value:.4f}" if math.isfinite(value) else str(value)
            print(
                f"[ep {epoch} | {it}/{args.max_iters}] train_loss={shown} lr={args.lr:.1e} ({ms:.1f} ms/it)"
            )
            if it >= args.max_iters:
                break
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), args.out / "charlm.pt")
    print(f"finished {it} iterations", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
