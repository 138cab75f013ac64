"""Noticing a study database that went back in time: the sweep's own count of what it recorded.

Why: SQLite trusts whatever journal lies beside its file, so an old ``studies.db-wal`` (or an
old backup of the file) put back by hand silently rolls the study back, and a resume would run
the lost trials again, or worse, conclude from half of them. Trials are never deleted and a
finished trial never becomes unfinished, so the number of trials and of finished trials only
grow: after each trial it records, the sweep writes both beside the trial folders
(``<workdir>/<study>/.study-generation.json``), and a study database holding fewer than that
was rolled back. What it cannot see: a rollback that loses only attrs written to a trial that
stays in the same state (the pid of a running trial), a mark file put back along with it, and
a rollback to before the study's first trial (it looks like a new study in an old folder).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from optuna.trial import FrozenTrial

from autotune.errors import StorageError

MARK_FILE = ".study-generation.json"


@dataclass(frozen=True)
class Generation:
    trials: int
    finished: int

    def behind(self, other: Generation) -> bool:
        """Whether this holds less than ``other`` (the database went back in time)."""
        return self.trials < other.trials or self.finished < other.finished


def of_trials(trials: Iterable[FrozenTrial]) -> Generation:
    listed = list(trials)
    return Generation(len(listed), sum(1 for t in listed if t.state.is_finished()))


def read_mark(folder: Path) -> Generation | None:
    try:
        data = json.loads((folder / MARK_FILE).read_text(encoding="utf-8"))
        return Generation(int(data["trials"]), int(data["finished"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet (or unreadable): nothing to compare with


def write_mark(folder: Path, generation: Generation) -> None:
    """Best effort (a full disk must not stop the sweep here: the database is the record)."""
    if folder.is_symlink() or not folder.is_dir():
        return  # a study folder that is a link is refused by the sweep: never written through
    tmp = folder / f".{MARK_FILE}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps({"trials": generation.trials, "finished": generation.finished}))
        os.replace(tmp, folder / MARK_FILE)


def check(folder: Path, trials: Iterable[FrozenTrial], database: str) -> None:
    """Refuse a study database that holds fewer trials, or fewer finished ones, than this
    sweep's folder says it recorded."""
    mark = read_mark(folder)
    have = of_trials(trials)
    if mark is None or have.trials == 0 or not have.behind(mark):
        return  # nothing to compare, or a new study (a database deleted on purpose) in an old folder
    raise StorageError(
        f"the study database {database} was rolled back: it holds {have.trials} trials "
        f"({have.finished} finished), but {folder / MARK_FILE} says this sweep recorded {mark.trials} "
        f"({mark.finished} finished). An old journal (studies.db-wal) or backup was put back by hand, "
        "and what was recorded since is lost from it. Put the right files back; or, to go on from the "
        f"database as it is (the lost trials run again), delete {folder / MARK_FILE}"
    )
