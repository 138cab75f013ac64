"""The composed sweep's seams: the strategy a sweep is given, the runner's start callback, the
pid it records through it, and the scheduler contract the loop relies on."""

from __future__ import annotations

import dataclasses
import io
import json
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.core.space import Candidate, Space
from autotune.core.strategy import Observation, Strategy
from autotune.errors import ClaimLost, SweepInterrupted
from autotune.execution.launch import LaunchSpec
from autotune.execution.proctree import ProcessRecord
from autotune.execution.runner import RunLimits, run_trial
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store.claims import ClaimBook
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import reap_stale
from autotune.store.storage import open_storage
from autotune.sweep.api import run_sweep
from autotune.sweep.history import observations
from autotune.sweep.loop import Interrupt, LoopStop, SearchLoop
from autotune.sweep.options import SweepOptions
from autotune.sweep.progress import Progress
from autotune.sweep.scheduler import ClaimedScheduler, LocalScheduler, Step
from autotune.sweep.setup import SweepPlan, plan_sweep
from tests.helpers import FAKES

TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}"
)


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("SWEEP_FAKE_SLEEP_S", "0.02")
    monkeypatch.setenv("SWEEP_FAKE_CARD_GB", "16")
    monkeypatch.setenv("SWEEP_FAKE_LAUNCHES", str(tmp_path / "launches.jsonl"))
    return tmp_path


class Recording:
    """A strategy factory that hands out ``Strategy`` and remembers what it was built with and asked."""

    def __init__(self) -> None:
        self.built: list[tuple[Candidate, float, float]] = []
        self.proposed: list[Candidate] = []

    def __call__(self, space: Space, baseline: Candidate, card_gb: float, headroom: float) -> Recording:
        self.inner = Strategy(space, baseline, card_gb, headroom)
        self.built.append((baseline, card_gb, headroom))
        return self

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        cand = self.inner.next_candidate(history)
        if cand is not None:
            self.proposed.append(cand)
        return cand

    def best(self, history: Sequence[Observation]) -> Observation | None:
        return self.inner.best(history)

    def ruled_out(self, history: Sequence[Observation]) -> list[Any]:
        return self.inner.ruled_out(history)

    def could_win(self, history: Sequence[Observation]) -> dict[Candidate, float]:
        return self.inner.could_win(history)

    def remeasure(self, history: Sequence[Observation]) -> Candidate | None:
        return self.inner.remeasure(history)


def _opts(tmp: Path, **kw: Any) -> SweepOptions:
    return SweepOptions(
        trainer="command", cmd=TEMPLATE, workdir=tmp / "runs", vram_gb=16, steps=20, max_batch_size=2, **kw
    )


@pytest.mark.parametrize("claims", [True, False])
def test_the_sweep_runs_the_strategy_it_is_given(fake_env: Path, claims: bool) -> None:
    strategy = Recording()
    result = run_sweep(
        _opts(fake_env, max_trials=3), nvml=False, stream=io.StringIO(), tty=False, strategy_factory=strategy,
        claims=claims,
    )  # fmt: skip
    assert [(card, headroom) for _, card, headroom in strategy.built] == [(16, 0.1)]
    assert result.trials_run == 3 and result.stop_reason == "max-trials (3) reached"
    storage = open_storage(result.storage)
    trials = optuna.load_study(study_name=result.study, storage=storage).get_trials()
    assert trials[0].user_attrs["role"] == "baseline"
    # every trial after the baseline is one the strategy proposed, in its order
    assert [dict(t.params) for t in trials[1:]] == [
        {k: st.to_study_value(v) for k, v in c.params.items()} for c in strategy.proposed[: len(trials) - 1]
    ]


def test_the_trial_records_the_process_the_runner_started(fake_env: Path) -> None:
    result = run_sweep(
        _opts(fake_env, max_trials=1), nvml=False, stream=io.StringIO(), tty=False, claims=False
    )
    trial = optuna.load_study(study_name=result.study, storage=open_storage(result.storage)).trials[0]
    process = json.loads((Path(trial.user_attrs["trial_dir"]) / "process.json").read_text())
    assert trial.user_attrs["pid"] == trial.user_attrs["pgid"] == process["pid"]
    assert trial.user_attrs["process_mark"] == process["mark"]
    assert isinstance(trial.user_attrs["pid_start"], float)


def test_the_runner_reports_the_started_process_once(tmp_path: Path) -> None:
    seen: list[ProcessRecord] = []
    launch = LaunchSpec(argv=(sys.executable, "-c", "print('Step 1/1')"), cwd=tmp_path, env={})
    result = run_trial(launch, tmp_path / "t", RunLimits(30, 30), on_start=seen.append)
    process = json.loads((tmp_path / "t" / "process.json").read_text())
    assert seen == [ProcessRecord(result.pid, process["mark"], process["started_at"])]


# --- the loop against its scheduler and executor ---------------------------------------------------


class FakeExecutor:
    """Stands for ``TrialExecutor``: records each trial as an ok one at once, or fails as told."""

    def __init__(self, plan: SweepPlan, scheduler: LocalScheduler, stop: LoopStop, fail: list[str]) -> None:
        self.plan, self.scheduler, self.stop, self.fail = plan, scheduler, stop, fail
        self.card = plan.card
        self.runs: list[str] = []

    def run(self, cand: Candidate, *, role: str, step: Step | None = None, **_: Any) -> FrozenTrial:
        self.runs.append(role)
        if role == "search" and self.fail:
            how = self.fail.pop(0)
            if how == "claim":
                raise ClaimLost("cut off from the database")
            self.stop.on_lost()  # the heartbeat found the claim reaped: the runner ended the trial
            raise self.stop.interrupt.error()
        with self.scheduler.start_trial(step, cand, self.plan.distributions, {"role": role}) as handle:
            return handle.finish({"outcome": "ok", "samples_per_s": 1.0, "fits": True}, 1.0)


def _loop(tmp: Path, fail: list[str]) -> tuple[SearchLoop, FakeExecutor, io.StringIO]:
    plan = plan_sweep(_opts(tmp, max_trials=3), False)
    scheduler = LocalScheduler.open(open_storage(plan.storage_url), plan)
    stop = LoopStop(Interrupt())
    executor = FakeExecutor(plan, scheduler, stop, fail)
    out = io.StringIO()
    loop = SearchLoop(plan, scheduler, executor, progress=Progress(out, tty=False), stop=stop)  # type: ignore[arg-type]
    return loop, executor, out


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("claim", "cut off from the database; another worker runs that candidate"),
        ("heartbeat", "this worker lost its claim on the running trial; another worker runs that candidate"),
    ],
)
def test_a_lost_claim_is_said_and_the_loop_goes_on(tmp_path: Path, how: str, said: str) -> None:
    loop, executor, out = _loop(tmp_path, [how])
    assert loop.run() == "max-trials (3) reached"
    assert executor.runs == ["baseline", "search", "search", "search"]
    assert out.getvalue().count(said) == 1
    assert not loop.stop.event.is_set() and not loop.stop.lost.is_set()


def test_a_signal_during_a_lost_claim_still_stops_the_loop(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path, ["heartbeat"])
    loop.stop.interrupt.signum = signal.SIGTERM
    with pytest.raises(SweepInterrupted, match="interrupted by SIGTERM"):
        loop.run()


def test_a_claimed_trial_reaped_meanwhile_records_nothing(tmp_path: Path) -> None:
    """The scheduler's contract: ``handle.finish`` writes only while the claim holds, else calls ``on_lost``."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    storage = open_storage(url)
    study = st.SweepStudy.open_or_create(storage, "s", {})[0]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ghost = dataclasses.replace(
        ProcessIdentity.current(), name="ghost", pid=child.pid,
        started=round(psutil.Process(child.pid).create_time(), 3),
    )  # fmt: skip
    lost: list[bool] = []
    book = ClaimBook(op.engine(storage), study.study_id, worker=ghost, lease_s=3600)
    scheduler = ClaimedScheduler(study, book, lambda: lost.append(True))
    handle = scheduler.start_trial(
        None, Candidate((("x", 1),)), {"x": IntDistribution(0, 7)}, {"role": "confirm"}
    )
    trial = handle.trial
    assert trial.user_attrs["worker"] == "ghost"
    child.kill()
    child.wait()
    reaper = ClaimBook(op.engine(storage), study.study_id)
    [reaped] = reap_stale(study.study, reaper)
    assert reaped.number == trial.number
    finished = handle.finish({"outcome": "ok", "samples_per_s": 2.0}, 2.0)
    assert lost == [True]
    assert finished.state == TrialState.FAIL and finished.user_attrs["outcome"] == "interrupted"
    assert "samples_per_s" not in finished.user_attrs


def test_a_sweep_stopped_by_a_limit_says_what_could_still_beat_the_best(fake_env: Path) -> None:
    """The count is the strategy's own (its speed bounds over the study's trials), printed and kept
    for ``status``; a search that ran to its end says nothing of the kind."""
    strategy = Recording()
    stopped = run_sweep(
        _opts(fake_env, max_trials=2), nvml=False, stream=io.StringIO(), tty=False, strategy_factory=strategy
    )
    assert stopped.stop_reason == "max-trials (2) reached"
    storage = open_storage(stopped.storage)
    study = optuna.load_study(study_name=stopped.study, storage=storage)
    space = strategy.inner.space
    history = [o for _, o in observations(st.SweepStudy(storage, study), space)]
    could = strategy.inner.could_win(history)
    assert could, "two trials of a 16-candidate grid leave candidates that could win"
    assert stopped.search_left is not None
    assert stopped.search_left.startswith(f"{len(could)} candidate(s) could still beat the best")
    assert study.user_attrs["search_left"] == stopped.search_left
    finished = run_sweep(
        _opts(fake_env, max_trials=60),
        nvml=False,
        stream=io.StringIO(),
        tty=False,
        strategy_factory=Recording(),
    )  # the same study, resumed with room to end on its own
    assert finished.stop_reason == "done" and finished.search_left is None
    assert optuna.load_study(study_name=finished.study, storage=storage).user_attrs["search_left"] is None
