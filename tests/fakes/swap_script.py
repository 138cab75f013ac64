"""A user's own block-swapping training script (no torch: a modelled model), for ``--cmd`` sweeps.

    swap_script.py --blocks-to-swap N --batch-size B --steps S

What it models, in miniature: a 20-block transformer whose swapped blocks live in host RAM (really
held: MIB_PER_BLOCK MiB each, touched, so the runner's RSS sampling sees them) and are copied to the
card when used; device memory is the resident blocks plus activations per sample. Its speed has a
sweet spot at SWEET blocks (prefetch overlaps compute best there: more swap is leaner AND faster up
to it, as SeedVR2#153 found 36 swapped blocks faster than 32), then slows again.

Each step lasts PACE_S of wall time (a sleep standing in for the work, so the trial lives long
enough for the runner's RSS sampling, every 0.2 s, to see the swapped blocks held); the step times it
reports are the modelled ones. It prints ``iter N: loss X, time Yms`` lines (nanoGPT's format, which the command adapter reads), and
writes the trial-side hook's JSON lines to ``$AUTOTUNE_HOOK_FILE`` itself (the hook has no torch to
watch here). Past ``$AUTOTUNE_EMULATED_VRAM_GB`` it dies as PyTorch does: a CUDA OOM traceback, exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # tests/fakes: the hook's line format
from hookline import hook_text

BLOCKS = 20
BLOCK_GB = 0.8  # each resident block on the card
ACTIVATION_GB = 1.5  # per sample
SWEET = 13
PACE_S = 0.1
MIB_PER_BLOCK = 32  # host RAM each swapped block really holds (scaled down from ~0.8 GB)


def device_gb(swap: int, batch: int) -> float:
    return 2.0 + BLOCK_GB * (BLOCKS - swap) + ACTIVATION_GB * batch


def step_seconds(swap: int, batch: int) -> float:
    return 0.1 * batch * (1 + 0.05 * batch) + 0.004 * abs(swap - SWEET) ** 1.5


def hook_line(path: str | None, **fields: object) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(hook_text({**fields, "pid": os.getpid()}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks-to-swap", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    if not 0 <= args.blocks_to_swap <= BLOCKS - 1:
        ap.error(f"--blocks-to-swap must be 0..{BLOCKS - 1}")
    held = bytearray(args.blocks_to_swap * MIB_PER_BLOCK * 2**20)
    for i in range(0, len(held), 4096):  # touched: resident, as pinned host copies are
        held[i] = 1
    hook = os.environ.get("AUTOTUNE_HOOK_FILE")
    card = os.environ.get("AUTOTUNE_EMULATED_VRAM_GB")
    need = device_gb(args.blocks_to_swap, args.batch_size)
    if card is not None and need > float(card):
        print(
            "Traceback (most recent call last):\n"
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need - float(card):.2f} GiB. "
            f"GPU 0 has a total capacity of {float(card):.2f} GiB of which 0.00 GiB is free.",
            file=sys.stderr,
        )
        return 1
    step = step_seconds(args.blocks_to_swap, args.batch_size)
    for n in range(args.steps):
        time.sleep(PACE_S)
        loss = 2.0 / (1 + n)
        hook_line(
            hook, event="step", step=n + 1, step_time_s=step, loss=loss, counted=False,
            max_memory_reserved_gb=need, max_memory_allocated_gb=need, samples=args.batch_size,
        )  # fmt: skip
        print(f"iter {n}: loss {loss:.4f}, time {step * 1000:.2f}ms", flush=True)
    hook_line(hook, event="exit", steps=args.steps, loss=2.0 / args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
