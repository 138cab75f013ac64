"""One exception root, so the CLI can turn every expected failure into a clean message.

``UsageError`` and its children mean the input was wrong (exit 2); every other
``AutotuneError`` is a run-time failure (exit 1). Messages say what was wrong,
where, and how to fix it: they are shown to users as they are.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""

    exit_code = 1


class UsageError(AutotuneError):
    """Bad command-line usage or bad input (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file is unreadable, malformed, or has unknown or invalid keys."""


class UnknownTrainerError(UsageError):
    """A trainer name that no adapter is registered for."""


class UnsupportedCardError(UsageError):
    """The card is below what the trainer supports and ``--force`` was not given."""


class StudyMismatchError(UsageError):
    """A resumed sweep's settings differ from the stored study's."""


class StorageError(AutotuneError):
    """The study database cannot be opened, read or written."""


class GpuBusyError(AutotuneError):
    """GPU memory did not drain after a trial; running on would give false OOMs."""


class BaselineFailedError(AutotuneError):
    """The baseline trial failed for a reason that no relaxation can fix."""


class StudyNotFoundError(UsageError):
    """No study database at the given place, or no study of that name in it."""


class ReportError(AutotuneError):
    """The report or the winning config cannot be produced from what the study holds."""
