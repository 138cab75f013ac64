"""The trial-time overhead of a validation pass and the final save, on the reference trainer.

Runs ``python -m trials.reference`` on ``configs/reference/low_vram.yaml`` with ``--steps``
optimizer steps, once per ``reference.validation_steps`` value (0: no pass; 2: what an LTX-2
trial keeps; 30: the trainer's default ``inference_steps``), always saving the final checkpoint,
and prints each phase's seconds from the metrics file (``train_s``, ``validation_s``, ``save_s``)
and the overhead against the training loop. CPU unless a CUDA card is there.

    python scripts/bench_phases.py [--steps 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def run_once(steps: int, validation_steps: int, work: Path) -> dict[str, float]:
    config = yaml.safe_load((ROOT / "configs" / "reference" / "low_vram.yaml").read_text())
    config["optimization"]["steps"] = steps
    config["output_dir"] = str(work / "out")
    config.setdefault("reference", {})["validation_steps"] = validation_steps
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    metrics = work / "metrics.json"
    env = {**os.environ, "AUTOTUNE_METRICS_FILE": str(metrics), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "trials.reference", str(path), "--disable-progress-bars"],
        env=env, check=True, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    data = json.loads(metrics.read_text())
    return {k: float(data[k] or 0.0) for k in ("train_s", "validation_s", "save_s", "step_time_s")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'validation_steps':>16} {'train_s':>8} {'valid_s':>8} {'save_s':>7} {'overhead':>9}")
    for validation_steps in (0, 2, 30):
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(run_once(args.steps, validation_steps, Path(tmp)))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        overhead = (med["validation_s"] + med["save_s"]) / med["train_s"]
        print(
            f"{validation_steps:>16} {med['train_s']:>8.2f} {med['validation_s']:>8.3f} "
            f"{med['save_s']:>7.3f} {overhead:>8.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
