"""Reading ``AUTOTUNE_METRICS_FILE``: one JSON object a trainer may write at the end of a run.

Fields (all optional): ``step_time_s``, ``peak_vram_gb``, ``samples_per_s``,
``loss``; the reference trainer adds ``step_times_s`` and ``losses`` (one per
optimizer step). The reader never raises: a missing, empty, truncated or
garbage file gives an empty ``TrialMetrics``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_count

METRICS_ENV = "AUTOTUNE_METRICS_FILE"
METRICS_FILE_NAME = "trainer-metrics.json"
_MAX_BYTES = 16 * 1024 * 1024


def read_metrics_file(path: Path) -> TrialMetrics:
    metrics = TrialMetrics(source="metrics-file")
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(_MAX_BYTES).decode("utf-8", errors="replace"))
    except (OSError, TypeError, ValueError, RecursionError):
        return metrics
    if not isinstance(data, dict):
        return metrics
    times = _numbers(data.get("step_times_s"))
    if times:
        metrics.step_times_s = times
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(times, warmup_count(len(times)))
    explicit = _positive(data.get("step_time_s"))
    if explicit is not None:
        metrics.step_time_s = explicit
    spread = _positive(data.get("step_time_spread_s"), allow_zero=True)
    if spread is not None:
        metrics.step_time_spread_s = spread
    metrics.samples_per_s = _positive(data.get("samples_per_s"))
    metrics.steps_per_s = _positive(data.get("steps_per_s"))
    metrics.trainer_peak_vram_gb = _positive(data.get("peak_vram_gb"), allow_zero=True)
    losses = data.get("losses")
    if isinstance(losses, list):
        metrics.losses = [float(x) for x in losses if _is_number(x)]
    elif _is_number(data.get("loss")) or str(data.get("loss")).strip().lower() in ("nan", "inf", "-inf"):
        metrics.losses = [float(data["loss"])]
    return metrics


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value: Any, allow_zero: bool = False) -> float | None:
    if not _is_number(value):
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        return None
    return value


def _numbers(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if _positive(v) is not None]
