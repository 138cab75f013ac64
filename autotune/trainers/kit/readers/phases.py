"""Which phase of a trial set its memory peak: training, the validation pass, or the final save.

The trial-side hook (``hookfile``'s format) writes a step event at every optimizer step and an
exit event, each with the process's ``max_memory_reserved`` so far (a running maximum). The LTX-2
recipe runs its one validation pass right after optimizer step ``validation_step`` (the last but
one), then trains the last step, then saves the final checkpoint (trainer.py:246-263, 338 in
Lightricks/LTX-2 at 400fd31). So, per process:
- training: the running maximum at step ``validation_step`` (everything before the pass);
- validation: what the step events after it add (the pass, and the step that follows it with
  the pass's leftovers in the cache, as in a real run's next interval);
- save: what the exit event adds (the final checkpoint and the end of the run).
Each phase's figure is the running maximum when it ended, so a phase "set the peak" when it
raised it. Without a validation step (``--no-validation-in-trials``, or a trial of fewer than 3
steps) the steps are training and the exit is the save. A run with no step event never reached a phase (it
died loading, or in its first step or a validation pass before training); an exit event that names
an exception ended in that failure, not in a save. Never raises: a torn or missing file gives
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_count
from autotune.trainers.kit.readers.hookfile import gb_figure, load_event

TRAINING, VALIDATION, SAVE = "training", "validation", "save"
_MAX_BYTES = 64 * 1024 * 1024


@dataclass
class PhasePeaks:
    """Peak reserved GiB at the end of each phase (the largest process's), and which set the peak."""

    peaks_gb: dict[str, float] = field(default_factory=dict)
    stepped: bool = True  # an optimizer step was recorded (else no phase was reached)
    ended_by: str | None = None  # the exception the exit event names (the last phase is that failure)

    @property
    def peak_gb(self) -> float | None:
        return max(self.peaks_gb.values()) if self.peaks_gb else None

    @property
    def peak_phase(self) -> str | None:
        """The first phase to reach the peak (later ones only kept it)."""
        peak = self.peak_gb
        if peak is None:
            return None
        return next(p for p in (TRAINING, VALIDATION, SAVE) if self.peaks_gb.get(p) == peak)

    def describe(self) -> str:
        phase = self.peak_phase
        if phase is None:
            return "no memory events from the hook"
        failure = f" ({self.ended_by})" if self.ended_by else ""
        if not self.stepped:
            return (
                f"no phase was reached: it ended{failure} before its first optimizer step "
                f"({self.peaks_gb[phase]:.2f} GiB reserved by then)"
            )
        if self.ended_by and phase == SAVE:
            parts = [f"{p} {self.peaks_gb[p]:.2f}" for p in (TRAINING, VALIDATION) if p in self.peaks_gb]
            shown = f" ({', '.join(parts)} GiB reserved before it)" if parts else ""
            return (
                f"peak set where it failed ({self.ended_by}, {self.peaks_gb[SAVE]:.2f} GiB reserved){shown}"
            )
        parts = [f"{p} {self.peaks_gb[p]:.2f}" for p in (TRAINING, VALIDATION, SAVE) if p in self.peaks_gb]
        return f"peak set by {phase} ({', '.join(parts)} GiB reserved)"


def read_phase_peaks(path: Path, validation_step: int | None) -> PhasePeaks:
    """Per-phase peaks from the hook file; ``validation_step``: the optimizer step the pass followed."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(_MAX_BYTES).decode("utf-8", errors="replace")
    except (OSError, TypeError, ValueError):
        return PhasePeaks()
    per_process: dict[Any, dict[str, float]] = {}
    stepped, ended_by = False, None
    for line in text.splitlines():
        event = load_event(line)
        if event is None:
            continue
        stepped = stepped or event.get("event") == "step"
        if event.get("event") == "exit" and isinstance(event.get("exception"), str) and event["exception"]:
            ended_by = event["exception"]
        gb = gb_figure(event.get("max_memory_reserved_gb"))
        if gb is None:
            gb = gb_figure(event.get("max_memory_allocated_gb"))
        if gb is None:
            continue
        phase = _phase_of(event, validation_step)
        if phase is None:
            continue
        source = event.get("pid", event.get("rank"))
        peaks = per_process.setdefault(source if isinstance(source, (int, str)) else None, {})
        peaks[phase] = max(peaks.get(phase, 0.0), gb)
    if not per_process:
        return PhasePeaks()
    # The process with the largest peak is the one that sets the card's fate.
    worst = max(per_process.values(), key=lambda p: max(p.values()))
    running = 0.0
    out: dict[str, float] = {}
    for phase in (TRAINING, VALIDATION, SAVE):  # a running maximum never goes down
        if phase in worst:
            running = max(running, worst[phase])
            out[phase] = running
    return PhasePeaks(out, stepped=stepped, ended_by=ended_by)


def _phase_of(event: dict[str, Any], validation_step: int | None) -> str | None:
    kind = event.get("event")
    if kind == "exit":
        return SAVE
    if kind != "step":
        return None
    step = event.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return VALIDATION if validation_step is not None and step > validation_step else TRAINING


def without_step(metrics: TrialMetrics, validation_step: int | None) -> TrialMetrics:
    """The hook's step times less optimizer step ``validation_step + 1``, whose time since the step
    before it holds the validation pass; steady state recomputed by the hook reader's rule."""
    times = list(metrics.step_times_s)
    if validation_step is None or not 0 <= validation_step < len(times):
        return metrics
    del times[validation_step]
    metrics.step_times_s = times
    metrics.step_time_s, metrics.step_time_spread_s = steady_state(times, warmup_count(len(times)))
    return metrics
