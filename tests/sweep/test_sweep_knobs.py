"""``--cmd`` sweeps end to end over a plain script of its own (``tests/fakes/knob_script.py``): only
the template's knobs move, declared ``--knob`` knobs reach the command, no command runs twice,
and the report warns about nothing the script never received."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.store.storage import open_storage
from autotune.sweep.api import run_sweep
from autotune.sweep.options import OPTIONS_ATTR, SweepOptions
from autotune.trainers import registry
from autotune.trainers.base import Baseline
from autotune.trainers.command.adapter import CommandAdapter
from tests.helpers import FAKES, cli_env

SCRIPT = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'knob_script.py'))}"
BATCH_ONLY = SCRIPT + " --batch-size {batch_size} --steps {steps}"
DECLARED = SCRIPT + " --batch-size {batch_size} --swap {swap} --precision {precision} --steps {steps}"


def _env(tmp: Path) -> dict[str, str]:
    return cli_env(
        drop=("KNOB_FAKE_",), KNOB_FAKE_LAUNCHES=str(tmp / "launches.jsonl"), KNOB_FAKE_CARD_GB="4"
    )


def _sweep(tmp: Path, cmd: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(tmp / "runs"), "--study", "knobs",
        "--cmd", cmd, "--vram-gb", "4", "--steps", "4", "--max-batch-size", "8", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, env=_env(tmp), capture_output=True, text=True, timeout=300, cwd=tmp)


def _launches(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "launches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _study(tmp: Path) -> optuna.Study:
    return optuna.load_study(
        study_name="knobs", storage=open_storage(f"sqlite:///{tmp / 'runs' / 'studies.db'}")
    )


@pytest.mark.process
def test_a_template_naming_only_the_batch_sweeps_only_the_batch(tmp_path: Path) -> None:
    done = _sweep(tmp_path, BATCH_ONLY)
    assert done.returncode == 0, done.stderr
    assert (
        "knobs swept: batch_size; not swept, as the command never receives them: quantization, optimizer, "
        "gradient_checkpointing" in done.stderr + done.stdout
    )
    study = _study(tmp_path)
    trials = study.get_trials()
    assert [k["name"] for k in study.user_attrs["settings"]["knobs"]] == ["batch_size"]
    assert all(set(t.params) == {"batch_size"} for t in trials)
    # every batch size once, each a command of its own, none run twice
    launches = _launches(tmp_path)
    # batch 4 runs but peaks past the headroom line, so 5..8 are ruled out without running; 3, the
    # largest that fits (not a power of two), wins
    assert sorted(t.params["batch_size"] for t in trials) == [1, 2, 3, 4]
    assert len(launches) == len(trials) == 4
    assert len({tuple(a["argv"]) for a in launches}) == 4
    assert len({t.user_attrs["launch_digest"] for t in trials}) == 4
    fit = {t.params["batch_size"]: t.user_attrs["fits"] for t in trials}
    assert fit == {1: True, 2: True, 3: True, 4: False}
    assert study.user_attrs["best_trial"] == next(t.number for t in trials if t.params["batch_size"] == 3)
    report = (tmp_path / "runs" / "knobs" / "report.md").read_text()
    data = json.loads((tmp_path / "runs" / "knobs" / "report.json").read_text())
    warnings = " ".join(data["warnings"])
    for absent in ("quantization", "adamw", "8-bit", "LoRA", "clip", "fidelity", "tier", "checkpointing"):
        assert absent not in warnings, (absent, warnings)
    for absent in ("quantization", "adamw", "int8", "tier below-32GB", "a longer clip", "checkpointing"):
        assert absent not in report, absent
    assert "a longer or larger sample in the data" in warnings


@pytest.mark.process
def test_declared_knobs_reach_the_command_and_a_resume_with_other_knobs_is_refused(tmp_path: Path) -> None:
    done = _sweep(tmp_path, DECLARED, "--knob", "swap=int:2..0", "--knob", "precision=bf16,fp32")
    assert done.returncode == 0, done.stderr
    study = _study(tmp_path)
    trials = study.get_trials()
    assert study.user_attrs[OPTIONS_ATTR]["knobs"] == ["swap=int:2..0", "precision=bf16,fp32"]
    assert [k["name"] for k in study.user_attrs["settings"]["knobs"]] == ["batch_size", "swap", "precision"]
    baseline = trials[study.user_attrs["baseline_trial"]]
    assert baseline.params == {"batch_size": 1, "swap": 2, "precision": "bf16"}  # the memory-saving end
    launches = _launches(tmp_path)
    assert len(launches) == len(trials)
    assert len({tuple(a["argv"]) for a in launches}) == len(launches)  # no command twice
    # what each trial's params said is what its command gave the script
    by_argv = {tuple(a["argv"]): a for a in launches}
    for t in trials:
        argv = t.user_attrs["command"]
        launch = next(a for key, a in by_argv.items() if shlex.join(key) in argv)
        assert (launch["swap"], launch["precision"]) == (t.params["swap"], t.params["precision"])
    assert len({a["swap"] for a in launches}) > 1 and len({a["precision"] for a in launches}) > 1
    n = len(trials)

    again = _sweep(tmp_path, DECLARED, "--knob", "swap=int:0..2", "--knob", "precision=bf16,fp32")
    assert again.returncode != 0
    assert "knobs.swap.values: the study has [2, 1, 0], this run [0, 1, 2]" in again.stderr
    assert "declared_knobs" in again.stderr
    assert len(_study(tmp_path).get_trials()) == n and len(_launches(tmp_path)) == n


class _EveryKnob(CommandAdapter):
    """The command adapter as it was before: every knob of the file swept, named or not."""

    def knobs_in_play(self, baseline: Baseline, names: Any) -> list[str]:
        return list(names)


@pytest.mark.parametrize("claims", [False, True])
def test_two_candidates_with_one_command_run_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claims: bool
) -> None:
    monkeypatch.setitem(registry.ADAPTERS, "command", _EveryKnob)
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    opts = SweepOptions(
        trainer="command", cmd=BATCH_ONLY, workdir=tmp_path / "runs", study="knobs", vram_gb=4, steps=4,
        max_batch_size=2, max_trials=8,
    )  # fmt: skip
    run_sweep(opts, nvml=False, stream=io.StringIO(), tty=False, claims=claims)
    trials = _study(tmp_path).get_trials()
    assert len(trials) > 3 and all(len(t.params) == 4 for t in trials)  # four knobs, one of them named
    launches = _launches(tmp_path)
    ran = [t for t in trials if "same_command_as" not in t.user_attrs]
    twins = [t for t in trials if "same_command_as" in t.user_attrs]
    assert len(launches) == len(ran) == 2  # batch 1 and batch 2: the only two commands there are
    assert Counter(tuple(a["argv"]) for a in launches).most_common(1)[0][1] == 1
    assert len(twins) == len(trials) - 2
    by_number = {t.number: t for t in trials}
    for t in twins:
        first = by_number[t.user_attrs["same_command_as"]]
        assert first.params["batch_size"] == t.params["batch_size"]
        assert first.user_attrs["launch_digest"] == t.user_attrs["launch_digest"]
        assert t.user_attrs["outcome"] == first.user_attrs["outcome"] and t.value == first.value
        assert t.user_attrs["reason"].startswith(f"same command as trial {first.number}")
    report = (tmp_path / "runs" / "knobs" / "report.md").read_text()
    assert f"same command as trial {twins[0].user_attrs['same_command_as']}" in report
