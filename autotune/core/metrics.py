"""What a trial measured, whichever trainer and source it came from."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TrialMetrics:
    """Measures read from one trial. Every field may be missing: logs get truncated.

    ``step_time_s`` is the steady-state optimizer-step time (warm-up left out),
    ``step_time_spread_s`` its spread (half the interquartile range, or the
    standard deviation when few samples), ``trainer_peak_vram_gb`` the trainer's
    own figure (GiB, as the LTX-2 trainer prints it; ``trainer_peak_device_wide`` when it
    is the whole card's memory, every process included), ``measured_peak_vram_gb``
    autotune's independent one (the hook's, the trial's own processes).
    """

    step_time_s: float | None = None
    step_time_spread_s: float | None = None
    step_times_s: list[float] = field(default_factory=list)
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    trainer_peak_vram_gb: float | None = None
    trainer_peak_device_wide: bool | None = None
    measured_peak_vram_gb: float | None = None
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
        """True when there is a speed to rank the trial by."""
        return self.samples_per_s is not None or self.step_time_s is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
