"""Reading a trial's output and the trainer's own readings: what every adapter's ``read_metrics`` does."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.core.metrics import Readings, TrialMetrics, merge_metrics
from autotune.core.verdict import combine
from autotune.trainers.kit.common import effective_batch_of, read_trial_record
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME, read_hook_file
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file

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


#: A trainer's own log reader: the trial's output text and its record -> what the log says.
LogReader = Callable[[str, Mapping[str, Any]], TrialMetrics | None]


def read_trial_metrics(
    trial_dir: Path,
    output: str,
    read_log: LogReader,
    *,
    own_rate: bool,
    log_first: bool = False,
    real_batch: Callable[[str, int | None], float | None] | None = None,
) -> TrialMetrics:
    """What an adapter's ``read_metrics`` returns: the hook's lines, the trainer's own readings (the
    metrics file and ``read_log``'s, ``log_first``: the log the better one; ``own_rate``: as in
    ``trainer_reading``) and the record's effective batch (``real_batch``: corrected from the text,
    partial batches counted as partial), combined. Never raises (the contract): an empty reading."""
    try:
        trial_dir = Path(trial_dir)
        record = read_trial_record(trial_dir)
        text = read_output(trial_dir, output)
        log = read_log(text, record) or TrialMetrics()
        file_metrics = read_metrics_file(trial_dir / METRICS_FILE_NAME)
        own = trainer_reading(*((log, file_metrics) if log_first else (file_metrics, log)), own_rate=own_rate)
        asked = effective_batch_of(record)
        batch = real_batch(text, asked) if real_batch is not None else asked
        hook = read_hook_file(trial_dir / HOOK_FILE_NAME)
        return combine(Readings(hook=hook, trainer=own, effective_batch=batch))
    except Exception:  # the contract: a reader never takes the sweep down
        return TrialMetrics()
