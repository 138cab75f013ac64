"""Reading what the trial-side hook (``trials/hook/sitecustomize.py``) wrote.

The hook appends one JSON object per line: ``{"event": "step", "step": n, "t": ...,
"step_time_s": ..., "max_memory_reserved_gb": x|null, "max_memory_allocated_gb": y|null,
"loss": l|null, "samples": k|null, "counted": bool, "pid": p}`` per optimizer step, a ``card``
line when it emulates a card, and ``{"event": "exit", ..., "steps": n, "loss": l|null}`` at exit.
Several processes (accelerate ranks) may append to one file. A trial killed mid-write leaves a
torn last line, so the reader skips what it cannot parse and never raises. Under autotune's
runner the hook signs every line and the runner keeps only the signed ones
(``autotune.execution.hookseal``): what this reads is what the hook wrote.

- Backward events (``{"event": "backward", "backward": n, ...}``, the same fields): the hook writes
  them only until a process's first optimizer step. With no step line at all (a script that
  updates its weights by hand, no ``torch.optim`` optimizer) they are the steps: each interval
  between two ``backward()`` calls is one iteration; the first (from ``import torch`` to the first
  backward) is no step and is dropped, and the reading says so (``timing_note``).
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

__all__ = ["ALL_COUNTED_NOTE", "BACKWARD_NOTE", "HOOK_FILE_NAME", "load_event", "read_hook_file"]

#: What a trial timed at its backward() calls says (its reason, in the report and status).
BACKWARD_NOTE = "steps timed at backward(): the script steps no torch.optim optimizer"
#: What a trial says when the emulated card counted every step it was timed by (a run no longer
#: than the card counts, or a script with no optimizer step: the card stops at optimizer steps).
ALL_COUNTED_NOTE = "every timed step was counted by the emulated card, so its bookkeeping is in the step time"


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
    backwards: dict[int | str | None, list[_Step]] = {}
    peaks: list[float] = []
    counted_card = False
    losses: list[float] = []
    backward_losses: list[float] = []
    for line in text.splitlines():
        event = load_event(line)
        if event is None:
            continue
        peak = gb_figure(event.get("max_memory_reserved_gb"))
        if peak is None:
            peak = gb_figure(event.get("max_memory_allocated_gb"))
        if peak is not None:
            peaks.append(peak)
        kind = event.get("event")
        loss = _loss(event.get("loss"))
        if loss is not None and kind in ("step", "exit", "backward"):
            (backward_losses if kind == "backward" else losses).append(loss)
        if kind == "card" and event.get("mode") == "counted":
            counted_card = True
        if kind in ("step", "backward"):
            _add_step(steps if kind == "step" else backwards, event, str(kind))
    ran: int | None = None  # weight updates run, when they were backward() calls
    if not any(steps.values()) and any(backwards.values()):
        # No optimizer stepped: the backward() calls are the steps, less each process's first
        # interval (import torch to its first backward: start-up, not a step).
        ran = max(len(s) for s in backwards.values())
        steps = {pid: sorted(s, key=lambda x: x.step)[1:] for pid, s in backwards.items()}
        steps = {pid: s for pid, s in steps.items() if s}
        losses = backward_losses  # the exit line repeats the last of them
        metrics.timing_note = BACKWARD_NOTE
    if steps:
        # One process's series (the one with most steps): ranks step in lockstep.
        longest: list[_Step] = max(steps.values(), key=len)
        series = sorted(longest, key=lambda s: s.step)
        metrics.step_times_s = [s.time_s for s in series]
        steady = _steady(series)
        times = [s.time_s for s in steady]
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(times, 0)
        if steady and all(s.counted for s in steady):
            metrics.timing_note = "; ".join(n for n in (metrics.timing_note, ALL_COUNTED_NOTE) if n)
        metrics.steps_run = len(series)
        metrics.steady_steps = len(times)
        metrics.samples_per_step = _samples_per_step(steps.values())
    if ran is not None:
        metrics.steps_run = ran  # every backward() was an update; one interval fewer is timed
    if peaks:
        metrics.measured_peak_vram_gb = max(peaks)
        metrics.measured_peak_covers_all = not counted_card
    metrics.losses = losses
    return metrics


def _add_step(into: dict[int | str | None, list[_Step]], event: dict[str, Any], kind: str) -> None:
    """A step (or backward) line into its process's series; one without a usable time or number is skipped."""
    step_time = gb_figure(event.get("step_time_s"))
    step = event.get(kind)
    if step_time is not None and isinstance(step, int) and _whole(step):
        source = event.get("pid", event.get("rank"))
        samples = event.get("samples")
        into.setdefault(source if isinstance(source, (int, str)) else None, []).append(
            _Step(step, step_time, samples if _whole(samples) else None, event.get("counted") is True)
        )


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
