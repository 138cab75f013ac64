"""A trial as the study stores it (autotune.core.record): the one place that knows the attr keys."""

from __future__ import annotations

from typing import Any

import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune.core.record import KEYS, MEASURES, TrialRecord
from autotune.core.space import from_study_value, same_param, to_study_value
from autotune.core.strategy import Observation
from tests.fakes.landscape import KNOBS_YAML

PARAMS = {"quantization": "none", "optimizer": "adamw", "batch_size": 2, "gradient_checkpointing": True}
DISTS = {
    "quantization": CategoricalDistribution(["int8-quanto", "none"]),
    "optimizer": CategoricalDistribution(["adamw8bit", "adamw"]),
    "batch_size": IntDistribution(1, 16, log=True),
    "gradient_checkpointing": CategoricalDistribution([True, False]),
}


def frozen(state: TrialState, attrs: dict[str, Any], value: float | None = None) -> Any:
    return create_trial(state=state, params=PARAMS, distributions=DISTS, user_attrs=attrs, value=value)


def test_a_stored_trial_reads_back_through_typed_properties() -> None:
    attrs = TrialRecord.attrs_of(
        outcome="ok",
        reason="",
        samples_per_s=4.0,
        step_time_s=2.0,
        step_time_spread_s=0.1,
        peak_vram_gb=30.5,
        fits=True,
        confirm_of=3,
        trial_dir="/runs/s/trial-0004",
        spent_s=12.5,
        pid=99,
        trial_tag="abc",
    )
    rec = TrialRecord.from_trial(frozen(TrialState.COMPLETE, attrs, value=4.0))
    assert rec.state == "complete" and rec.value == 4.0 and dict(rec.params) == PARAMS
    assert (rec.outcome, rec.is_ok, rec.is_interrupted) == ("ok", True, False)
    assert (rec.samples_per_s, rec.peak_vram_gb, rec.fits, rec.confirm_of) == (4.0, 30.5, True, 3)
    assert rec.relative_spread == pytest.approx(0.05)
    assert (rec.trial_dir, rec.spent_s, rec.pid, rec.pgid, rec.trial_tag) == (
        "/runs/s/trial-0004",
        12.5,
        99,
        None,  # no process group recorded
        "abc",
    )
    assert list(rec.measures()) == [k for k in MEASURES if k in attrs]


@pytest.mark.parametrize(
    ("attrs", "sps", "fits", "spread"),
    [
        ({}, None, None, None),
        ({"samples_per_s": "fast", "fits": "yes"}, None, None, None),  # wrong types read as missing
        ({"step_time_s": 0.0, "step_time_spread_s": 0.1}, None, None, None),
        ({"samples_per_s": 3, "fits": False, "step_time_s": 2, "step_time_spread_s": 1}, 3.0, False, 0.5),
    ],
)
def test_missing_or_odd_values_read_as_none(
    attrs: dict[str, Any], sps: float | None, fits: bool | None, spread: float | None
) -> None:
    rec = TrialRecord(0, attrs=attrs)
    assert (rec.samples_per_s, rec.fits, rec.relative_spread) == (sps, fits, spread)


def test_an_unknown_key_is_a_bug_not_a_silent_attr() -> None:
    with pytest.raises(KeyError, match="samples_per_sec"):
        TrialRecord.attrs_of(samples_per_sec=1.0)
    with pytest.raises(KeyError, match="peak"):
        TrialRecord(0).get("peak")
    assert set(MEASURES) <= set(KEYS)


def test_states_are_spelled_as_the_report_shows_them() -> None:
    assert TrialRecord.from_trial(frozen(TrialState.FAIL, {})).state == "fail"
    assert TrialRecord.from_trial(frozen(TrialState.RUNNING, {})).state == "running"


@pytest.mark.parametrize(
    ("state", "attrs", "outcome"),
    [
        (TrialState.RUNNING, {}, None),  # running elsewhere
        (TrialState.FAIL, {}, "crash"),  # no outcome recorded
        (TrialState.COMPLETE, {"outcome": "ok", "samples_per_s": 2.0, "fits": True}, "ok"),
    ],
)
def test_the_strategy_sees_a_record_as_an_observation(
    state: TrialState, attrs: dict[str, Any], outcome: str | None
) -> None:
    from autotune.core.space import Space

    space = Space.from_text(KNOBS_YAML, max_batch_size=16, allow_extra_savers=False)
    cand = space.candidate(PARAMS)
    obs = Observation.from_record(
        cand, TrialRecord.from_trial(frozen(state, attrs, 2.0 if outcome == "ok" else None))
    )
    assert obs.candidate == cand and obs.outcome == outcome
    assert obs.samples_per_s == attrs.get("samples_per_s") and obs.fits == attrs.get("fits")


@pytest.mark.parametrize(
    ("value", "stored"), [(None, "none"), ("none", "none"), ("int8", "int8"), (True, True), (4, 4)]
)
def test_null_and_none_are_one_value_in_the_study(value: Any, stored: Any) -> None:
    assert to_study_value(value) == stored
    assert from_study_value(stored) == (None if stored == "none" else stored)
    assert same_param(value, stored)
