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

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.core.space import Candidate
from autotune.errors import ClaimLost
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store.claims import Claim, ClaimBook, Heartbeat
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import Reaped, Recovered, end_trial_processes, fail_trial, reap_stale
from autotune.store.workers import Waiting, attach_or_fail, claim_next
from autotune.sweep.options import OPTIONS_ATTR, options_to_attr
from autotune.sweep.setup import SweepPlan


@dataclass(frozen=True)
class Proposal:
    """What the loop decided from one snapshot of the study, for the loop to act on.

    ``candidate``: what to start (None: nothing from this snapshot), as ``role``, with the
    ``extra`` attrs its trial gets (``remeasure_of``). ``baseline``: the baseline's finished
    trial, when the loop has not judged it yet: judged before anything else starts (a failed
    baseline stops the sweep), so such a proposal has no candidate.
    """

    candidate: Candidate | None
    role: str = "search"
    extra: Mapping[str, Any] = field(default_factory=dict)
    baseline: FrozenTrial | None = None

    @property
    def params(self) -> dict[str, Any] | None:
        """The candidate's study params, as the claims take them (None: nothing to start)."""
        return None if self.candidate is None else self.candidate.params


#: The loop's decision: ``(trials, in_flight)`` -> what to do, from that one snapshot.
Decide = Callable[[Sequence[FrozenTrial], Sequence[Mapping[str, Any]]], Proposal]


@dataclass(frozen=True)
class Step:
    """A proposal this loop may act on now; ``claim``: the claim held for its candidate in a shared study."""

    proposal: Proposal
    claim: Claim | None = None

    @property
    def candidate(self) -> Candidate | None:
        return self.proposal.candidate


def _step(proposal: Proposal) -> Step | None:
    """A proposal without a claim as a step: None when there is nothing in it to act on."""
    return None if proposal.candidate is None and proposal.baseline is None else Step(proposal)


class TrialHandle:
    """A started trial and what holds it: in a shared study its claim, renewed by a heartbeat
    while the trial runs. Every write of the trial goes through it; use it in a ``with``:
    leaving stops the heartbeat, so a trial left unfinished (an unexpected error) is reaped
    by its lease and run again, instead of looking alive for as long as this process runs.
    """

    def __init__(
        self,
        study: st.SweepStudy,
        trial: FrozenTrial,
        *,
        book: ClaimBook | None = None,
        claim: Claim | None = None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.study, self.trial, self.book, self.claim, self.on_lost = study, trial, book, claim, on_lost
        self._held = contextlib.ExitStack()
        if book is not None and claim is not None:
            self._held.enter_context(Heartbeat(book, claim, book.lease_s / 6, on_lost))

    def __enter__(self) -> TrialHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the heartbeat (again: nothing)."""
        self._held.close()

    # Several workers write a shared study, so before each write of ours every trial is read
    # again (``refresh`` first: the write then reads nothing back), and counts and limits never
    # lag behind the other workers by more than one of our writes.

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        if self.claim is not None:
            self.study.refresh()
        self.study.set_trial_attrs(self.trial, attrs)

    def finish(self, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        """Write the result, only while this run still holds the trial (else nothing, and
        ``on_lost`` is called); returns the trial as stored."""
        self.close()
        book, claim = self.book, self.claim
        if book is None or claim is None:
            return self.study.finish_trial(self.trial, attrs, value)
        if not book.renew(claim):  # reaped: the trial was failed and handed on; write nothing
            self.on_lost()
            return self.study.storage.get_trial(op.trial_id(self.trial))
        # The renewal leaves a whole lease to write the result before anyone may reap it.
        self.study.refresh()
        finished = self.study.finish_trial(self.trial, attrs, value)
        book.finish(claim)
        return finished


class Scheduler(Protocol):
    """Decides which candidate may start, and writes the trials it lets start.

    The contract, for the loop and the executor that use it:

    - ``begin(me)`` once, before the first trial: takes charge of the study where this run
      concludes it, and fails as ``interrupted`` the trials that dead runs left RUNNING
      (returned, for the loop to say; they run again).
    - ``next_step(decide, on_reaped)``: ``decide(trials, in_flight)`` makes a ``Proposal`` from
      the study's trials and the params in flight elsewhere. The answer is a ``Step`` to act on
      now (its candidate claimed, where the study is shared), ``Waiting`` (nothing now, but
      work in flight elsewhere may open some: ``wait``, then ask again) or None (nothing is
      left anywhere).
    - ``start_trial(step, ...)`` creates the RUNNING trial of a step and returns its
      ``TrialHandle``; ``step`` None is a trial the loop did not get from ``next_step`` (the
      winner's confirmation), held from now on. Raises ``ClaimLost`` when the study gave the
      candidate to another worker meanwhile. Every write of the trial goes through the handle;
      every started trial ends with ``handle.finish``, which writes the result only while this
      run still holds the trial (else nothing, and ``on_lost`` was called).
    - ``running()``: trials in flight elsewhere, counted against ``--max-trials`` with the finished.
    """

    study: st.SweepStudy

    def begin(self, me: ProcessIdentity) -> list[Recovered]: ...

    def running(self) -> int: ...

    def next_step(self, decide: Decide, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None: ...

    def wait(self, stop: threading.Event) -> None: ...

    def start_trial(
        self,
        step: Step | None,
        cand: Candidate,
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> TrialHandle: ...


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

    def next_step(self, decide: Decide, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None:
        self.study.refresh_if_changed()  # other writers' trials (our own are read back as written)
        return _step(decide(self.study.trials(), []))

    def wait(self, stop: threading.Event) -> None:
        stop.wait(1.0)  # never asked: nothing runs elsewhere, so there is never anything to wait for

    def start_trial(
        self,
        step: Step | None,
        cand: Candidate,
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> TrialHandle:
        return TrialHandle(self.study, self.study.start_trial(cand.params, dists, attrs))


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

    def next_step(self, decide: Decide, on_reaped: Callable[[Reaped], None]) -> Step | Waiting | None:
        study = self.study
        asked = _Asked(decide)

        def fresh() -> list[FrozenTrial]:
            study.refresh()  # the study caches its trials; other workers' show up after this
            return study.trials()

        step = claim_next(
            study.study,
            self.book,
            asked,
            on_reaped=on_reaped,
            read_trials=fresh,
            end_processes=self.end_processes,
        )
        if isinstance(step, Claim):
            assert asked.last is not None  # a claim is made for a proposal's candidate
            return Step(asked.last, step)
        if asked.last is not None and asked.last.baseline is not None:
            return Step(asked.last)  # the baseline's verdict first: nothing was claimed
        return step

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.poll_s)
        self.study.refresh()

    def start_trial(
        self,
        step: Step | None,
        cand: Candidate,
        dists: Mapping[str, BaseDistribution],
        attrs: Mapping[str, Any],
    ) -> TrialHandle:
        claim = step.claim if step is not None else None
        if claim is None:  # a trial the loop did not claim (the winner's confirmation): claim it now
            self.study.refresh()
            seen = sum(1 for t in self.study.trials() if t.params == cand.params)
            claim = self.book.try_claim(cand.params, seen)
            if claim is None:
                raise ClaimLost(
                    f"another worker of study {self.study.name!r} started the same run of {cand.params} a "
                    "moment ago; it is left to that worker"
                )
        self.study.refresh()
        trial = self.study.start_trial(cand.params, dists, {**attrs, "worker": self.book.worker.name})
        if not attach_or_fail(self.study.study, self.book, claim, op.trial_id(trial)):
            raise ClaimLost(
                f"this worker stalled for longer than its lease ({self.book.lease_s:g}s) while starting "
                f"trial {trial.number}; another worker took the candidate"
            )
        return TrialHandle(self.study, trial, book=self.book, claim=claim, on_lost=self.on_lost)


class _Asked:
    """The loop's ``decide`` as ``claim_next`` asks it (params, or None), keeping the last
    proposal so the step hands the loop what it decided, not params to convert back."""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self.last: Proposal | None = None

    def __call__(
        self, trials: Sequence[FrozenTrial], in_flight: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        self.last = self.decide(trials, in_flight)
        return self.last.params
