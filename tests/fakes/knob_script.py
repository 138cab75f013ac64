"""A plain training script of its own (no knob of autotune's), for the ``--cmd`` knob tests.

Usage::

    python knob_script.py --batch-size N --steps N [--swap K] [--precision bf16|fp32] [--config PATH]

Its own flags only: ``--swap K`` moves K blocks to the CPU (each saves memory and costs time,
like the block swapping of video trainers), ``--precision`` picks the activation width. With
``--config PATH`` it reads ``swap:`` and ``precision:`` lines from that flat YAML (stdlib only).
It appends its argv and folder as one JSON line to ``$KNOB_FAKE_LAUNCHES`` (tests count launches),
then runs a small known memory/speed model: past ``$KNOB_FAKE_CARD_GB`` (default 4) it prints
torch's OOM text and exits 1; else it prints ``iter N: loss X, time Yms`` lines and writes
``$AUTOTUNE_METRICS_FILE`` (step time and peak), the one file it knows of autotune.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ACT_GB = {"bf16": 0.6, "fp32": 1.0}
SWAP_SAVES_GB = 0.4


def model(batch_size: int, swap: int, precision: str) -> tuple[float, float]:
    """(peak GiB, seconds per step) of one run."""
    peak = 1.5 + ACT_GB[precision] * batch_size - SWAP_SAVES_GB * swap
    step = (0.02 + 0.01 * batch_size) * (1 + 0.25 * swap) * (1.4 if precision == "fp32" else 1.0)
    return peak, step


def _from_config(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, sep, value = line.partition(":")
            if sep and not line.startswith((" ", "#")):
                out[key.strip()] = value.strip()
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--swap", type=int, default=None)
    parser.add_argument("--precision", choices=sorted(ACT_GB), default=None)
    parser.add_argument("--config", default=None)
    args = parser.parse_args(argv)
    cfg = _from_config(args.config) if args.config else {}
    swap = args.swap if args.swap is not None else int(cfg.get("swap", "0"))
    precision = args.precision or cfg.get("precision", "bf16")
    launches = os.environ.get("KNOB_FAKE_LAUNCHES")
    if launches:
        with open(launches, "a", encoding="utf-8") as fh:
            record = {"argv": argv, "cwd": os.getcwd(), "swap": swap, "precision": precision}
            fh.write(json.dumps(record) + "\n")
    peak, step = model(args.batch_size, swap, precision)
    card = float(os.environ.get("KNOB_FAKE_CARD_GB", "4"))
    if peak > card:
        print(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
            f"capacity of {card:.2f} GiB of which 0.10 GiB is free.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    for i in range(1, args.steps + 1):
        print(f"iter {i}: loss {1.0 / i:.4f}, time {step * 1000:.2f}ms", flush=True)
    time.sleep(0.01)
    path = os.environ.get("AUTOTUNE_METRICS_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"step_time_s": step, "step_time_spread_s": step * 0.01, "peak_vram_gb": peak}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
