"""``autotune status`` names the winner by the verdict's rule, as the sweep and the report do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune.core.record import TrialRecord
from autotune.report import build as rep
from autotune.report import status

DISTS = {
    "quantization": CategoricalDistribution(["int8-quanto", "none"]),
    "optimizer": CategoricalDistribution(["adamw8bit", "adamw"]),
    "batch_size": IntDistribution(1, 16, log=True),
    "gradient_checkpointing": CategoricalDistribution([True, False]),
}
LOW = {
    "quantization": "int8-quanto",
    "optimizer": "adamw8bit",
    "batch_size": 1,
    "gradient_checkpointing": True,
}
HIGH = {**LOW, "quantization": "none"}


def near_tie_study(workdir: Path, **study_attrs: Any) -> str:
    """Trial 0 is 1 % faster; trial 1 keeps full precision: within the noise floor."""
    workdir.mkdir(parents=True)
    url = f"sqlite:///{workdir}/studies.db"
    study = optuna.create_study(study_name="tie", storage=url, direction="maximize")
    study.set_user_attr(
        "settings",
        {
            "trainer": "reference",
            "knobs": list(DISTS),
            "headroom": 0.1,
            "card": {"name": "emulated 40 GB card", "vram_gb": 40.0, "count": 1, "tier": "40-60GB"},
        },
    )
    for key, value in study_attrs.items():
        study.set_user_attr(key, value)
    for params, sps in ((LOW, 1.01), (HIGH, 1.0)):
        attrs = TrialRecord.attrs_of(outcome="ok", samples_per_s=sps, peak_vram_gb=20.0, fits=True)
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE, value=sps, params=params, distributions=DISTS, user_attrs=attrs
            )
        )
    return url


def test_a_running_study_names_the_near_tie_winner_like_its_report(tmp_path: Path) -> None:
    url = near_tie_study(tmp_path / "runs")
    info = status.collect(storage=url, workdir=None, study="tie")
    report = rep.build_report(rep.open_study(url, "tie"), report_dir=tmp_path / "out")
    assert report.best is not None and report.best.number == 1
    assert info["best"]["number"] == 1  # the old copy took the fastest: trial 0


@pytest.mark.parametrize("chosen", [0, 1])
def test_the_sweeps_own_pick_is_shown_as_recorded(tmp_path: Path, chosen: int) -> None:
    url = near_tie_study(tmp_path / "runs", best_trial=chosen)
    assert status.collect(storage=url, workdir=None, study="tie")["best"]["number"] == chosen
