"""A study's trials as last read, kept between looks, and what was derived from each one.

Why an object of its own: the sweep asks for its study's trials several times per turn (the
limits, the decision, the best line, the estimate), and reading or decoding every trial each
time made the orchestrator's own cost per trial grow with the study (3 s per trial at 500
trials). A finished trial never changes, so this keeps every trial read and, on a look after
``refresh``, reads only what may have changed: the unfinished trials and the new ones. What the
sweep derives from a trial (its ``TrialRecord``, the strategy's ``Observation``) is kept beside
it (``memo``) until that trial is read or written again.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.core.record import TrialRecord
from autotune.store import optuna_private as op

T = TypeVar("T")


class TrialCache:
    """One study's trials in trial-id order, read from ``storage`` only where they may have changed."""

    def __init__(self, storage: RDBStorage, study_id: int) -> None:
        self.storage = storage
        self.study_id = study_id
        self._trials: list[FrozenTrial] | None = None  # None: nothing read yet (or dropped)
        self._index: dict[int, int] = {}  # trial id -> position in ``_trials``
        self._memo: dict[int, tuple[FrozenTrial, dict[Hashable, Any]]] = {}  # id(trial) -> (it, derived)
        self._read_upto = -1  # the highest trial id a read of the study returned
        self._stale = False
        self._read_at = 0.0  # time.monotonic() of the last look

    # looking

    def trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        """The trials (those in ``states``), read where they may have changed since the last look."""
        if self._trials is None:
            self._read_all()
        elif self._stale:
            self._catch_up()
        trials = self._trials
        assert trials is not None
        if states is None:
            return list(trials)
        wanted = tuple(states)
        return [t for t in trials if t.state in wanted]

    def held(self) -> list[FrozenTrial] | None:
        """The trials as held now, without a look (``None``: none read yet)."""
        return self._trials

    def refresh(self) -> None:
        """Look for other writers' changes at the next look."""
        self._stale = True

    def refresh_if_changed(self, max_age_s: float) -> None:
        """``refresh`` when another writer added trials (one COUNT query), or the last look is
        older than ``max_age_s`` (another worker may have finished one of its trials)."""
        if self._trials is None or self._stale:
            return
        if time.monotonic() - self._read_at > max_age_s or (
            op.count_trials(self.storage, self.study_id) != len(self._trials)
        ):
            self._stale = True

    def drop(self) -> None:
        """Forget everything read: the next look reads every trial (finished ones were rewritten)."""
        self._trials = None
        self._index = {}
        self._memo = {}

    # what is derived from a trial

    def memo(self, trial: FrozenTrial, key: Hashable, build: Callable[[FrozenTrial], T]) -> T:
        """``build(trial)``, computed once per trial as read (a trial read or written again, or
        one this cache does not hold, is built anew): a finished trial is decoded only once.
        Kept by the trial object itself: every look hands out the same object until it changes."""
        held = self._memo.get(id(trial))
        if held is None or held[0] is not trial:
            tid = op.trial_id(trial)
            at = self._index.get(tid)
            if at is None or self._trials is None or self._trials[at] is not trial:
                return build(trial)  # not the trial as held (a caller's older copy): not kept
            held = self._memo[id(trial)] = (trial, {})
        derived = held[1]
        if key not in derived:
            derived[key] = build(trial)
        value: T = derived[key]
        return value

    def record(self, trial: FrozenTrial) -> TrialRecord:
        """The trial's ``TrialRecord`` (``memo``)."""
        return self.memo(trial, TrialRecord, TrialRecord.from_trial)

    # our own writes

    def put(self, trial: FrozenTrial) -> None:
        """One trial as just written or read, replacing the copy held (nothing held: nothing to do)."""
        if self._trials is None:
            return
        tid = op.trial_id(trial)
        at = self._index.get(tid)
        if at is not None:
            self._memo.pop(id(self._trials[at]), None)  # what was derived from the old copy goes with it
            self._trials[at] = trial
        else:
            self._index[tid] = len(self._trials)
            self._trials.append(trial)
            if len(self._trials) > 1 and op.trial_id(self._trials[-2]) > tid:  # out of order: rare
                self._trials.sort(key=op.trial_id)
                self._index = {op.trial_id(t): i for i, t in enumerate(self._trials)}

    def put_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Our write of ``attrs`` on one trial, into the copy held (no need to read it back)."""
        at = self._index.get(trial_id) if self._trials is not None else None
        if at is None or self._trials is None:
            if self._trials is not None:
                self.put(self.storage.get_trial(trial_id))
            return
        cached = copy.copy(self._trials[at])
        cached.user_attrs = {**cached.user_attrs, **attrs}
        self.put(cached)

    # reading

    def _catch_up(self) -> None:
        """Read what may have changed since the last look: the unfinished trials and the new ones.

        "New" is above the highest id the last read saw (not our own newest trial: other
        writers may have added trials below it meanwhile). A trial committed late under a lower
        id than one already seen (PostgreSQL hands ids out before commit) is caught by the count:
        when the cache holds fewer trials than the study, everything is read once more.
        """
        assert self._trials is not None
        changed = {op.trial_id(t) for t in self._trials if not t.state.is_finished()}
        for t in op.read_trials_since(self.storage, self.study_id, changed, self._read_upto):
            self.put(t)
            self._read_upto = max(self._read_upto, op.trial_id(t))
        if len(self._trials) != op.count_trials(self.storage, self.study_id):
            self._read_all()
        self._stale = False
        self._read_at = time.monotonic()

    def _read_all(self) -> None:
        self._memo = {}
        self._trials = op.read_trials(self.storage, self.study_id)
        self._index = {op.trial_id(t): i for i, t in enumerate(self._trials)}
        self._read_upto = op.trial_id(self._trials[-1]) if self._trials else -1
        self._stale = False
        self._read_at = time.monotonic()
