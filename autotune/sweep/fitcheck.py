"""Can this sweep measure peaks? Said when it starts, and again after the first trial without one.

Why: a sweep that cannot read any peak memory still ranks trials by speed, but "fits" then
means nothing. A user learning that after a night has lost the night: so the banner says
whether fit can be judged, and if not, why and what to do; and the first ok trial that
finished with no peak (a trainer that reports none, a hook that wrote none) is said at once.
Neither check decides anything: the verdict judges fit from what each trial recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import TrialState

from autotune.core.record import TrialRecord
from autotune.core.units import format_gb
from autotune.store import study as st
from autotune.sweep.setup import SweepPlan

#: How the report and the progress view name a winner whose fit was not measured.
UNMEASURED_WINNER = "fastest; fit not measured"


@dataclass(frozen=True)
class FitCheck:
    """Whether autotune itself can read peaks (``sampled``): where from, or why not and the fix.

    Without a source of its own, only a trainer that reports its own peak (a metrics file,
    LTX-2's statistics) gets its fit judged: the banner says so and makes no claim.
    """

    sampled: bool
    source: str  # where peaks come from ("" when autotune has none)
    why: str = ""  # why autotune can read none
    fix: str = ""  # what the user can do about it

    def banner(self, limit_gb: float, headroom: float) -> str:
        """The banner's fit clause: the line when autotune reads peaks, else what fit depends on."""
        if self.sampled:
            return f"fits at <= {format_gb(limit_gb)} ({headroom:.0%} headroom), peaks from {self.source}"
        return (
            "FIT NOT MEASURED by autotune: judged only if the trainer reports its own peak "
            f"(line {format_gb(limit_gb)}, {headroom:.0%} headroom)"
        )

    def warning(self) -> str | None:
        """The line said right after the banner when autotune reads no peak; ``None`` when it does."""
        if self.sampled:
            return None
        return (
            f"warning: autotune cannot measure peak memory here ({self.why}). Fit is judged only if the "
            "trainer reports its own peak; if it reports none, no trial is called a fit and the winner "
            f"is reported as '{UNMEASURED_WINNER}'. Fix: {self.fix}"
        )


def check_fit(plan: SweepPlan) -> FitCheck:
    """Whether autotune reads peaks in this sweep, from its card and its driver (no trial run yet)."""
    card = plan.card
    if card.indices:
        return FitCheck(True, "NVML, sampling the trial's processes on the card")
    if card.name.startswith("emulated") or (plan.adapter.emulates_card() and plan.opts.vram_gb is not None):
        return FitCheck(True, "the trainer's count on the emulated card")
    nvml = f"NVML not available: {plan.nvml_error}" if plan.nvml_error else "no GPU visible to NVML"
    if plan.opts.vram_gb is None:
        fix = (
            "on CPU peaks come from the hook's emulated card: pass --vram-gb N (the card you will rent) "
            "with the hook on; on a GPU, install or load the NVIDIA driver"
        )
    else:
        fix = (
            f"--vram-gb {plan.opts.vram_gb:g} plans for that card, but nothing emulates it here: leave "
            "the trial-side hook on so it emulates the card and counts its memory, or run on a GPU "
            "with the NVIDIA driver"
        )
    return FitCheck(False, "", f"{nvml}, and no emulated card", fix)


def first_without_peak(study: st.SweepStudy, number: int, attrs: Mapping[str, Any]) -> str | None:
    """The warning for trial ``number`` when it is the study's first ok trial with no peak; else ``None``.

    Read from the study, not kept in memory: a resume or a sibling card says it once per study
    (the banner says it on every run when it is known up front).
    """
    record = TrialRecord(number, attrs=attrs)
    if not record.is_ok or record.fit_measured:
        return None
    for t in study.trials((TrialState.COMPLETE,)):
        other = TrialRecord.from_trial(t)
        if other.number != number and other.is_ok and not other.fit_measured:
            return None
    return (
        f"warning: trial {number} finished ok but no peak memory was read (not from the trainer, "
        "not from the hook, not from NVML), so its fit is not measured. Trials are ranked by speed "
        f"only; the winner will be reported as '{UNMEASURED_WINNER}'. Fix: run on a GPU with the "
        "NVIDIA driver, or on CPU pass --vram-gb N with the trial-side hook on (it counts memory "
        "on an emulated card); a trainer run without the hook must report its own peak"
    )
