"""When the winner's or the baseline's speed was measured on a busy host, every view says so."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from autotune.core.record import TrialRecord, busy_speed_note
from autotune.report import build as rep
from autotune.store.storage import open_storage
from autotune.store.study import SweepStudy
from autotune.sweep import conclude
from tests.report_study import build_study

BUSY = "others' CPU load 1.6 cores"


def _rec(number: int, busy: str | None) -> TrialRecord:
    return TrialRecord(
        number, "complete", {}, 1.0, {"outcome": "ok", **({"busy_host": busy} if busy else {})}
    )


def _mark_busy(db: Path, trial_id: int) -> None:
    """As the sweep records a busy trial (Optuna refuses attrs on a finished trial: write the row)."""
    with sqlite3.connect(db) as con:
        con.execute(
            "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, 'busy_host', ?)",
            (trial_id, json.dumps(BUSY)),
        )


@pytest.mark.parametrize(
    ("winner", "baseline", "expected"),
    [
        (_rec(4, None), _rec(0, None), None),
        (_rec(4, BUSY), _rec(0, None), "the winner's (trial 4: others' CPU load 1.6 cores) speed"),
        (_rec(4, None), _rec(0, BUSY), "the baseline's (trial 0: others' CPU load 1.6 cores) speed"),
        (
            _rec(4, BUSY),
            _rec(0, "x"),
            "the winner's (trial 4: others' CPU load 1.6 cores) and the baseline's",
        ),
        (
            _rec(0, BUSY),
            _rec(0, BUSY),
            "the winner's (trial 0: others' CPU load 1.6 cores) speed",
        ),  # one trial
        (None, _rec(0, BUSY), "the baseline's"),
        (None, None, None),
    ],
)
def test_the_busy_note_names_which_speed_was_measured_busy(
    winner: TrialRecord | None, baseline: TrialRecord | None, expected: str | None
) -> None:
    note = busy_speed_note(winner, baseline)
    if expected is None:
        assert note is None
    else:
        assert note is not None and expected in note and "the speed-up is suspect" in note


def test_a_busy_baseline_is_said_in_the_head_the_warnings_and_the_sweeps_last_lines(tmp_path: Path) -> None:
    url, study = build_study(tmp_path, with_running=False)
    _mark_busy(tmp_path / "studies.db", study.trials[0]._trial_id)
    report = rep.build_report(rep.open_study(url, None))
    assert report.best is not None and report.baseline is not None and report.speedup is not None
    markdown = rep.render_markdown(report)
    head = markdown.split("## ")[0]
    assert "HOST BUSY while measured: speed suspect" in head
    assert "MEASURED ON A BUSY HOST: suspect, see Warnings" in head
    assert any("Measured on a busy host: the baseline's (trial 0" in w for w in report.warnings)
    handle = SweepStudy.load(open_storage(url, create=False), study.study_name)
    result = conclude.result(handle, study.study_name, url, report.best.number, "done", [], time.monotonic())
    assert result.busy_note is not None and "the baseline's (trial 0" in result.busy_note


def test_a_quiet_sweep_says_nothing_of_it(tmp_path: Path) -> None:
    url, _ = build_study(tmp_path, with_running=False)
    report = rep.build_report(rep.open_study(url, None))
    assert "BUSY" not in rep.render_markdown(report)
    assert not any("busy host" in w for w in report.warnings)
