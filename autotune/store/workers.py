"""Several workers on one study: each starts only candidates nobody else runs or ran.

The claims (``autotune.store.claims``) decide who runs a candidate; this module ties them to the
Optuna study. A worker's step is ``start_next``: fail the trials of dead workers (so their
candidates become free), build the history from the study's trials plus the candidates
claimed elsewhere whose trial is not visible yet, ask the caller's strategy for a candidate,
claim it, and only then create its RUNNING trial with the params set (one transaction, so
no other worker ever sees a half-made trial). A lost race costs one more look at the history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import Outcome
from autotune.errors import StorageError
from autotune.store.claims import Claim, ClaimBook, count_runs

# Each lost race means another worker just claimed something, so the history moved on;
# this many in a row means something is wrong (for instance a strategy ignoring in-flight work).
MAX_LOST_RACES = 100

Propose = Callable[[Sequence[FrozenTrial], Sequence[Mapping[str, Any]]], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Started:
    """This worker holds the claim and its RUNNING trial; run it, then ``record``/``abandon``."""

    claim: Claim
    trial_id: int
    number: int
    params: dict[str, Any]


@dataclass(frozen=True)
class Waiting:
    """Nothing to start now, but candidates run elsewhere whose results may open new ones."""

    in_flight: int


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
    storage = study._storage
    try:
        storage.set_trial_user_attr(trial_id, "outcome", outcome)
        storage.set_trial_user_attr(trial_id, "reason", reason)
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
    storage = study._storage
    for row, why in todo:
        if row.trial_id is None:
            continue  # claimed, but its trial was never created: the claim is simply gone
        local = row.place == book.worker.place
        trial = storage.get_trial(row.trial_id)
        killed: Sequence[int] = ()
        if local and end_processes is not None and trial.state == TrialState.RUNNING:
            killed = end_processes(row.trial_id)  # before the trial is failed: see above
        reason = f"interrupted: {why}; the candidate will be run again"
        if fail_trial(study, row.trial_id, reason):
            reaped.append(Reaped(trial.number, row.params, reason, local, tuple(killed)))
        book.mark_reaped(row)
    return reaped


def create_running_trial(
    study: optuna.Study,
    params: Mapping[str, Any],
    distributions: Mapping[str, BaseDistribution],
    *,
    user_attrs: Mapping[str, Any] | None = None,
    system_attrs: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """A RUNNING trial with its params already set, in one transaction; returns (id, number).

    Not ``enqueue_trial`` + ``ask``: enqueued trials are shared, so a concurrent ``ask`` of
    another worker may pop ours and run it under its own claim.
    """
    missing = set(params) ^ set(distributions)
    if missing:
        raise ValueError(f"params and distributions name different knobs: {sorted(missing)}")
    template = FrozenTrial(
        number=-1,
        state=TrialState.RUNNING,
        value=None,
        datetime_start=datetime.now(),
        datetime_complete=None,
        params=dict(params),
        distributions=dict(distributions),
        user_attrs=dict(user_attrs or {}),
        system_attrs=dict(system_attrs or {}),
        intermediate_values={},
        trial_id=-1,
    )
    template._validate()
    storage = study._storage
    trial_id = storage.create_new_trial(study._study_id, template_trial=template)
    return trial_id, storage.get_trial_number_from_id(trial_id)


def claim_next(
    study: optuna.Study,
    book: ClaimBook,
    propose: Propose,
    *,
    on_reaped: Callable[[Reaped], None] | None = None,
    read_trials: Callable[[], Sequence[FrozenTrial]] | None = None,
    end_processes: EndProcesses | None = None,
) -> Claim | Waiting | None:
    """Claim the strategy's next candidate; the caller then creates its trial and ``attach``-es it.

    ``propose(trials, in_flight)`` is the strategy: it sees every trial (RUNNING ones are
    running elsewhere) plus the params of candidates claimed elsewhere whose trial this
    snapshot does not show as RUNNING yet, and returns params or None. Returns the claim,
    ``Waiting`` (None proposed while work is in flight: look again later) or None (done).
    ``read_trials`` reads the study's trials afresh (default: ``study.get_trials``); a strategy
    that reads them itself should read that same snapshot. ``end_processes``: see ``reap_stale``.
    """
    read = read_trials or (lambda: study.get_trials(deepcopy=False))
    for _ in range(MAX_LOST_RACES):
        for r in reap_stale(study, book, end_processes=end_processes):
            if on_reaped is not None:
                on_reaped(r)
        # Trials first, then claims: a claim made after the trials were read still shows as
        # in flight, and one whose trial finished in between is harmless (its trial is done).
        trials = read()
        running_ids = {t._trial_id for t in trials if t.state == TrialState.RUNNING}
        claims = book.in_flight()
        in_flight = [c.params for c in claims if c.trial_id not in running_ids]
        params = propose(trials, in_flight)
        if params is None:
            return Waiting(in_flight=len(claims)) if claims else None
        seen = count_runs([t.params for t in trials if t.state != TrialState.WAITING], params)
        claim = book.try_claim(params, seen)
        if claim is not None:
            return claim
        # Lost the race: another worker claimed this run of it a moment ago. Look again.
    raise StorageError(
        f"lost {MAX_LOST_RACES} races in a row for a candidate of study {study.study_name!r}: the "
        "strategy keeps proposing candidates that other workers hold; this is a bug, please report it"
    )


def attach_or_fail(study: optuna.Study, book: ClaimBook, claim: Claim, trial_id: int) -> bool:
    """Tie a new trial to its claim. False (and the trial failed as interrupted) if it was reaped."""
    if book.attach(claim, trial_id):
        return True
    fail_trial(
        study,
        trial_id,
        f"interrupted: this worker ({book.worker.name}) stalled for longer than its lease "
        f"({book.lease_s:g}s) between claiming the candidate and starting it, and another "
        "worker took the claim",
    )
    return False


def start_next(
    study: optuna.Study,
    book: ClaimBook,
    propose: Propose,
    distributions: Callable[[Mapping[str, Any]], Mapping[str, BaseDistribution]],
    *,
    user_attrs: Mapping[str, Any] | None = None,
    on_reaped: Callable[[Reaped], None] | None = None,
    end_processes: EndProcesses | None = None,
) -> Started | Waiting | None:
    """``claim_next``, then create the claimed candidate's RUNNING trial (params set) and attach it."""
    while True:
        step = claim_next(study, book, propose, on_reaped=on_reaped, end_processes=end_processes)
        if not isinstance(step, Claim):
            return step
        params = step.params
        trial_id, number = create_running_trial(study, params, distributions(params), user_attrs=user_attrs)
        if attach_or_fail(study, book, step, trial_id):
            return Started(claim=step, trial_id=trial_id, number=number, params=params)


def record(
    study: optuna.Study,
    book: ClaimBook,
    started: Started,
    *,
    state: TrialState,
    value: float | None,
    user_attrs: Mapping[str, Any],
) -> bool:
    """Write a finished trial's result, if this worker still holds its claim.

    Renews the claim first: if it was reaped (this worker was cut off longer than the lease)
    the trial was failed as interrupted by another worker and its candidate handed on, so
    nothing is written and False comes back. A renewed claim cannot be reaped for a whole lease.
    """
    if not book.renew(started.claim):
        return False
    if state == TrialState.COMPLETE and value is None:
        raise ValueError("a COMPLETE trial needs its value")
    storage = study._storage
    try:
        for key, v in user_attrs.items():
            storage.set_trial_user_attr(started.trial_id, key, v)
        storage.set_trial_state_values(
            started.trial_id, state, [value] if state == TrialState.COMPLETE and value is not None else None
        )
    except UpdateFinishedTrialError:
        written = False
    else:
        written = True
    # Only now: should writing fail otherwise, the claim expires and the trial is reaped.
    book.finish(started.claim)
    return written
