"""Reading what the trial-side hook (``trials/hook/sitecustomize.py``) wrote.

The hook appends one JSON object per line: ``{"event": "step", "step": n, "t": ...,
"step_time_s": ..., "max_memory_reserved_gb": x|null, "max_memory_allocated_gb": y|null,
"loss": l|null, "samples": k|null, "counted": bool, "pid": p}`` per optimizer step, a ``card``
line when it emulates a card, and ``{"event": "exit", ..., "steps": n, "loss": l|null}`` at exit.
Several processes (accelerate ranks) may append to one file. A trial killed mid-write leaves a
torn last line, so the reader skips what it cannot parse and never raises. Under autotune's
runner the hook signs every line and the runner keeps only the signed ones
(``autotune.execution.hookseal``): what this reads is what the hook wrote.

- Step time: the steady state of one process's series (ranks step in lockstep), leaving out the
  steps the emulated card counted (its per-op bookkeeping is not the trainer's speed) when any
  others are left, as the reference trainer does.
- Samples per step (``samples_per_step``): where the data loaders' batches were counted
  (``samples``), each process's total over ALL its steps divided by its step count, summed over
  the processes. Under accelerate's one-batch look-ahead (``DataLoaderShard.__iter__`` takes the
  first batch, then the next before yielding the current: accelerate/data_loader.py:586 and 598
  at 16cb6eb) a loader counts ``2,1,1,...,1,0`` per step: the total is right, any window of it
  is not (and a run stopped mid-epoch counts one batch it never trained). No samples/s is
  stated here: the verdict divides what it credits by the step time.
- Peak: ``measured_peak_covers_all`` when the figures are CUDA's own (no card event says the
  emulated card counted them): the allocator saw every phase of the process.
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
from autotune.execution.hookseal import HOOK_FILE_NAME
from autotune.execution.hookseal import MAX_BYTES as _MAX_BYTES  # a runaway file must not eat our memory

__all__ = ["HOOK_FILE_NAME", "load_event", "read_hook_file"]


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
    counted_card = False
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
        if event.get("event") == "card" and event.get("mode") == "counted":
            counted_card = True
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
        metrics.steps_run = len(series)
        metrics.steady_steps = len(times)
        metrics.samples_per_step = _samples_per_step(steps.values())
    if peaks:
        metrics.measured_peak_vram_gb = max(peaks)
        metrics.measured_peak_covers_all = not counted_card
    metrics.losses = [value for _, value in losses]
    return metrics


def _steady(series: list[_Step]) -> list[_Step]:
    """The steps past the warm-up window, without those the emulated card counted (unless that is all)."""
    plain = [s for s in series if not s.counted] or series
    return plain[warmup_count(len(plain)) :] or plain


def _samples_per_step(all_series: Any) -> float | None:
    """Each process's counted samples over all its steps per step, summed over the processes
    (``None`` when no loader was counted)."""
    total: float | None = None
    for series in all_series:
        counted = [s.samples for s in series if s.samples is not None]
        if counted:
            total = (total or 0.0) + sum(counted) / len(counted)
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
