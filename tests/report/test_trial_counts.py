"""One trial count with one meaning: the sweep's last line, ``status`` and the report say the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.core.record import TrialRecord, count_trials
from autotune.report import build as rep
from autotune.report import status
from autotune.store.storage import open_storage
from autotune.store.study import SweepStudy
from tests.report_study import BASE, _trial, build_study


@pytest.mark.parametrize(
    ("rows", "finished", "interrupted", "outcomes"),
    [
        ([], 0, 0, {}),
        ([("complete", "ok"), ("fail", "oom"), ("fail", "interrupted")], 2, 1, {"ok": 1, "oom": 1}),
        ([("running", None), ("waiting", None), ("fail", "crash")], 1, 0, {"crash": 1}),
        ([("pruned", None)], 1, 0, {"pruned": 1}),
    ],
)
def test_the_count_and_its_breakdown_agree(
    rows: list[tuple[str, str | None]], finished: int, interrupted: int, outcomes: dict[str, int]
) -> None:
    records = [
        TrialRecord(i, state, {}, None, {"outcome": o} if o else {}) for i, (state, o) in enumerate(rows)
    ]
    counts = count_trials(records)
    assert (counts.finished, counts.interrupted, counts.outcomes) == (finished, interrupted, outcomes)
    assert sum(counts.outcomes.values()) == counts.finished


def test_status_and_the_report_say_the_same_count_with_interrupted_trials(tmp_path: Path) -> None:
    url, study = build_study(tmp_path, with_running=False)  # 6 finished trials
    for _ in range(2):  # two runs cut short by Ctrl-C: run again, not counted
        study.add_trial(_trial(BASE, {"outcome": "interrupted", "reason": "SIGINT"}, TrialState.FAIL))
    sweep_count = SweepStudy.load(open_storage(url, create=False), study.study_name).trial_counts()
    info = status.collect(storage=url, workdir=None, study=study.study_name)
    report = rep.build_report(rep.open_study(url, None))
    assert sweep_count.finished == info["counted_trials"] == report.finished == 6
    assert sum(info["outcomes"].values()) == 6 and "interrupted" not in info["outcomes"]
    assert sweep_count.interrupted == info["interrupted_trials"] == report.interrupted == 2
    text = status.render(info)
    assert "trials: 6 finished (ok 5, oom 1), +2 interrupted (run again, not counted)" in text
    markdown = rep.render_markdown(report)
    assert "6 trials finished (5 ok, 1 failed), 0 running, 2 interrupted (run again, not counted)" in markdown
    doc = rep.render_json(report)
    assert '"finished": 6' in doc and '"interrupted": 2' in doc
