"""The orchestrator's overhead per trial: our sweep with a trainer that exits at once, the real
wall time between two trial starts less the trainer's own (``scripts/bench_sweep.py --overhead``)."""

from __future__ import annotations

import itertools
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# --- orchestrator overhead ----------------------------------------------------------------------

#: A trainer that exits at once: ``sh`` writes the metrics file (samples/s = batch size, so the
#: search keeps raising batches) and ends. Braces are doubled for the command template.
INSTANT_SCRIPT = (
    'printf "{{\\"samples_per_s\\": %s, \\"step_time_s\\": 1.0, \\"peak_vram_gb\\": %s}}" '
    '{batch_size} {batch_size} > "$AUTOTUNE_METRICS_FILE"'
)


@dataclass
class Overhead:
    intervals_s: list[float]  # between consecutive trial starts, real wall time
    trainer_s: float  # the instant trainer's own wall time, run alone (median)
    sweeps: int
    cpu_s_per_trial: float  # the sweep processes' CPU time (start-up included) per trial: load-proof
    load: tuple[float, float]  # 1-minute load average before and after: a busy machine inflates wall time

    @property
    def per_trial_s(self) -> list[float]:
        return [x - self.trainer_s for x in self.intervals_s]

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_trial_s)

    def describe(self) -> str:
        """The overhead line of the report."""
        q = statistics.quantiles(self.per_trial_s, n=10)
        return (
            f"Orchestrator overhead: {self.median_s:.3f} s per trial (median over {len(self.intervals_s)} "
            f"trials in {self.sweeps} sweeps of ours; p10 {q[0]:.3f} s, p90 {q[-1]:.3f} s): real wall time "
            f"between trial starts, less the trainer's own {self.trainer_s * 1000:.0f} ms (a trainer that "
            f"exits at once, timed alone). CPU time of the sweep process per trial, start-up included: "
            f"{self.cpu_s_per_trial:.3f} s. Load average {self.load[0]:.1f} -> {self.load[1]:.1f} "
            f"on {os.cpu_count()} CPUs."
        )


def instant_trainer_s(where: Path, repeat: int = 30) -> float:
    """The instant trainer's own wall time: the same command run alone, median of ``repeat``."""
    argv = ["sh", "-c", INSTANT_SCRIPT.replace("{{", "{").replace("}}", "}").replace("{batch_size}", "4")]
    env = {**os.environ, "AUTOTUNE_METRICS_FILE": str(where / "alone.json")}
    times = []
    for _ in range(repeat):
        t = time.monotonic()
        subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL)
        times.append(time.monotonic() - t)
    return statistics.median(times)


def measure_overhead(workdir: Path, trials: int) -> Overhead:
    """Our sweep with the instant trainer, sweep after sweep, until ``trials`` intervals are timed."""
    import optuna

    where = workdir / "overhead"
    where.mkdir(parents=True, exist_ok=True)
    intervals: list[float] = []
    sweeps = n_trials = 0
    cpu = 0.0
    load_before = os.getloadavg()[0]
    while len(intervals) < trials:
        sweeps += 1
        study = f"overhead-{sweeps}"
        argv = [
            *("sweep", "--trainer", "command", "--cmd", f"sh -c {shlex.quote(INSTANT_SCRIPT)}"),
            *("--vram-gb", "1000", "--max-batch-size", "64", "--allow-extra-savers"),
            *("--workdir", str(where), "--study", study),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(where / f"{study}.log", "wb") as log:
            proc = subprocess.run(
                [sys.executable, "-m", "autotune", *argv],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(
                f"the overhead sweep {study} exited {proc.returncode}; see {where / study}.log"
            )
        loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{where / 'studies.db'}")
        starts = sorted(t.datetime_start for t in loaded.get_trials(deepcopy=False) if t.datetime_start)
        if len(starts) < 2:
            raise RuntimeError(f"the overhead sweep {study} ran {len(starts)} trial(s); it needs several")
        intervals += [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
        n_trials += len(starts)
    load = (load_before, os.getloadavg()[0])
    return Overhead(intervals[:trials], instant_trainer_s(where), sweeps, cpu / n_trials, load)
