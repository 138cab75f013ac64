"""Which phase set each trial's peak, and which data bucket was judged (LTX-2 trials).

As each trial recorded it when it was judged (``memory_note``, from the hook's events and the
trial record: ``sweep.measure.memory_note``): the report reads no trial's hook file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from autotune.report.model import Report, TrialRow
from autotune.trainers.kit.common import read_trial_record

#: Replaces the short-run warning when the trials ran the validation pass and the save.
PHASES_EXERCISED = (
    "The trials were short runs with one validation pass (inference steps cut to 2) and the "
    "final checkpoint save; the largest of the training, validation and save peaks was judged."
)
#: With ``--no-validation-in-trials``.
VALIDATION_SKIPPED = (
    "Validation was not run in the trials (--no-validation-in-trials): the full run's validation "
    "pass, which holds the VAE decoder and the text encoder's output beside the model, can peak "
    "above every trial's figure and run out of memory. Keep the headroom, or sweep again without "
    "the flag."
)


def phase_lines(rows: Sequence[TrialRow]) -> list[str]:
    """One line per trial that recorded a memory note: the phase that set its peak, the bucket."""
    return [f"Trial {row.number}: {row.memory_note}." for row in rows if row.memory_note]


def validation_ran(rows: Sequence[TrialRow], folder_of: Callable[[TrialRow], Path | None]) -> bool:
    """Whether any trial was rendered with a validation pass."""
    for row in rows:
        folder = folder_of(row)
        if folder is not None and isinstance(read_trial_record(folder).get("validation_step"), int):
            return True
    return False


def validation_skipped(report: Report) -> bool:
    """``--no-validation-in-trials`` (stored as the adapter's ``trial_validation`` option)."""
    return str(report.trainer_options.get("trial_validation", "")).lower() == "false"
