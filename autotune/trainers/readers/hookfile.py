"""Reading what the trial-side hook (``trials/hook/sitecustomize.py``) wrote.

The hook appends one JSON object per line: ``{"event": "step", "step": n, "t": ...,
"step_time_s": ..., "max_memory_reserved_gb": x|null, "max_memory_allocated_gb": y|null}``
per optimizer step, and ``{"event": "exit", ..., "steps": n}`` at exit. Several
processes (accelerate ranks) may append to one file. A trial killed mid-write
leaves a torn last line, so the reader skips what it cannot parse and never raises.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_count

HOOK_FILE_NAME = "hook.jsonl"
_MAX_BYTES = 64 * 1024 * 1024  # a runaway file must not eat the orchestrator's memory


def read_hook_file(path: Path) -> TrialMetrics:
    """Step times (steady state: first window left out) and peak reserved memory from the hook's lines."""
    metrics = TrialMetrics(source="hook")
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_BYTES)
    except (OSError, TypeError, ValueError):
        return metrics
    text = data.decode("utf-8", errors="replace")
    steps: dict[Any, list[tuple[int, float]]] = {}
    peaks: list[float] = []
    for line in text.splitlines():
        event = _load(line)
        if event is None:
            continue
        peak = _number(event.get("max_memory_reserved_gb"))
        if peak is None:
            peak = _number(event.get("max_memory_allocated_gb"))
        if peak is not None:
            peaks.append(peak)
        if event.get("event") == "step":
            step_time = _number(event.get("step_time_s"))
            step = event.get("step")
            if step_time is not None and isinstance(step, int) and not isinstance(step, bool):
                source = event.get("pid", event.get("rank"))
                steps.setdefault(source if isinstance(source, (int, str)) else None, []).append(
                    (step, step_time)
                )
    if steps:
        # One process's series (the one with most steps): ranks step in lockstep.
        series = max(steps.values(), key=len)
        times = [t for _, t in sorted(series, key=lambda st: st[0])]
        metrics.step_times_s = times
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(times, warmup_count(len(times)))
    if peaks:
        metrics.measured_peak_vram_gb = max(peaks)
    return metrics


def _load(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None
