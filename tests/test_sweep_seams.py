"""The composed sweep's seams: the strategy a sweep is given, the runner's start callback, the
pid it records through it, and the scheduler contract the loop relies on."""

from __future__ import annotations

import io
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.core.space import Candidate, Space
from autotune.core.strategy import Observation, Strategy
from autotune.execution.launch import LaunchSpec
from autotune.execution.runner import RunLimits, TrialProcess, run_trial
from autotune.store import study as st
from autotune.sweep.api import run_sweep
from autotune.sweep.options import SweepOptions
from tests.conftest import FAKES

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
    storage = st.open_storage(result.storage)
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
    trial = optuna.load_study(study_name=result.study, storage=st.open_storage(result.storage)).trials[0]
    process = json.loads((Path(trial.user_attrs["trial_dir"]) / "process.json").read_text())
    assert trial.user_attrs["pid"] == trial.user_attrs["pgid"] == process["pid"]
    assert trial.user_attrs["process_mark"] == process["mark"]
    assert isinstance(trial.user_attrs["pid_start"], float)


def test_the_runner_reports_the_started_process_once(tmp_path: Path) -> None:
    seen: list[TrialProcess] = []
    launch = LaunchSpec(argv=(sys.executable, "-c", "print('Step 1/1')"), cwd=tmp_path, env={})
    result = run_trial(launch, tmp_path / "t", RunLimits(30, 30), on_start=seen.append)
    process = json.loads((tmp_path / "t" / "process.json").read_text())
    assert seen == [TrialProcess(result.pid, process["mark"], process["started_at"])]
