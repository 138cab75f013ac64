"""One exception root, so the CLI can turn every expected failure into a clean message.

``UsageError`` and its children mean the input was wrong (exit 2); every other
``AutotuneError`` is a run-time failure (exit 1) unless it says otherwise
(``CandidateRefused`` 2, ``SweepInterrupted`` 130). Messages say what was wrong,
where, and how to fix it: they are shown to users as they are. Every exception
class autotune defines lives here, so the whole family is seen in one place.
"""

from __future__ import annotations

from pathlib import Path


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""

    exit_code = 1


class UsageError(AutotuneError):
    """Bad command-line usage or bad input (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file is unreadable, malformed, or has unknown or invalid keys."""


class ScriptLineRefused(ConfigError):
    """A launcher script line that cannot be read without a shell (``config.shellscript``): the
    parser raises it with the line number and why; the caller words it with the file name."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line = line
        self.why = why


class UnknownTrainerError(UsageError):
    """A trainer name that no adapter is registered for."""


class UnsupportedCardError(UsageError):
    """The card is below what the trainer supports and ``--force`` was not given."""


class StudyMismatchError(UsageError):
    """A resumed sweep's settings differ from the stored study's."""


class ConfigEditError(AutotuneError):
    """autotune's own edit of a config came out wrong (a bug of ours, not the user's file)."""


class StorageError(AutotuneError):
    """The study database cannot be opened, read or written."""


class GpuBusyError(AutotuneError):
    """GPU memory did not drain after a trial; running on would give false OOMs."""


class BaselineFailedError(AutotuneError):
    """The baseline trial failed for a reason that no relaxation can fix."""


class CandidateRefused(AutotuneError):
    """A candidate this trainer cannot run at all; the message says why (nothing was started).

    Not a ``ConfigError``: a bad user config stops the command (exit 2), while a refused
    candidate is recorded as the trial's ``config_error`` and the sweep goes on. Should one
    reach the command line (``report --write-config`` of such a candidate), it is the input
    that asked for it, so it exits 2 like a usage error.
    """

    exit_code = 2


class LaunchError(AutotuneError):
    """The trial command could not be started at all (missing program, bad cwd)."""


class TrialOutputError(AutotuneError):
    """The trial folder could not be written (disk full, read-only, gone); the trial was ended.

    Not the candidate's fault: the sweep records the trial ``interrupted`` so that a
    resume, once there is room, runs it again.
    """

    def __init__(self, message: str, path: Path, errno: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno


class TrialDirRefused(TrialOutputError):
    """A trial folder (or the study folder above it) is a symbolic link, or leads out of the
    workdir: nothing is written through it. The user's to fix, so it exits 2."""

    exit_code = 2


class ClaimLost(AutotuneError):
    """This worker was cut off from the database longer than its lease; another took its candidate."""


class SweepInterrupted(AutotuneError):
    """Ctrl-C or SIGTERM: the running trial was ended and recorded ``interrupted``."""

    exit_code = 130


class NvmlUnavailable(AutotuneError):
    """NVML cannot be used here (no library, no driver, no GPU); ``str()`` says why.

    Usually an answer, not a failure: the probe and the sweep catch it and carry on
    without a GPU. Should it ever reach the command line, the reason is shown (exit 1).
    """


class StudyNotFoundError(UsageError):
    """No study database at the given place, or no study of that name in it."""


class ReportError(AutotuneError):
    """The report or the winning config cannot be produced from what the study holds."""
