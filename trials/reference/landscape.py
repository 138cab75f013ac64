"""Measure the reference trainer's memory/speed landscape: every knob combination, one real run each.

``python -m trials.reference.landscape [BASELINE.yaml] [--steps N] [--batch-sizes 1,2,4,8]
[--vram-gb N]`` runs quantization x optimizer x checkpointing x batch size from the baseline and
prints a table of peak memory, steady step time and samples/s, and which runs ran out of memory.
A developer's tool for calibrating the demo card (``reference.emulated_vram_gb``); the sweep proper
is autotune's job.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

DEFAULT_BASELINE = Path(__file__).resolve().parents[2] / "configs" / "reference" / "low_vram.yaml"


def variant(
    base: dict[str, Any], quant: str | None, opt: str, ckpt: bool, batch: int, steps: int
) -> dict[str, Any]:
    cfg = json.loads(json.dumps(base))
    cfg["acceleration"]["quantization"] = quant
    cfg["optimization"].update(
        optimizer_type=opt,
        enable_gradient_checkpointing=ckpt,
        batch_size=batch,
        steps=steps,
        gradient_accumulation_steps=1,
    )
    cfg["reference"]["data"]["num_samples"] = max(cfg["reference"]["data"]["num_samples"], batch)
    return cfg


def run_one(cfg: dict[str, Any], workdir: Path, name: str) -> dict[str, Any]:
    config = workdir / f"{name}.yaml"
    metrics = workdir / f"{name}.json"
    cfg = {**cfg, "output_dir": str(workdir / name)}
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    env = {**os.environ, "AUTOTUNE_METRICS_FILE": str(metrics)}
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "trials.reference", str(config), "--disable-progress-bars"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    result: dict[str, Any] = {"rc": proc.returncode, "wall_s": wall, "cpu_s": cpu}
    if proc.returncode == 0 and metrics.exists():
        result.update(json.loads(metrics.read_text(encoding="utf-8")))
    elif "OutOfMemoryError" in proc.stderr:
        result["oom"] = proc.stderr.strip().splitlines()[-1][:200]
    else:
        result["error"] = (proc.stdout + proc.stderr).strip()[-400:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trials.reference.landscape", description=__doc__)
    parser.add_argument(
        "baseline",
        nargs="?",
        type=Path,
        default=DEFAULT_BASELINE,
        help="baseline config (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per run (default: 20)")
    parser.add_argument(
        "--batch-sizes", default="1,2,4,8", help="comma-separated batch sizes (default: 1,2,4,8)"
    )
    parser.add_argument(
        "--vram-gb", type=float, default=None, help="emulated card size (default: the baseline's)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write all results to this JSON file")
    args = parser.parse_args(argv)
    base = yaml.safe_load(args.baseline.read_text(encoding="utf-8"))
    if args.vram_gb is not None:
        base["reference"]["emulated_vram_gb"] = args.vram_gb
    card = base["reference"].get("emulated_vram_gb")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    rows = []
    print(f"card: {card} GiB emulated; {args.steps} steps per run")
    print(
        f"{'quant':12} {'optimizer':9} {'ckpt':5} {'batch':>5} {'peak MiB':>9} {'step s':>7} {'samples/s':>9} {'wall s':>6} {'cpu s':>6}  outcome"
    )
    with tempfile.TemporaryDirectory(prefix="landscape-") as tmp:
        for quant, opt, ckpt, batch in itertools.product(
            ["int8-quanto", None], ["adamw8bit", "adamw"], [True, False], batches
        ):
            name = f"{quant or 'none'}-{opt}-{'ckpt' if ckpt else 'nockpt'}-b{batch}"
            res = run_one(variant(base, quant, opt, ckpt, batch, args.steps), Path(tmp), name)
            rows.append(
                {"quantization": quant, "optimizer": opt, "checkpointing": ckpt, "batch_size": batch, **res}
            )
            if "peak_vram_gb" in res:
                cells = (
                    f"{res['peak_vram_gb'] * 1024:9.1f} {res['step_time_s']:7.3f} {res['samples_per_s']:9.2f}"
                )
                outcome = "ok"
            else:
                cells = f"{'-':>9} {'-':>7} {'-':>9}"
                outcome = "OOM" if "oom" in res else f"error rc={res['rc']}: {res.get('error', '')[-120:]}"
            print(
                f"{quant or 'none':12} {opt:9} {ckpt!s:5} {batch:5d} {cells} {res['wall_s']:6.1f} {res['cpu_s']:6.1f}  {outcome}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
