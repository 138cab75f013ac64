"""Reading what the trial-side hook (``trials/hook/sitecustomize.py``) wrote.

The hook appends one JSON object per line: ``{"event": "step", "step": n, "t": ...,
"step_time_s": ..., "max_memory_reserved_gb": x|null, "max_memory_allocated_gb": y|null,
"loss": l|null, "samples": k|null, "counted": bool, "pid": p}`` per optimizer step, a ``card``
line when it emulates a card, and ``{"event": "exit", ..., "steps": n, "loss": l|null}`` at exit.
Several processes (accelerate ranks) may append to one file. A trial killed mid-write leaves a
torn last line, so the reader skips what it cannot parse and never raises.

- Step time: the steady state of one process's series (ranks step in lockstep), leaving out the
  steps the emulated card counted (its per-op bookkeeping is not the trainer's speed) when any
  others are left, as the reference trainer does.
- Samples/s: where the data loaders' real batches were counted (``samples``), each process's
  mean samples per steady step over its steady step time, summed over the processes; else none
  (the adapter then credits batch x accumulation x GPUs over the step time).
- Losses: every recorded loss, NaN and inf included (JSON's ``NaN``/``Infinity``), so a
  non-finite one makes the trial ``nan`` through ``TrialMetrics.nan_loss``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_count

HOOK_FILE_NAME = "hook.jsonl"
_MAX_BYTES = 64 * 1024 * 1024  # a runaway file must not eat the orchestrator's memory


@dataclass(frozen=True)
class _Step:
    step: int
    time_s: float
    samples: int | None
    counted: bool


def read_hook_file(path: Path) -> TrialMetrics:
    """Step times (steady state), real samples/s, losses and the peak memory from the hook's lines."""
    metrics = TrialMetrics(source="hook")
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_BYTES)
    except (OSError, TypeError, ValueError):
        return metrics
    text = data.decode("utf-8", errors="replace")
    steps: dict[int | str | None, list[_Step]] = {}
    peaks: list[float] = []
    losses: list[tuple[int, float]] = []
    for line in text.splitlines():
        event = load_event(line)
        if event is None:
            continue
        peak = gb_figure(event.get("max_memory_reserved_gb"))
        if peak is None:
            peak = gb_figure(event.get("max_memory_allocated_gb"))
        if peak is not None:
            peaks.append(peak)
        loss = _loss(event.get("loss"))
        if loss is not None and event.get("event") in ("step", "exit"):
            losses.append((len(losses), loss))
        if event.get("event") == "step":
            step_time = gb_figure(event.get("step_time_s"))
            step = event.get("step")
            if step_time is not None and isinstance(step, int) and _whole(step):
                source = event.get("pid", event.get("rank"))
                samples = event.get("samples")
                steps.setdefault(source if isinstance(source, (int, str)) else None, []).append(
                    _Step(step, step_time, samples if _whole(samples) else None, event.get("counted") is True)
                )
    if steps:
        # One process's series (the one with most steps): ranks step in lockstep.
        longest: list[_Step] = max(steps.values(), key=len)
        series = sorted(longest, key=lambda s: s.step)
        metrics.step_times_s = [s.time_s for s in series]
        times = [s.time_s for s in _steady(series)]
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(times, 0)
        metrics.samples_per_s = _samples_per_s(steps.values())
    if peaks:
        metrics.measured_peak_vram_gb = max(peaks)
    metrics.losses = [value for _, value in losses]
    return metrics


def _steady(series: list[_Step]) -> list[_Step]:
    """The steps past the warm-up window, without those the emulated card counted (unless that is all)."""
    plain = [s for s in series if not s.counted] or series
    return plain[warmup_count(len(plain)) :] or plain


def _samples_per_s(all_series: Any) -> float | None:
    """Each process's real batch (its mean counted samples per steady step) over its steady step
    time (the median, as for every step time: one stalled step must not skew it), summed over the
    processes. The batch-credit rule, with the batch the data loader really yielded."""
    total: float | None = None
    for series in all_series:
        steady = _steady(sorted(series, key=lambda s: s.step))
        counted = [s.samples for s in steady if s.samples is not None]
        step_time, _ = steady_state([s.time_s for s in steady], 0)
        if counted and step_time:
            total = (total or 0.0) + sum(counted) / len(counted) / step_time
    return total


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _loss(value: Any) -> float | None:
    """A recorded loss: any float (NaN and inf kept: they are the point), or their spellings as text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(value.strip())
    return None


def load_event(line: str) -> dict[str, Any] | None:
    """One hook line as a JSON object, or ``None`` (a torn last line, another process's text)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def gb_figure(value: Any) -> float | None:
    """A finite, non-negative number from a hook line (memory, step time), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None
