"""What may start next, and who holds it: the study alone, or a study shared through claims.

The search loop asks its scheduler for the next step and runs it; the executor writes the
trial through the scheduler. Two implementations:

- ``LocalScheduler``: one process, the study alone (the strategy's pick starts at once).
- ``ClaimedScheduler``: a shared study. Every ``autotune sweep`` is a worker of its study: it
  claims each candidate before it creates the trial (``autotune.store.claims``), renews that
  claim while the trial runs, and writes the result only while the claim still holds. So a
  second worker joining the same study (``autotune worker`` on another machine, or one thread
  per card with ``--parallel``) never starts a candidate another one runs or ran, the strategy
  sees the candidates running elsewhere as such, and the trial of a worker that died is failed
  as ``interrupted`` by whoever notices first and run again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ClaimLost
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store.claims import Claim, ClaimBook, Heartbeat
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import Reaped, Recovered, end_trial_processes, fail_trial, reap_stale
from autotune.store.workers import Propose, Waiting, attach_or_fail, claim_next
from autotune.sweep.options import OPTIONS_ATTR, options_to_attr
from autotune.sweep.setup import SweepPlan


@dataclass(frozen=True)
class Step:
    """A candidate this loop may start now; ``claim``: the claim held for it in a shared study."""

    params: dict[str, Any]
    claim: Claim | None = None


class Scheduler(Protocol):
    """Decides which candidate may start, and writes the trials it lets start.

    The contract, for the loop and the executor that use it:

    - ``begin(me)`` once, before the first trial: takes charge of the study where this run
      concludes it, and fails as ``interrupted`` the trials that dead runs left RUNNING
      (returned, for the loop to say; they run again).
    - ``next_step(propose, on_reaped)``: ``propose(trials, in_flight)`` picks params from the
      study's trials and the params in flight elsewhere (None: nothing). The answer is a
      ``Step`` to run now, ``Waiting`` (nothing now, but work in flight elsewhere may open
      some: ``wait``, then ask again) or None (nothing is left anywhere).
    - ``start_trial(step, ...)`` creates the RUNNING trial of a step; ``step`` None is a trial
      the loop did not get from ``next_step`` (the winner's confirmation), held from now on.
      Raises ``ClaimLost`` when the study gave the candidate to another worker meanwhile.
      Every started trial ends with ``finish_trial``, which writes the result only while this
      run still holds the trial (else nothing, and ``on_lost`` was called).
    - Every write of a trial goes through the scheduler (``set_trial_attrs`` too).
    - ``running()``: trials in flight elsewhere, counted against ``--max-trials`` with the finished.
    """

    study: st.SweepStudy

    def begin(self, me: ProcessIdentity) -> list[Recovered]: ...

    def running(self) -> int: ...

    def next_step(self, propose: Propose, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None: ...

    def wait(self, stop: threading.Event) -> None: ...

    def start_trial(
        self,
        step: Step | None,
        params: Mapping[str, Any],
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> FrozenTrial: ...

    def set_trial_attrs(self, trial: FrozenTrial, attrs: Mapping[str, Any]) -> None: ...

    def finish_trial(
        self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None
    ) -> FrozenTrial: ...


class LocalScheduler:
    """One process, the study alone: the strategy's pick starts at once; nothing runs elsewhere."""

    def __init__(self, study: st.SweepStudy) -> None:
        self.study = study

    @classmethod
    def open(cls, storage: RDBStorage, plan: SweepPlan) -> LocalScheduler:
        return cls(
            st.SweepStudy.open_or_create(storage, plan.study_name, plan.settings, workdir=plan.workdir)[0]
        )

    def begin(self, me: ProcessIdentity) -> list[Recovered]:
        self.study.check_not_running_elsewhere(me)
        self.study.claim(me)
        return self.study.recover_stale(me)

    def running(self) -> int:
        return 0

    def next_step(self, propose: Propose, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None:
        self.study.refresh_if_changed()  # other writers' trials (our own are read back as written)
        params = propose(self.study.trials(), [])
        return None if params is None else Step(dict(params))

    def wait(self, stop: threading.Event) -> None:
        stop.wait(1.0)  # never asked: nothing runs elsewhere, so there is never anything to wait for

    def start_trial(
        self,
        step: Step | None,
        params: Mapping[str, Any],
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> FrozenTrial:
        return self.study.start_trial(params, dists, attrs)

    def set_trial_attrs(self, trial: FrozenTrial, attrs: Mapping[str, Any]) -> None:
        self.study.set_trial_attrs(trial, attrs)

    def finish_trial(self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        return self.study.finish_trial(trial, attrs, value)


class ClaimedScheduler:
    """A shared study: one worker per candidate run, claimed first, with a heartbeat while it runs.

    ``concludes``: False for ``autotune worker``, which neither stands for the study nor is
    refused when the sweep that does runs on this machine. ``on_lost`` is called when another
    worker reaped the running claim (this worker was cut off longer than its lease).
    """

    def __init__(
        self, study: st.SweepStudy, book: ClaimBook, on_lost: Callable[[], None], *, concludes: bool = True
    ) -> None:
        self.study, self.book, self.on_lost, self.concludes = study, book, on_lost, concludes
        self.poll_s = min(2.0, book.lease_s / 10)
        self._claim: Claim | None = None
        self._heartbeat: Heartbeat | None = None

    @classmethod
    def open(
        cls,
        storage: RDBStorage,
        plan: SweepPlan,
        *,
        label: str,
        lease_s: float,
        on_lost: Callable[[], None],
        concludes: bool,
    ) -> ClaimedScheduler:
        """Open (or create) the study, with this worker's claim book; stores the sweep's options once."""
        study = st.SweepStudy.open_or_create(storage, plan.study_name, plan.settings, workdir=plan.workdir)[0]
        book = ClaimBook(
            op.engine(storage), study.study_id, worker=ProcessIdentity.current(label), lease_s=lease_s
        )
        if OPTIONS_ATTR not in study.user_attrs:
            study.set_attr(OPTIONS_ATTR, options_to_attr(plan.opts))
        return cls(study, book, on_lost, concludes=concludes)

    def sibling(self, label: str, on_lost: Callable[[], None]) -> ClaimedScheduler:
        """Another worker of this process on the same study (``--parallel``): its own handle and claims."""
        storage = self.study.storage
        twin = st.SweepStudy(storage, self.study.study)
        book = ClaimBook(
            op.engine(storage),
            self.study.study_id,
            worker=ProcessIdentity.current(label),
            lease_s=self.book.lease_s,
        )
        return ClaimedScheduler(twin, book, on_lost)

    # taking charge

    def begin(self, me: ProcessIdentity) -> list[Recovered]:
        """Workers may join a study anywhere (the claims keep them apart); a second concluding
        sweep of the same study on this machine is still refused, as for any sweep. Only the
        sweep that concludes the study stands for it (``autotune status``, that check)."""
        if self.concludes:
            self.study.check_not_running_elsewhere(me)
            self.study.claim(me)
        return self._recover_stale()

    def _recover_stale(self) -> list[Recovered]:
        """Fail the trials of dead workers (claims) and of dead unclaimed sweeps on this machine."""
        study = self.study
        study.refresh()
        out = [
            Recovered(r.number, r.params, list(r.killed))
            for r in reap_stale(study.study, self.book, end_processes=self.end_processes)
        ]
        claimed = {c.trial_id for c in self.book.all_claims()}
        for t in study.trials((TrialState.RUNNING,)):
            if op.trial_id(t) in claimed:
                continue
            owner = ProcessIdentity.from_attrs(t.user_attrs)
            if owner is None or owner.alive():
                continue  # another machine's, or still running: not ours to end
            killed = end_trial_processes(t)
            if fail_trial(
                study.study, op.trial_id(t), "interrupted: the sweep running it stopped; it is run again"
            ):
                out.append(Recovered(t.number, dict(t.params), killed))
        return out

    def end_processes(self, trial_id: int) -> list[int]:
        """End what is left of a dead worker's trial on this machine (its trainer has its own
        session, so it outlives the worker and holds the card); the pids ended."""
        return end_trial_processes(self.study.storage.get_trial(trial_id))

    # what may start

    def running(self) -> int:
        return len(self.book.in_flight())

    def next_step(self, propose: Propose, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None:
        study = self.study

        def fresh() -> list[FrozenTrial]:
            study.refresh()  # the study caches its trials; other workers' show up after this
            return study.trials()

        step = claim_next(
            study.study,
            self.book,
            propose,
            on_reaped=on_reaped,
            read_trials=fresh,
            end_processes=self.end_processes,
        )
        if isinstance(step, Claim):
            return Step(dict(step.params), step)
        return step

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.poll_s)
        self.study.refresh()

    # the trial's writes: several workers write this study, so after each write of ours every
    # trial is read again (``refresh`` first: the write then reads nothing back), and counts
    # and limits never lag behind the other workers by more than one of our writes

    def start_trial(
        self,
        step: Step | None,
        params: Mapping[str, Any],
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> FrozenTrial:
        claim = step.claim if step is not None else None
        if claim is None:  # a trial the loop did not claim (the winner's confirmation): claim it now
            study_params = {k: st.to_study_value(v) for k, v in params.items()}
            self.study.refresh()
            seen = sum(1 for t in self.study.trials() if t.params == study_params)
            claim = self.book.try_claim(study_params, seen)
            if claim is None:
                raise ClaimLost(
                    f"another worker of study {self.study.name!r} started the same run of {study_params} a "
                    "moment ago; it is left to that worker"
                )
        self.study.refresh()
        trial = self.study.start_trial(params, dists, {**attrs, "worker": self.book.worker.name})
        if not attach_or_fail(self.study.study, self.book, claim, op.trial_id(trial)):
            raise ClaimLost(
                f"this worker stalled for longer than its lease ({self.book.lease_s:g}s) while starting "
                f"trial {trial.number}; another worker took the candidate"
            )
        self._claim = claim
        self._heartbeat = Heartbeat(self.book, claim, self.book.lease_s / 6, self.on_lost).__enter__()
        return trial

    def set_trial_attrs(self, trial: FrozenTrial, attrs: Mapping[str, Any]) -> None:
        self.study.refresh()
        self.study.set_trial_attrs(trial, attrs)

    def finish_trial(self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        claim, hb = self._claim, self._heartbeat
        self._claim = self._heartbeat = None
        if hb is not None:
            hb.__exit__(None, None, None)
        if claim is None:
            self.study.refresh()
            return self.study.finish_trial(trial, attrs, value)
        if not self.book.renew(claim):  # reaped: the trial was failed and handed on; write nothing
            self.on_lost()
            return self.study.storage.get_trial(op.trial_id(trial))
        # The renewal leaves a whole lease to write the result before anyone may reap it.
        self.study.refresh()
        finished = self.study.finish_trial(trial, attrs, value)
        self.book.finish(claim)
        return finished
