"""Reading a trial's output and finishing its metrics: what every adapter's ``read_metrics`` does."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.core.metrics import TrialMetrics

_MAX_LOG_BYTES = 32 * 1024 * 1024


def read_output(trial_dir: Path, output: str) -> str:
    """The trial's output: as given, else what the runner wrote to ``stdout.log``/``stderr.log``."""
    if output:
        return output
    parts = []
    for name in ("stdout.log", "stderr.log"):
        try:
            with open(trial_dir / name, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - _MAX_LOG_BYTES))
                parts.append(fh.read().decode("utf-8", errors="replace"))
        except (OSError, TypeError, ValueError):
            continue
    return "\n".join(parts)


def finish_metrics(
    metrics: TrialMetrics, effective_batch: float | None, *, keep_reported: bool, counted: float | None = None
) -> TrialMetrics:
    """Samples/s: ``counted`` (the data loaders' real batches, read by the hook) when there is one,
    else from the steady step time and the batch we asked for (the trainer's own figure is coarse)."""
    if counted is not None:
        metrics.samples_per_s = counted
        return metrics
    if effective_batch and metrics.step_time_s and not (keep_reported and metrics.samples_per_s):
        metrics.samples_per_s = effective_batch / metrics.step_time_s
    return metrics
