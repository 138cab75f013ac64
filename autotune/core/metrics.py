"""What a trial measured, whichever trainer and source it came from."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class TrialMetrics:
    """Measures read from one trial. Every field may be missing: logs get truncated.

    ``step_time_s`` is the steady-state optimizer-step time (warm-up left out),
    ``step_time_spread_s`` its spread (half the interquartile range, or the
    standard deviation when few samples), ``trainer_peak_vram_gb`` the trainer's
    own figure (GiB, as the LTX-2 trainer prints it; ``trainer_peak_device_wide`` when it
    is the whole card's memory, every process included), ``measured_peak_vram_gb``
    autotune's independent one (the hook's, the trial's own processes; ``measured_peak_covers_all``
    when it saw every phase on the device: the hook on CUDA, NVML per process).
    ``trainer_step_time_s`` / ``trainer_samples_per_s``: the trainer's own figures, kept beside ours
    when ours decided; ``samples_per_step``: what the data loaders yielded per optimizer step over
    the whole run (the hook's count; a one-batch prefetch shifts a batch between steps, never
    changes the total).
    """

    step_time_s: float | None = None
    step_time_spread_s: float | None = None
    step_times_s: list[float] = field(default_factory=list)
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    trainer_peak_vram_gb: float | None = None
    trainer_peak_device_wide: bool | None = None
    measured_peak_vram_gb: float | None = None
    measured_peak_covers_all: bool | None = None
    trainer_step_time_s: float | None = None
    trainer_samples_per_s: float | None = None
    samples_per_step: float | None = None
    timed_by: str | None = None  # the reading whose step times decided the speed: "hook", "trainer"
    #: How the steps were timed when it is not the usual way (the hook timing backward() calls).
    timing_note: str | None = None
    losses: list[float] = field(default_factory=list)
    #: Optimizer steps the trial really ran (a script that cannot take ``{steps}`` runs its own length).
    steps_run: int | None = None
    #: Steps the step time was taken over (past the warm-up, full batches); few: too short to time.
    steady_steps: int | None = None
    source: str = ""  # which reader produced them: "ltx2-log", "metrics-file", "hook", ...

    @property
    def nan_loss(self) -> bool:
        return any(not math.isfinite(x) for x in self.losses)

    @property
    def measured(self) -> bool:
        """True when there is a speed to rank the trial by: a positive, finite samples/s or step time."""
        return any(
            isinstance(v, (int, float)) and math.isfinite(v) and v > 0
            for v in (self.samples_per_s, self.step_time_s)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def effective_batch(batch_size: int, gradient_accumulation_steps: int, data_parallel: int) -> int:
    """The samples one optimizer step trains: the per-GPU batch x accumulation x the model copies
    training side by side (the adapter's ``data_parallel``, not every GPU: pipeline stages share
    one batch). Computed here only; a trial records it and everyone else reads that."""
    return max(1, int(batch_size)) * max(1, int(gradient_accumulation_steps)) * max(1, int(data_parallel))


#: Fields that travel with ``step_time_s`` in a merge: they describe the same series of steps.
_WITH_STEP_TIME = ("step_time_s", "step_time_spread_s", "step_times_s", "steady_steps", "timing_note")


def merge_metrics(*readings: TrialMetrics) -> TrialMetrics:
    """Field by field, the first reading that has a value wins; sources are listed in order.

    Losses: a reading that saw a non-finite loss wins over the others (any reader's NaN
    makes the trial ``nan``)."""
    merged = TrialMetrics()
    # A spread belongs to the step time it was measured with: never one reader's time, another's spread.
    timed = next((r for r in readings if r.step_time_s is not None), None)
    peaked = next((r for r in readings if r.trainer_peak_vram_gb is not None), None)
    for f in fields(TrialMetrics):
        if f.name == "source":
            continue
        if timed is not None and f.name in _WITH_STEP_TIME:
            setattr(merged, f.name, getattr(timed, f.name))
            continue
        if f.name == "trainer_peak_device_wide":  # says what the merged trainer figure is
            merged.trainer_peak_device_wide = peaked.trainer_peak_device_wide if peaked else None
            continue
        if f.name == "losses" and (diverged := [r for r in readings if r.nan_loss]):
            merged.losses = list(diverged[0].losses)
            continue
        for reading in readings:
            value = getattr(reading, f.name)
            if value not in (None, [], ""):
                setattr(merged, f.name, value)
                break
    merged.source = "+".join(r.source for r in readings if r.source and has_any(r))
    return merged


def has_any(m: TrialMetrics) -> bool:
    return any(getattr(m, f.name) not in (None, [], "") for f in fields(TrialMetrics) if f.name != "source")


@dataclass
class Readings:
    """What one trial's sources said, each as read, before anything is chosen between them.

    ``hook``: the trial-side hook's (synchronized, every optimizer step); ``trainer``: the
    trainer's own figures (its log lines, statistics, progress bar, its metrics file), merged in
    the order its adapter knows; ``effective_batch``: the samples one optimizer step trains as the
    trial was rendered (batch x accumulation x GPUs, partial batches as the trainer printed them);
    ``loader_count_right``: the hook's data-loader count is what the trainer consumed (no
    accelerate one-batch prefetch, no drop-last batching the batch credit already knows).
    ``verdict.combine`` makes them one ``TrialMetrics``: the only place that decides the order.
    """

    hook: TrialMetrics = field(default_factory=TrialMetrics)
    trainer: TrialMetrics = field(default_factory=TrialMetrics)
    effective_batch: float | None = None
    loader_count_right: bool = False
