"""The loop's data flow: ``propose`` returns a ``Proposal`` (it writes nothing), the scheduler hands
it back in the ``Step`` with the candidate itself, and ``start_trial`` returns a handle that owns
the claim and its heartbeat."""

from __future__ import annotations

import io
import shlex
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from autotune.core.outcome import NO_SPEED_REASON
from autotune.core.space import Candidate
from autotune.errors import BaselineFailedError
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store.claims import RUNNING, ClaimBook
from autotune.store.storage import open_storage
from autotune.sweep.loop import Interrupt, LoopStop, SearchLoop
from autotune.sweep.options import SweepOptions
from autotune.sweep.progress import Progress
from autotune.sweep.scheduler import ClaimedScheduler, LocalScheduler, Proposal, Scheduler, Step
from autotune.sweep.setup import SweepPlan, plan_sweep
from tests.helpers import FAKES

TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)
OK = {"outcome": "ok", "samples_per_s": 1.0, "fits": True, "peak_vram_gb": 4.0}


def _plan(tmp: Path) -> SweepPlan:
    opts = SweepOptions(
        trainer="command", cmd=TEMPLATE, workdir=tmp / "runs", vram_gb=16, steps=20, max_batch_size=2
    )
    return plan_sweep(opts, False)


def _loop(plan: SweepPlan, scheduler: Scheduler) -> tuple[SearchLoop, io.StringIO]:
    out = io.StringIO()
    executor = SimpleNamespace(card=plan.card)  # what the loop reads of it outside ``run``
    loop = SearchLoop(
        plan, scheduler, executor, progress=Progress(out, tty=False), stop=LoopStop(Interrupt())
    )  # type: ignore[arg-type]
    return loop, out


def _finish(scheduler: Scheduler, plan: SweepPlan, cand: Candidate, role: str, attrs: dict[str, Any]) -> int:
    with scheduler.start_trial(None, cand, plan.distributions, {"role": role}) as handle:
        value = attrs.get("samples_per_s") if attrs.get("outcome") == "ok" else None
        return handle.finish(attrs, value).number


def test_propose_asks_for_the_baseline_first_then_for_its_verdict_then_searches(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    scheduler = LocalScheduler.open(open_storage(plan.storage_url), plan)
    loop, _ = _loop(plan, scheduler)
    study = scheduler.study

    first = loop.propose(study.trials(), [])
    assert first == Proposal(plan.base_candidate, role="baseline")
    assert first.candidate is plan.base_candidate  # the candidate itself, not params to rebuild
    # in flight elsewhere: nobody else starts anything before the baseline's verdict
    assert loop.propose(study.trials(), [plan.base_candidate.params]) == Proposal(None, role="baseline")

    number = _finish(scheduler, plan, plan.base_candidate, "baseline", OK)
    attrs_before = dict(study.user_attrs)
    verdict_due = loop.propose(study.trials(), [])
    assert verdict_due.candidate is None and verdict_due.baseline is not None
    assert verdict_due.baseline.number == number
    assert dict(study.user_attrs) == attrs_before  # deciding wrote nothing

    loop.judge_baseline(verdict_due.baseline)
    assert study.user_attrs["baseline_trial"] == number
    search = loop.propose(study.trials(), [])
    assert search.role == "search" and search.candidate is not None and search.baseline is None
    assert search.candidate in plan.space and search.candidate != plan.base_candidate


def test_a_failed_baseline_is_judged_by_the_loop_not_inside_the_decision(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    scheduler = LocalScheduler.open(open_storage(plan.storage_url), plan)
    loop, _ = _loop(plan, scheduler)
    _finish(scheduler, plan, plan.base_candidate, "baseline", {"outcome": "crash", "reason": "boom"})
    reports = plan.study_dir / "report.md"

    proposal = loop.propose(scheduler.study.trials(), [])  # decides; raises nothing, writes no report
    assert proposal.baseline is not None and not reports.exists()

    step = scheduler.next_step(loop.propose, loop.say_reaped)
    assert isinstance(step, Step) and step.candidate is None and step.proposal.baseline is not None
    with pytest.raises(BaselineFailedError, match="failed with outcome crash: boom"):
        loop.run()
    assert reports.exists()


def test_a_baseline_that_ran_clean_but_gave_no_speed_is_not_told_to_fix_its_log(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    scheduler = LocalScheduler.open(open_storage(plan.storage_url), plan)
    loop, _ = _loop(plan, scheduler)
    _finish(scheduler, plan, plan.base_candidate, "baseline", {"outcome": "crash", "reason": NO_SPEED_REASON})
    with pytest.raises(BaselineFailedError) as err:
        loop.run()
    assert "fix what the log shows" not in str(err.value)
    assert "give autotune a step time as that says" in str(err.value)


def test_a_remeasure_proposal_names_the_first_run_it_measures_again(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    scheduler = LocalScheduler.open(open_storage(plan.storage_url), plan)
    loop, _ = _loop(plan, scheduler)
    base = _finish(scheduler, plan, plan.base_candidate, "baseline", OK)
    loop.judge_baseline(scheduler.study.trials()[0])
    plan.strategy.next_candidate = lambda seen: None  # type: ignore[method-assign]
    plan.strategy.remeasure = lambda seen: plan.base_candidate  # type: ignore[method-assign]
    assert loop.propose(scheduler.study.trials(), []) == Proposal(
        plan.base_candidate, role="remeasure", extra={"remeasure_of": base}
    )
    plan.strategy.remeasure = lambda seen: None  # type: ignore[method-assign]
    assert loop.propose(scheduler.study.trials(), []) == Proposal(None)
    assert scheduler.next_step(loop.propose, loop.say_reaped) is None  # nothing to act on: done


@pytest.mark.parametrize("claims", [False, True])
def test_the_step_carries_the_proposal_and_its_candidate(tmp_path: Path, claims: bool) -> None:
    plan = _plan(tmp_path)
    storage = open_storage(plan.storage_url)
    scheduler: Scheduler = (
        ClaimedScheduler.open(storage, plan, label="", lease_s=60, on_lost=lambda: None, concludes=True)
        if claims
        else LocalScheduler.open(storage, plan)
    )
    proposal = Proposal(plan.base_candidate, role="baseline")
    step = scheduler.next_step(lambda trials, in_flight: proposal, lambda r: None)
    assert isinstance(step, Step) and step.proposal is proposal and step.candidate is plan.base_candidate
    assert (step.claim is not None) is claims
    if claims:
        assert step.claim is not None and step.claim.params == plan.base_candidate.params


def _heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "autotune-heartbeat"]


def test_the_trial_handle_owns_the_claim_and_its_heartbeat(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    study = st.SweepStudy.open_or_create(storage, "s", {})[0]
    book = ClaimBook(op.engine(storage), study.study_id, lease_s=60)
    scheduler = ClaimedScheduler(study, book, lambda: None)
    dists = {"x": IntDistribution(0, 7)}
    before = len(_heartbeats())

    with scheduler.start_trial(None, Candidate((("x", 1),)), dists, {}) as handle:
        assert len(_heartbeats()) == before + 1
        finished = handle.finish({"outcome": "ok", "samples_per_s": 2.0}, 2.0)
        assert len(_heartbeats()) == before  # finishing stops it
    assert finished.state == TrialState.COMPLETE
    assert [c.state for c in book.all_claims()] == ["done"]

    # left without finishing (an unexpected error): the beat stops too
    with (
        pytest.raises(RuntimeError, match="unexpected"),
        scheduler.start_trial(None, Candidate((("x", 2),)), dists, {}) as handle,
    ):
        assert len(_heartbeats()) == before + 1
        raise RuntimeError("unexpected")
    assert len(_heartbeats()) == before
    left = storage.get_trial(op.trial_id(handle.trial))
    assert left.state == TrialState.RUNNING  # the claim's lease decides it: reaped, then run again
    assert sorted(c.state for c in book.all_claims()) == ["done", RUNNING]
