"""The sweep's settings record: written once at its version, read by one reader that upgrades
older versions, so a study written by an earlier autotune resumes and reports as before."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.errors import StudyMismatchError
from autotune.report.load import build_report
from autotune.report.winning import adapter_for
from autotune.store import study as st
from autotune.store.settings import (
    SETTINGS_VERSION,
    read_settings,
    settings_diff,
    settings_of,
    settings_record,
)
from autotune.store.storage import open_storage
from autotune.sweep.options import SweepOptions
from autotune.sweep.setup import SweepPlan, plan_sweep
from autotune.trainers import Winner
from tests.helpers import FAKES

TEMPLATE = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKES / 'sweep_trainer.py'))} "
    "{quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps} --swap {swap}"
)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, {}),
        ({}, {}),
        # version 1: options as text, hook and batch_sizes only when given
        (
            {"steps": 20, "trainer_options": {"knobs": "['swap']", "template": "t {x}", "n": "3"}},
            {
                "steps": 20,
                "trainer_options": {"knobs": ["swap"], "template": "t {x}", "n": "3"},
                "hook": True,
                "batch_sizes": None,
                "settings_version": 2,
            },
        ),
        (
            {"hook": False, "batch_sizes": "1,2,4", "trainer_options": {"hook": "False", "x": "None"}},
            {
                "hook": False,
                "batch_sizes": "1,2,4",
                "trainer_options": {"hook": False, "x": None},
                "settings_version": 2,
            },
        ),
        (  # text that only looks like a literal stays text
            {"trainer_options": {"cmd": "(cd x && train)", "path": "/a/b"}},
            {
                "trainer_options": {"cmd": "(cd x && train)", "path": "/a/b"},
                "hook": True,
                "batch_sizes": None,
                "settings_version": 2,
            },
        ),
        # the current version is read as stored
        (
            {
                "settings_version": 2,
                "hook": True,
                "batch_sizes": None,
                "trainer_options": {"knobs": ["swap"]},
            },
            {
                "settings_version": 2,
                "hook": True,
                "batch_sizes": None,
                "trainer_options": {"knobs": ["swap"]},
            },
        ),
    ],
)
def test_read_settings_upgrades_older_versions(
    stored: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert read_settings(stored) == expected


def test_settings_of_reads_the_study_attr() -> None:
    assert settings_of({}) == {}
    assert settings_of({"settings": "garbage"}) == {}
    assert settings_of({"settings": {"steps": 3}})["settings_version"] == SETTINGS_VERSION


def test_the_record_stores_json_values_at_the_current_version() -> None:
    record = settings_record(
        {
            "steps": 3,
            "trainer_options": {"trainer_dir": Path("/t"), "launcher": ("py", Path("/x")), "v": False},
        }
    )
    assert record == {
        "steps": 3,
        "settings_version": SETTINGS_VERSION,
        "trainer_options": {"launcher": ["py", "/x"], "trainer_dir": "/t", "v": False},
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, []),
        ({"hook": False}, ["hook: the study has True, this run False"]),
        ({"batch_sizes": "1,2"}, ["batch_sizes: the study has None, this run '1,2'"]),
        ({"trainer_options": {"knobs": ["swap"], "template": "other"}}, ["trainer_options.template: "
          "the study has 't {x}', this run 'other'"]),
    ],
)  # fmt: skip
def test_a_version_1_study_is_compared_with_a_current_run_as_the_same_sweep(
    change: dict[str, Any], expected: list[str]
) -> None:
    stored_v1 = {"steps": 20, "trainer_options": {"knobs": "['swap']", "template": "t {x}"}}
    current = settings_record(
        {
            "steps": 20,
            "trainer_options": {"knobs": ["swap"], "template": "t {x}"},
            "hook": True,
            "batch_sizes": None,
        }
    )
    assert settings_diff(stored_v1, {**current, **change}) == expected


def _plan(tmp: Path, **kw: Any) -> SweepPlan:
    opts = SweepOptions(
        trainer="command", cmd=TEMPLATE, knobs=["swap=0,1"], workdir=tmp / "runs", vram_gb=16, steps=20,
        max_batch_size=2, **kw,
    )  # fmt: skip
    return plan_sweep(opts, False)


def _as_version_1(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as autotune wrote them before the record had a version (``sweep/setup.py`` then)."""
    old = {k: v for k, v in settings.items() if k not in ("settings_version", "hook", "batch_sizes")}
    old["trainer_options"] = {k: str(v) for k, v in sorted(settings["trainer_options"].items())}
    if not settings["hook"]:
        old["hook"] = False
    if settings["batch_sizes"] is not None:
        old["batch_sizes"] = settings["batch_sizes"]
    return old


@pytest.mark.parametrize("kw", [{}, {"hook": False}, {"batch_sizes": (1, 2)}])
def test_a_study_written_in_version_1_resumes_and_reports(tmp_path: Path, kw: dict[str, Any]) -> None:
    plan = _plan(tmp_path, **kw)
    assert plan.settings["settings_version"] == SETTINGS_VERSION
    storage = open_storage(plan.storage_url)
    old = optuna.create_study(study_name=plan.study_name, storage=storage, direction="maximize")
    old.set_user_attr("settings", _as_version_1(plan.settings))
    old.set_user_attr("workdir", str(plan.workdir))

    study, resumed = st.SweepStudy.open_or_create(
        storage, plan.study_name, plan.settings, workdir=plan.workdir
    )
    assert resumed
    assert read_settings(study.user_attrs["settings"]) == read_settings(plan.settings)
    report = build_report(optuna.load_study(study_name=plan.study_name, storage=storage))
    assert report.trainer_options["knobs"] == ["swap"]  # a list again, not its text
    assert "--swap 1" in adapter_for(report).training_command(
        tmp_path / "c.yaml",
        Winner(params={"quantization": "none", "optimizer": "adamw", "batch_size": 2,
                       "gradient_checkpointing": False, "swap": 1}, steps=10),
    )  # fmt: skip


def test_a_version_1_study_with_other_settings_is_still_refused_by_name(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    storage = open_storage(plan.storage_url)
    old = optuna.create_study(study_name=plan.study_name, storage=storage, direction="maximize")
    old.set_user_attr("settings", {**_as_version_1(plan.settings), "hook": False})
    with pytest.raises(StudyMismatchError, match="hook: the study has False, this run True"):
        st.SweepStudy.open_or_create(storage, plan.study_name, plan.settings, workdir=plan.workdir)
