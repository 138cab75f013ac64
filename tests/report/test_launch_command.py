"""The report's launch command can be pasted: every placeholder filled, run from the trials' folder.

A table of templates checks the filling (and the refusal of a hole) on the ``command`` adapter;
a real sweep, a report from another folder and the printed command run through ``bash -c``
check it end to end.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import UsageError
from autotune.trainers import Winner, get_adapter
from tests.helpers import FAKES, cli_env

WINNER = {"quantization": "none", "optimizer": "adamw", "batch_size": 4, "gradient_checkpointing": False}


@dataclass
class Fill:
    """One template, what the caller knows, and the argv the command must end in (or the hole named)."""

    template: str
    want: list[str] | None  # None: refused
    steps: int | None = None
    config_steps: int | None = None  # the baseline config's own ``steps``
    trial_dir: bool = True
    hole: str = ""
    params: dict[str, Any] = field(default_factory=lambda: dict(WINNER))


FILLS = [
    Fill(
        "train --q {quantization} --o {optimizer} --bs {batch_size} --gc {gradient_checkpointing}",
        ["train", "--q", "none", "--o", "adamw", "--bs", "4", "--gc", "false"],
    ),
    Fill("train --max_iters={steps}", ["train", "--max_iters=500"], steps=500),
    Fill("train --max_iters={steps}", ["train", "--max_iters=2000"], config_steps=2000),
    Fill("train --max_iters={steps}", ["train", "--max_iters=300"], steps=300, config_steps=2000),
    Fill("train --max_iters={steps}", None, hole="{steps} needs the full run's step count"),
    Fill(
        "train --config {config} --out {trial_dir}/o", ["train", "--config", "@CONFIG", "--out", "@TRIAL/o"]
    ),
    Fill(
        "train --out {trial_dir}", None, trial_dir=False, hole="{trial_dir} needs the winning trial's folder"
    ),
    Fill("train --ga {gradient_accumulation_steps} {{literal}}", ["train", "--ga", "2", "{literal}"]),
    Fill(  # the baseline won: its own values, also for the knobs the report does not list as changed
        "train {quantization} {optimizer} {batch_size} {gradient_checkpointing}",
        ["train", "int8-quanto", "adamw8bit", "1", "true"],
        params={
            "quantization": "int8-quanto",
            "optimizer": "adamw8bit",
            "batch_size": 1,
            "gradient_checkpointing": True,
        },
    ),
]


@pytest.mark.parametrize("case", FILLS, ids=[f"{i}:{c.template}" for i, c in enumerate(FILLS)])
def test_launch_command_fills_every_placeholder_or_names_the_hole(case: Fill, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump({"steps": case.config_steps} if case.config_steps else {"x": 1}))
    adapter = get_adapter("command", template=case.template, cwd=runs)
    baseline = adapter.load_baseline(config)
    best, trial = tmp_path / "best-config.yaml", tmp_path / "trial-7"

    def command() -> str:
        winner = Winner(
            baseline=baseline,
            params=case.params,
            gradient_accumulation_steps=2,
            steps=case.steps,
            trial_dir=trial if case.trial_dir else None,
            complete=True,
        )
        return adapter.training_command(best, winner)

    if case.want is None:
        with pytest.raises(UsageError) as err:
            command()
        assert case.hole in str(err.value)
        if "{steps}" in case.hole:
            assert "--full-steps" in str(err.value)
        return
    head, _, rest = command().partition(" && ")
    assert head == f"cd {shlex.quote(str(runs.resolve()))}"
    want = [
        w.replace("@CONFIG", str(best.resolve())).replace("@TRIAL", str(trial.resolve())) for w in case.want
    ]
    assert shlex.split(rest) == want


TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps} "
    "--config {config} --trial {trial_dir}"
)


def _env(tmp: Path, seen: Path) -> dict[str, str]:
    return cli_env(
        drop=("SWEEP_FAKE_",), SWEEP_FAKE_ARGV=str(seen), SWEEP_FAKE_SLEEP_S="0.05", SWEEP_FAKE_CARD_GB="16"
    )


@pytest.mark.process
@pytest.mark.timeout(600)
def test_the_printed_launch_command_runs_the_winner_from_the_trials_folder(tmp_path: Path) -> None:
    here, elsewhere = tmp_path / "trials-ran-here", tmp_path / "report-from-here"
    here.mkdir()
    elsewhere.mkdir()
    runs = tmp_path / "runs"
    sweep = [
        sys.executable, "-m", "autotune", "sweep", "--workdir", str(runs), "--cmd", TEMPLATE,
        "--vram-gb", "16", "--steps", "20", "--max-batch-size", "4", "--max-trials", "6",
    ]  # fmt: skip
    storage = f"sqlite:///{runs / 'studies.db'}"

    def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, cwd=cwd, env=_env(tmp_path, tmp_path / "sweep-argv.jsonl"), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def report() -> dict[str, Any]:
        argv = [sys.executable, "-m", "autotune", "report", "--storage", storage, "--format", "json"]
        return dict(json.loads(run(argv, elsewhere).stdout))

    run(sweep, here)  # no --full-steps and no config: {steps} cannot be filled, and the report says so
    first = report()
    assert first["command"] is None
    assert any("{steps} needs" in w and "--full-steps" in w for w in first["warnings"]), first["warnings"]
    run([*sweep, "--full-steps", "700"], here)  # the same sweep again: it resumes and records the count
    doc = report()
    command = doc["command"]
    assert command and "{" not in command, doc.get("warnings")
    best = doc["best"]
    winner = best["params"]

    seen = tmp_path / "launch-argv.jsonl"
    launched = subprocess.run(
        ["bash", "-c", command], cwd=elsewhere, env=_env(tmp_path, seen), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stdout + launched.stderr
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(lines) == 1
    argv, cwd = lines[0]["argv"], lines[0]["cwd"]
    assert Path(cwd).resolve() == here.resolve()  # the trials' folder, not where `report` ran
    expected = [
        str(winner["quantization"]),
        str(winner["optimizer"]),
        str(winner["batch_size"]),
        "true" if winner["gradient_checkpointing"] else "false",
        "700",
    ]
    assert argv[:5] == expected
    config, trial = Path(argv[argv.index("--config") + 1]), Path(argv[argv.index("--trial") + 1])
    assert config.is_file() and config.name.startswith("best-config")
    written = yaml.safe_load(config.read_text())
    assert {k: written[k] for k in winner} == winner
    assert trial.is_dir() and (trial / "config.yaml").is_file()
    assert yaml.safe_load((trial / "config.yaml").read_text())["batch_size"] == winner["batch_size"]


# --- the report over a stored study: where {steps} comes from, and a hole named instead of printed ---


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.report_study import build_study

    workdir = tmp_path_factory.mktemp("stored") / "runs"
    build_study(workdir, trainer="command")
    return workdir


@pytest.mark.parametrize(
    ("config_steps", "full_steps", "want"),
    [
        (2000, None, "--max_iters=2000"),
        (2000, 300, "--max_iters=300"),
        (None, 300, "--max_iters=300"),
        (None, None, None),
    ],
)
def test_report_command_steps_come_from_the_study_or_a_warning_says_why_not(
    stored: Path, tmp_path: Path, config_steps: int | None, full_steps: int | None, want: str | None
) -> None:
    from autotune.report import build as rep
    from tests.report_study import clone_study

    ran_in = tmp_path / "trainer"
    ran_in.mkdir()
    config = tmp_path / "base.yaml"
    config.write_text(
        yaml.safe_dump({"optimization": {"steps": config_steps} if config_steps else {"lr": 1}})
    )
    settings: dict[str, Any] = {
        "trainer_options": {"template": "train --bs {batch_size} --max_iters={steps} --out {trial_dir}"},
        "launch_cwd": str(ran_in),
        "config_path": str(config),
    }
    if full_steps is not None:
        settings["full_steps"] = full_steps
    url, _ = clone_study(stored, tmp_path / "runs", settings=settings)
    report = rep.build_report(rep.open_study(url, None))
    assert report.best is not None
    if want is None:
        assert report.command is None
        assert any("{steps} needs" in w and "--full-steps" in w for w in report.warnings), report.warnings
        return
    assert report.command is not None
    head, _, rest = report.command.partition(" && ")
    assert head == f"cd {ran_in}"
    argv = shlex.split(rest)
    assert argv[:3] == ["train", "--bs", str(report.best.params["batch_size"])]
    assert want in argv and "{" not in report.command
    assert argv[-1] == str((tmp_path / "runs" / (report.best.trial_dir or "")).resolve())


def test_a_study_that_predates_launch_cwd_says_where_the_command_runs(stored: Path, tmp_path: Path) -> None:
    from autotune.report import build as rep
    from tests.report_study import clone_study

    settings = {"trainer_options": {"template": "train --bs {batch_size}"}, "config_path": None}
    url, _ = clone_study(stored, tmp_path / "runs", settings=settings)
    report = rep.build_report(rep.open_study(url, None))
    assert report.command is not None and report.command.startswith(f"cd {shlex.quote(str(Path.cwd()))} ")
    assert any("does not record the folder its trials ran in" in w for w in report.warnings)


# --- --full-steps: a sweep option, stored with the study, given again on a resume ---------------------


def test_full_steps_is_a_sweep_option_named_in_help() -> None:
    from autotune.cli.parser import build_parser
    from autotune.cli.sweep_worker import sweep_options

    parser = build_parser()
    args = parser.parse_args(["sweep", "--cmd", "train {steps}", "--full-steps", "900"])

    assert sweep_options(args).full_steps == 900
    helped = subprocess.run(
        [sys.executable, "-m", "autotune", "sweep", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "--full-steps" in helped.stdout


def test_a_resume_may_give_full_steps_and_launch_cwd_is_informational(tmp_path: Path) -> None:
    from autotune.store import study as st
    from autotune.store import urls
    from autotune.store.storage import open_storage

    storage = open_storage(urls.default_storage_url(tmp_path))
    first = {"trainer": "command", "steps": 20, "launch_cwd": "/a"}
    st.SweepStudy.open_or_create(storage, "s", first, workdir=tmp_path)
    again = {**first, "launch_cwd": "/b", "full_steps": 800}  # no mismatch: neither describes the trials
    handle, resumed = st.SweepStudy.open_or_create(storage, "s", again, workdir=tmp_path)
    assert resumed
    stored = handle.user_attrs["settings"]
    assert stored["full_steps"] == 800 and stored["launch_cwd"] == "/a"
    st.SweepStudy.open_or_create(storage, "s", first, workdir=tmp_path)  # not given again: kept
    assert (
        st.SweepStudy.open_or_create(storage, "s", first, workdir=tmp_path)[0].user_attrs["settings"][
            "full_steps"
        ]
        == 800
    )


def test_a_report_reads_the_baseline_config_once(
    stored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch command and the winning config both need the baseline on disk: one read."""
    from autotune.report import build as rep
    from autotune.trainers.command.adapter import CommandAdapter
    from tests.report_study import clone_study

    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump({"optimization": {"steps": 300}}))
    settings = {
        "trainer_options": {"template": "train --bs {batch_size} --max_iters={steps}"},
        "launch_cwd": str(tmp_path),
        "config_path": str(config),
    }
    url, _ = clone_study(stored, tmp_path / "runs", settings=settings)
    reads: list[Path | None] = []
    original = CommandAdapter.load_baseline

    def counted(self: CommandAdapter, path: Path | None) -> Any:
        reads.append(path)
        return original(self, path)

    monkeypatch.setattr(CommandAdapter, "load_baseline", counted)
    report = rep.build_report(rep.open_study(url, None))
    text = rep.winning_config(report)
    assert report.command is not None and "--max_iters=300" in report.command
    assert "steps: 300" in text
    assert reads == [config]
