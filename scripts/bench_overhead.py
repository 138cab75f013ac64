#!/usr/bin/env python3
"""Benchmark the orchestrator's own cost per trial as a study grows: at trial 50, 500 and 2000.

For each size N, one fresh study: a real sweep runs the baseline (``autotune sweep --trainer
command`` over ``tests/fakes/soak_trainer.py``, the fastest trainer there is: stdlib only, one
metrics file, exit), then N - 1 synthetic finished trials are written through the real store
API (``SweepStudy.start_trial`` / ``finish_trial``, attrs cloned from the real baseline, each
with its own trial folder and log), and the sweep is resumed for ``--measure`` more real trials.
A trial's overhead is the wall time from its start to the next trial's start, less the trainer
subprocess's own wall time (``wall_s``): the loop's bookkeeping, the strategy's pick, the
study reads and writes. The first two measured trials warm up and are left out; the figure is
the median of the rest. Beside it: the orchestrator's own CPU seconds per trial (all its
threads, not the trainer's: the figure to trust on a busy host, where wall time waits for a core),
its peak RSS, and, on the largest study, the
wall time of ``autotune status`` and ``autotune report`` (each a fresh process, as a user runs it).

Targets: overhead <= 0.3 s per trial at 500 and at 2000 trials (flat: the ratio to trial 50's
stays near 1); ``status`` and ``report`` under 2 s on the 2000-trial study. Exit 1 when one is
missed. Example:

    python scripts/bench_overhead.py               # 50, 500, 2000
    python scripts/bench_overhead.py --sizes 50,500 --measure 8
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SOAK_TRAINER = ROOT / "tests" / "fakes" / "soak_trainer.py"
TARGET_OVERHEAD_S = 0.3
TARGET_READ_S = 2.0
QUANTS = [f"q{i:03d}" for i in range(160)]  # 160 x 2 x 2 x 4 batch sizes = 2560 candidates
MAX_BATCH = 4


def write_inputs(folder: Path, quants: list[str] = QUANTS) -> tuple[Path, Path, str]:
    """The soak sweep's knob file, baseline and template (also the soak test's): ``quants`` many
    quantization values, so the grid is large while every trial of the soak trainer is instant."""
    knobs = folder / "knobs.yaml"
    knobs.write_text(
        json.dumps(
            {
                "knobs": [
                    {"name": "quantization", "values": quants},
                    {"name": "optimizer", "values": ["adamw8bit", "adamw"]},
                    {"name": "batch_size", "type": "int"},
                    {"name": "gradient_checkpointing", "values": [True, False]},
                ],
                "fidelity": {"quantization": quants[-1], "optimizer": "adamw"},
            }
        )
    )
    base = folder / "base.yaml"
    base.write_text(
        "quantization: q000\noptimizer: adamw8bit\nbatch_size: 1\ngradient_checkpointing: true\n"
        "gradient_accumulation_steps: 1\n"
    )
    template = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(SOAK_TRAINER))} "
        "{quantization} {optimizer} {batch_size} {gradient_checkpointing}"
    )
    return knobs, base, template


def _sweep(folder: Path, max_trials: int, profile: Path | None = None) -> dict[str, Any]:
    """One ``run_sweep`` (default: claimed, as ``autotune sweep`` runs) in this process."""
    import resource

    import optuna

    from autotune.sweep.api import run_sweep
    from autotune.sweep.options import SweepOptions

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs, base, template = write_inputs(folder)
    opts = SweepOptions(
        trainer="command", config=base, workdir=folder / "runs", study="bench", cmd=template,
        knob_file=knobs, vram_gb=16, steps=3, max_batch_size=MAX_BATCH, max_trials=max_trials,
        trial_timeout_s=60, stall_timeout_s=60, hook=False,
    )  # fmt: skip
    log = _CpuAtStarts(open(folder / "sweep.log", "a", encoding="utf-8"))  # noqa: SIM115 - closed below
    try:
        if profile is None:
            result = run_sweep(opts, stream=cast(TextIO, log), tty=False, nvml=False)
        else:
            import cProfile

            prof = cProfile.Profile()
            result = prof.runcall(run_sweep, opts, stream=cast(TextIO, log), tty=False, nvml=False)
            prof.dump_stats(str(profile))
    finally:
        log.close()
    cpu = [b - a for (_, a), (_, b) in itertools.pairwise(log.at_start)]
    return {
        "trials_run": result.trials_run,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu": cpu,
    }


class _CpuAtStarts:
    """The sweep's progress stream: the orchestrator's CPU seconds (all its threads, not the
    trainer's) at every "trial N started" line, so the per-trial cost can be read on a busy host."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.at_start: list[tuple[int, float]] = []

    def write(self, s: str) -> int:
        m = re.match(r"trial (\d+) started", s)
        if m:
            self.at_start.append((int(m.group(1)), time.process_time()))
        return int(self.out.write(s))

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self.out.close()


def _prefill(folder: Path, total: int) -> None:
    """Finished synthetic trials up to ``total``, cloned from the real baseline, through the store API."""
    import optuna

    from autotune.core.record import TrialRecord
    from autotune.store.storage import open_storage
    from autotune.store.study import SweepStudy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{(folder / 'runs' / 'studies.db').as_posix()}")
    study = SweepStudy.load(storage, "bench")
    (base,) = study.trials()
    base_params = dict(base.params)
    base_attrs = dict(base.user_attrs)
    base_log = Path(str(base_attrs["log_path"])).read_text(encoding="utf-8")
    combos = itertools.product(QUANTS[::-1], ["adamw", "adamw8bit"], range(1, MAX_BATCH + 1), [False, True])
    made = 1
    for q, opt, bs, ckpt in combos:
        params = {"quantization": q, "optimizer": opt, "batch_size": bs, "gradient_checkpointing": ckpt}
        if params == base_params:
            continue
        if made >= total:
            break
        start_attrs = {k: v for k, v in base_attrs.items() if k not in ("outcome", "reason")}
        start_attrs["role"] = "search"
        trial = study.start_trial(params, base.distributions, start_attrs)
        step_s = (
            0.1
            * bs**0.9
            / (1.0 + int(q[1:]) / 100)
            * (1.2 if ckpt else 1.0)
            * (1.05 if opt == "adamw8bit" else 1.0)
        )
        folder_t = folder / "runs" / "bench" / f"trial-{trial.number:04d}"
        folder_t.mkdir(parents=True, exist_ok=True)
        (folder_t / "stdout.log").write_text(base_log, encoding="utf-8")
        attrs = dict(base_attrs)
        attrs.update(
            TrialRecord.attrs_of(
                trial_dir=str(folder_t), log_path=str(folder_t / "stdout.log"), step_time_s=step_s,
                samples_per_s=bs / step_s, peak_vram_gb=0.001 * (1 + bs) ** 0.5, role="search",
            )
        )  # fmt: skip
        attrs["launch_digest"] = f"synthetic-{trial.number}"
        study.finish_trial(trial, attrs, bs / step_s)
        made += 1


def _overheads(folder: Path, first: int) -> list[float]:
    """Per measured trial: next start - own start - trainer wall (the last trial has no next)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{folder / 'runs' / 'studies.db'}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT t.number, t.datetime_start, a.value_json FROM trials t LEFT JOIN trial_user_attributes a "
        "ON a.trial_id = t.trial_id AND a.key = 'wall_s' WHERE t.number >= ? ORDER BY t.number",
        (first,),
    ).fetchall()
    conn.close()
    from datetime import datetime

    starts = [
        (n, datetime.fromisoformat(s).timestamp(), float(json.loads(w)) if w else None) for n, s, w in rows
    ]
    out = []
    for (_, s0, wall), (_, s1, _) in itertools.pairwise(starts):
        if wall is not None:
            out.append(s1 - s0 - wall)
    return out


def _timed_cli(args: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``autotune`` command in a fresh process."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"autotune {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_size(size: int, measure: int, keep: Path | None, profile: Path | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-overhead-{size}-"))
    try:
        _sweep(folder, 1)  # the real baseline
        t0 = time.monotonic()
        _prefill(folder, size)
        prefill_s = time.monotonic() - t0
        figures = _sweep(folder, size + measure, profile)
        over = _overheads(folder, size)[2:]  # two warm-up trials left out
        cpu = figures["cpu"][2:]
        row: dict[str, Any] = {
            "size": size,
            "prefill_s": round(prefill_s, 1),
            "overhead_s": round(statistics.median(over), 3) if over else None,
            "overhead_max_s": round(max(over), 3) if over else None,
            "measured": len(over),
            "cpu_s": round(statistics.median(cpu), 3) if cpu else None,
            "rss_mb": round(figures["rss_mb"], 1),
        }
        runs = folder / "runs"
        status = _timed_cli(["status", "--workdir", str(runs), "--study", "bench"], folder)
        report = _timed_cli(
            ["report", "--workdir", str(runs), "--study", "bench", "-o", str(folder / "r.md")], folder
        )
        row["status_s"], row["status_cpu_s"] = round(status[0], 2), round(status[1], 2)
        row["report_s"], row["report_cpu_s"] = round(report[0], 2), round(report[1], 2)
        return row
    finally:
        if keep is not None:
            shutil.copytree(folder, keep / folder.name, dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes", default="50,500,2000", help="study sizes at which to measure (default 50,500,2000)"
    )
    p.add_argument("--measure", type=int, default=10, help="real trials run at each size (default 10)")
    p.add_argument(
        "--profile", metavar="DIR", help="write a cProfile of each measured sweep to DIR/size-N.prof"
    )
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in a fresh process: JSON out
    args = p.parse_args(argv)
    prof_dir = Path(args.profile) if args.profile else None
    if args.one is not None:
        prof = prof_dir / f"size-{args.one}.prof" if prof_dir else None
        print(json.dumps(one_size(args.one, args.measure, None, prof)))
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: write sizes like 50,500,2000")
    if not sizes or min(sizes) < 2 or args.measure < 4:
        p.error("--sizes must be at least 2 each and --measure at least 4")
    rows = []
    for size in sizes:  # one fresh process each: its RSS is its own
        cmd = [sys.executable, __file__, "--one", str(size), "--measure", str(args.measure)]
        if prof_dir:
            prof_dir.mkdir(parents=True, exist_ok=True)
            cmd += ["--profile", str(prof_dir)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  size {size}: {rows[-1]}", file=sys.stderr, flush=True)
    first = rows[0]["overhead_s"] or 0.0
    print(
        f"{'trials':>7} {'overhead s/trial':>17} {'max':>6} {'x first':>8} {'CPU s/trial':>12} {'RSS MB':>7} "
        f"{'status s (CPU)':>15} {'report s (CPU)':>15}"
    )
    for r in rows:
        ratio = (r["overhead_s"] / first) if first else float("nan")
        print(
            f"{r['size']:>7} {r['overhead_s']:>17.3f} {r['overhead_max_s']:>6.2f} {ratio:>8.2f} {r['cpu_s']:>12.3f} "
            f"{r['rss_mb']:>7.1f} {r['status_s']:>8.2f} ({r['status_cpu_s']:.2f}) {r['report_s']:>8.2f} ({r['report_cpu_s']:.2f})"
        )
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ok = all(r["overhead_s"] <= TARGET_OVERHEAD_S for r in rows)
    big = max(rows, key=lambda r: r["size"])
    ok = ok and big["status_s"] < TARGET_READ_S and big["report_s"] < TARGET_READ_S
    print(
        f"targets: overhead <= {TARGET_OVERHEAD_S} s/trial at every size, status and report < {TARGET_READ_S} s "
        f"at {big['size']} trials: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
