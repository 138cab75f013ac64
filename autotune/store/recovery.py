"""A dead sweep's or worker's trial: recognised, its processes ended, failed as interrupted.

Why a module of its own: a trial left RUNNING by a process that died must not stay RUNNING for
ever, must not hold the card through an orphaned trainer, and must be run again; yet a trial
of a live sweep or worker, here or on another machine, must never be touched. Two ways lead
here: a resume finds trials its dead predecessor on this machine left (``recover_stale``), and
a worker finds claims whose holder died (``reap_stale``). Processes are ended by
``autotune.execution.proctree`` alone; this module only says which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import Outcome
from autotune.core.record import TrialRecord
from autotune.execution.proctree import kill_tree, read_process_file
from autotune.store.claims import ClaimBook
from autotune.store.identity import ProcessIdentity
from autotune.store.optuna_private import study_storage, write_trial_attrs

if TYPE_CHECKING:
    from autotune.store.study import SweepStudy


def is_interrupted(trial: FrozenTrial) -> bool:
    """Failed because its run was cut short (not the candidate's fault): it is run again."""
    return TrialRecord.from_trial(trial).is_interrupted


# --- a dead sweep's trials, found on resume -------------------------------------------------------------


@dataclass
class Recovered:
    """A trial a dead orchestrator left RUNNING, now marked FAIL/interrupted."""

    number: int
    params: dict[str, Any]
    killed_pids: list[int]


def recover_stale(
    study: SweepStudy, me: ProcessIdentity, *, kill: Callable[[FrozenTrial], list[int]] | None = None
) -> list[Recovered]:
    """Mark trials that a dead orchestrator of this machine left RUNNING as FAIL/``interrupted``.

    ``kill`` ends what is left of each such trial's processes (returns the pids it
    ended); ``end_trial_processes`` is the default. Trials of live orchestrators
    and of other machines are left alone.
    """
    kill = kill or end_trial_processes
    recovered = []
    for t in study.trials((TrialState.RUNNING,)):
        owner = ProcessIdentity.from_attrs(t.user_attrs)
        if owner is not None and (not owner.same_machine(me) or (owner.alive() and owner != me)):
            continue
        killed = kill(t)
        reason = "the orchestrator stopped while this trial ran (found on resume); it is run again"
        attrs = TrialRecord.attrs_of(outcome=Outcome.INTERRUPTED.value, reason=reason)
        spent = last_activity_s(t)
        if spent is not None:  # not the hours between the crash and this resume
            attrs.update(TrialRecord.attrs_of(spent_s=spent))
        study.set_trial_attrs(t, attrs)
        study.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        study.refresh()
        recovered.append(Recovered(t.number, dict(t.params), killed))
    return recovered


def end_trial_processes(trial: FrozenTrial, *, grace_s: float = 5.0) -> list[int]:
    """End an orphaned trial: its recorded process group, and every process carrying its mark.

    The pid is only trusted when its start time matches the recorded one (pids are reused).
    The mark is the one the sweep recorded, or the runner's in ``process.json`` when the sweep
    died before recording it.
    """
    rec = TrialRecord.from_trial(trial)
    folder = rec.trial_dir
    record = read_process_file(Path(folder)) if folder is not None else None
    marks = (rec.process_mark, record.mark if record else None, rec.trial_tag)
    mark = next((m for m in marks if isinstance(m, str) and m), None)
    return kill_tree(rec.pid, mark=mark, grace_s=grace_s, pid_started=rec.pid_start, pgid=rec.pgid)


def last_activity_s(trial: FrozenTrial) -> float | None:
    """Seconds from a trial's start to the last write in its folder: the time it really ran."""
    folder = TrialRecord.from_trial(trial).trial_dir
    if trial.datetime_start is None or folder is None:
        return None
    try:
        last = max((p.stat().st_mtime for p in Path(folder).iterdir()), default=None)
    except OSError:
        return None
    if last is None:
        return 0.0
    return max(0.0, last - trial.datetime_start.timestamp())


# --- a dead worker's claims -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reaped:
    """A dead worker's trial, failed as interrupted so its candidate runs again."""

    number: int
    params: dict[str, Any]
    reason: str
    local: bool  # the dead worker ran on this machine (same pid space): its leftovers can be ended here
    killed: tuple[int, ...] = ()  # the leftover processes ended here (``end_processes``)


#: Ends what is left of a dead worker's trial on this machine (its trainer may outlive the worker:
#: own session); given the trial's id, returns the pids it ended.
EndProcesses = Callable[[int], Sequence[int]]


def fail_trial(
    study: optuna.Study, trial_id: int, reason: str, *, outcome: str = Outcome.INTERRUPTED.value
) -> bool:
    """FAIL a RUNNING trial with ``outcome`` and ``reason``; False when it had finished already."""
    storage = study_storage(study)
    try:
        write_trial_attrs(
            cast(RDBStorage, storage), trial_id, TrialRecord.attrs_of(outcome=outcome, reason=reason)
        )
        return bool(storage.set_trial_state_values(trial_id, TrialState.FAIL))
    except UpdateFinishedTrialError:
        return False


def reap_stale(
    study: optuna.Study, book: ClaimBook, *, end_processes: EndProcesses | None = None
) -> list[Reaped]:
    """Fail the trials of workers that died; each is failed by one reaper only.

    In this order, so that a reaper killed at any point (a sweep is SIGKILLed like any process)
    leaves work the next reaper finishes, never a trial RUNNING forever or a trainer nobody ends:
    take the claim (``take_stale``: ``stale``, its worker fenced); end the dead worker's leftover
    processes when it ran on this machine (``end_processes``) while its trial still RUNS; fail the
    trial as interrupted; mark the claim ``reaped``. Claims left ``stale`` by a reaper that stopped
    on the way (``unfinished_reaps``) are finished here the same way. Several reapers finishing
    the same claim at once is harmless: ending processes twice ends them once, and only one of
    them fails the trial (the others find it finished) and reports it.
    """
    why_unfinished = "its worker ({}) stopped, and so did the worker that took its claim before recording it"
    todo = [(row, why_unfinished.format(row.worker)) for row in book.unfinished_reaps()]
    todo += book.take_stale()
    reaped = []
    storage = study_storage(study)
    for row, why in todo:
        if row.trial_id is None:
            continue  # claimed, but its trial was never created: the claim is simply gone
        local = row.holder.same_machine(book.worker)
        trial = storage.get_trial(row.trial_id)
        killed: Sequence[int] = ()
        if local and end_processes is not None and trial.state == TrialState.RUNNING:
            killed = end_processes(row.trial_id)  # before the trial is failed: see above
        reason = f"interrupted: {why}; the candidate will be run again"
        if fail_trial(study, row.trial_id, reason):
            reaped.append(Reaped(trial.number, row.params, reason, local, tuple(killed)))
        book.mark_reaped(row)
    return reaped
