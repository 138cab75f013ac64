"""Reading a trial's output and the trainer's own readings: what every adapter's ``read_metrics`` does."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.core.metrics import TrialMetrics, merge_metrics

#: How much of each of a trial's logs is read (its end: the metrics and the failure sit there).
LOG_TAIL_BYTES = 32 * 1024 * 1024


def read_output(trial_dir: Path, output: str, *paths: Path) -> str:
    """The trial's output: as given, else the last ``LOG_TAIL_BYTES`` of each of ``paths`` (default
    the runner's ``stdout.log`` and ``stderr.log``), stdout first."""
    if output:
        return output
    parts = []
    for path in paths or (trial_dir / "stdout.log", trial_dir / "stderr.log"):
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - LOG_TAIL_BYTES))
                parts.append(fh.read().decode("utf-8", errors="replace"))
        except (OSError, TypeError, ValueError):
            continue
    return "\n".join(parts)


def trainer_reading(*readings: TrialMetrics, own_rate: bool) -> TrialMetrics:
    """The trainer's own readings merged, the better first; ``own_rate``: its stated samples/s is a
    figure to keep (DeepSpeed's, a metrics file's), else only its step time counts (a progress bar's
    rate is of its own ``it``, not of samples)."""
    merged = merge_metrics(*readings)
    if not own_rate and merged.step_time_s is not None:
        merged.samples_per_s = None
    return merged
