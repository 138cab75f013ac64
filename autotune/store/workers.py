"""Several workers on one study: each starts only candidates nobody else runs or ran.

The claims (``autotune.store.claims``) decide who runs a candidate; this module ties them to the
Optuna study. A worker's step is ``claim_next``: fail the trials of dead workers (so their
candidates become free), build the history from the study's trials plus the candidates
claimed elsewhere whose trial is not visible yet, ask the caller's strategy for a candidate,
and claim it. Only then does the caller create its RUNNING trial with the params set (one
transaction, ``SweepStudy.start_trial``, so no other worker ever sees a half-made trial) and
``attach_or_fail`` it to the claim. A lost race costs one more look at the history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StorageError
from autotune.store import optuna_private as op
from autotune.store.claims import Claim, ClaimBook, count_runs
from autotune.store.recovery import EndProcesses, Reaped, fail_trial, reap_stale

# Each lost race means another worker just claimed something, so the history moved on;
# this many in a row means something is wrong (for instance a strategy ignoring in-flight work).
MAX_LOST_RACES = 100

Propose = Callable[[Sequence[FrozenTrial], Sequence[Mapping[str, Any]]], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Waiting:
    """Nothing to start now, but candidates run elsewhere whose results may open new ones."""

    in_flight: int


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
        running_ids = {op.trial_id(t) for t in trials if t.state == TrialState.RUNNING}
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
