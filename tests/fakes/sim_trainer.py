#!/usr/bin/env python3
"""A fake trainer driven by a simulated landscape: LTX-2's output, simulated time, no sleeping.

Usage:
    sim_trainer.py --landscape SPEC.json (--config TRIAL.yaml | --param k=v ...) [--steps N]
                   [--run N | --runs-ledger FILE]

``SPEC.json`` is ``Landscape.to_json()``. The candidate comes from an LTX-2 style
config (``acceleration.quantization``, ``optimization.optimizer_type``,
``optimization.batch_size``, ``optimization.enable_gradient_checkpointing``,
``optimization.steps``) or from ``--param`` pairs with the study's knob names.

On a fit it prints LTX-2's Step lines and its statistics block to stdout and exits 0;
on an OOM it prints a torch CUDA OOM traceback to stderr and exits 1. When
``AUTOTUNE_METRICS_FILE`` is set it writes the metrics JSON there (with
``simulated_seconds``: the trial's simulated wall time, model load included).

A run of params measured before draws new noise: ``--run N`` names the attempt, or
``--runs-ledger FILE`` counts the earlier ok runs of the same params in FILE (one JSON
line per ok run, appended here), as the in-process benchmark counts them in its history.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from landscape import Landscape


def _params_from_config(path: Path) -> tuple[dict[str, Any], int | None]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    acc = data.get("acceleration") or {}
    opt = data.get("optimization") or {}
    params = {
        "quantization": acc.get("quantization") or "none",
        "optimizer": opt.get("optimizer_type", "adamw"),
        "batch_size": int(opt.get("batch_size", 1)),
        "gradient_checkpointing": bool(opt.get("enable_gradient_checkpointing", False)),
    }
    steps = opt.get("steps")
    return params, int(steps) if steps is not None else None


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return "none"
    try:
        return int(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--landscape", required=True, type=Path, help="landscape spec JSON")
    ap.add_argument("--config", type=Path, help="LTX-2 style trial config YAML")
    ap.add_argument("--param", action="append", default=[], help="knob=value (study names)")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: the config's, else 50)")
    ap.add_argument("--run", type=int, default=0, help="attempt number: varies the noise")
    ap.add_argument(
        "--runs-ledger", type=Path, help="count earlier ok runs of these params here (the attempt)"
    )
    ap.add_argument("--disable-progress-bars", action="store_true", help="accepted, as LTX-2 does")
    args = ap.parse_args(argv)

    land = Landscape.from_json(args.landscape.read_text(encoding="utf-8"))
    params: dict[str, Any] = {}
    steps = None
    if args.config:
        params, steps = _params_from_config(args.config)
    for pair in args.param:
        key, _, value = pair.partition("=")
        params[key] = _value(value)
    steps = args.steps or steps or 50
    run = args.run
    key = json.dumps(sorted((k, str(v)) for k, v in params.items()))
    if args.runs_ledger is not None and args.runs_ledger.is_file():
        run = sum(1 for line in args.runs_ledger.read_text(encoding="utf-8").splitlines() if line == key)
    result = land.simulate(params, steps=steps, run=run)
    if args.runs_ledger is not None and result.outcome == "ok":
        with open(args.runs_ledger, "a", encoding="utf-8") as fh:
            fh.write(key + "\n")
    metrics: dict[str, Any] = {"simulated_seconds": result.seconds, "outcome": result.outcome}

    if result.outcome == "oom":
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "scripts/train.py", line 42, in <module>', file=sys.stderr)
        print(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {result.oom_tried_gb:.2f} GiB. "
            f"GPU 0 has a total capacity of {land.card_gb:.2f} GiB of which {result.oom_free_gb:.2f} GiB is free. "
            "Including non-PyTorch memory, this process has "
            f"{land.card_gb - (result.oom_free_gb or 0):.2f} GiB memory in use.",
            file=sys.stderr,
        )
        _write_metrics(metrics)
        return 1

    assert result.step_time_s is not None and result.peak_vram_gb is not None
    batch = int(params["batch_size"])
    elapsed = 0.0
    for i, t in enumerate(result.step_times_s[: steps + 2], start=1):
        elapsed += t
        if i % 20 == 0 or i == steps:
            loss = 0.2 / (1 + 0.01 * i)
            print(
                f"Step {i}/{steps} - Loss: {loss:.4f}, LR: 1.00e-04, Time/Step: {t:.2f}s, "
                f"Total Time: {int(elapsed // 3600)}h {int(elapsed % 3600 // 60)}m"
            )
    train_s = sum(result.step_times_s)
    print("📊 Training Statistics:")
    print(f" - Total time: {train_s / 60:.1f} minutes")
    print(f" - Training speed: {steps / train_s:.2f} steps/second")
    print(f" - Samples/second: {steps * batch / train_s:.2f}")
    print(f" - Peak GPU memory: {result.peak_vram_gb:.2f} GB")
    metrics.update(
        step_time_s=result.step_time_s,
        step_times_s=list(result.step_times_s),
        samples_per_s=result.samples_per_s,
        peak_vram_gb=result.peak_vram_gb,
        loss=0.2 / (1 + 0.01 * steps),
    )
    _write_metrics(metrics)
    return 0


def _write_metrics(metrics: dict[str, Any]) -> None:
    target = os.environ.get("AUTOTUNE_METRICS_FILE")
    if target:
        Path(target).write_text(json.dumps(metrics), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
