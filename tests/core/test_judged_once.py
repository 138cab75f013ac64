"""Rules the judge-once work keeps in one place: the effective batch (one function, read back from
the trial by everyone else), the crash for nothing measured (one rule, the same answer from
``outcome.explain`` and the verdict's attrs). Tables."""

from __future__ import annotations

import pytest

from autotune.core.metrics import TrialMetrics, effective_batch
from autotune.core.outcome import Outcome, explain, unranked
from autotune.core.verdict import measured_attrs
from autotune.sweep.naming import accumulation_for

EFFECTIVE = [
    # batch, GA, data-parallel copies -> samples per optimizer step
    (1, 1, 1, 1),
    (2, 4, 1, 8),
    (3, 2, 4, 24),
    (2, 1, 2, 4),  # two data-parallel copies (a pipeline of 4 GPUs in 2 stages counts 2, not 4)
    (0, 0, 0, 1),  # nothing below one: a missing value is one
]


@pytest.mark.parametrize(("batch", "ga", "dp", "want"), EFFECTIVE)
def test_effective_batch(batch: int, ga: int, dp: int, want: int) -> None:
    assert effective_batch(batch, ga, dp) == want


@pytest.mark.parametrize(
    ("batch", "target", "gpus", "want"),
    [
        (1, 8, 1, (8, 8)),  # accumulation keeps the target
        (4, 8, 1, (2, 8)),
        (3, 8, 1, (2, 6)),  # no whole GA keeps 8: the smaller, recorded as it is
        (16, 8, 1, (1, 16)),  # past the target: GA 1 and a larger effective batch
        (2, 8, 2, (2, 8)),  # two copies
    ],
)
def test_accumulation_keeps_the_target_through_the_one_function(
    batch: int, target: int, gpus: int, want: tuple[int, int]
) -> None:
    ga, effective = accumulation_for(batch, target, gpus)
    assert (ga, effective) == want
    assert effective == effective_batch(batch, ga, gpus)


UNMEASURED = [
    ("nothing read", TrialMetrics(), True),
    ("a NaN step time", TrialMetrics(step_time_s=float("nan")), True),
    ("an infinite samples/s", TrialMetrics(samples_per_s=float("inf")), True),
    ("a zero step time", TrialMetrics(step_time_s=0.0), True),
    ("a step time", TrialMetrics(step_time_s=0.5), False),
    ("a samples/s", TrialMetrics(samples_per_s=3.0), False),
]


@pytest.mark.parametrize(("metrics", "crash"), [u[1:] for u in UNMEASURED], ids=[u[0] for u in UNMEASURED])
def test_nothing_measured_is_one_rule(metrics: TrialMetrics, crash: bool) -> None:
    """``explain`` (a clean exit) and ``measured_attrs`` (an ok outcome) give the same answer and
    the same reason, the one ``unranked`` says."""
    why = explain(0, None, timed_out=False, stalled=False, interrupted=False, output="", metrics=metrics)
    attrs = measured_attrs(Outcome.OK, "finished", metrics, 4, card_gb=40.0, headroom=0.1)
    rule = unranked(metrics)
    assert (rule is not None) == crash
    if crash:
        assert rule is not None
        assert why == rule
        assert (attrs["outcome"], attrs["reason"]) == (rule.outcome.value, rule.reason)
        assert "samples_per_s" not in attrs
    else:
        assert why.outcome is Outcome.OK and attrs["outcome"] == "ok"
    assert unranked(None) is None  # no metrics given: the output alone decides


@pytest.mark.parametrize(
    ("attrs", "value"),
    [
        ({"outcome": "ok", "samples_per_s": 4.0}, 4.0),  # COMPLETE with its speed
        ({"outcome": "ok"}, None),  # nothing to rank it by: FAIL
        ({"outcome": "ok", "samples_per_s": float("inf")}, None),
        ({"outcome": "oom", "samples_per_s": 4.0}, None),  # any other end fails, whatever its figures
        ({"outcome": "nan", "samples_per_s": 4.0}, None),
        ({"outcome": "config_error"}, None),
        ({"outcome": "ok", "samples_per_s": 4.0, "same_command_as": 3}, 4.0),  # a reused twin's result
    ],
)
def test_the_study_value_is_decided_by_the_verdict(attrs: dict[str, object], value: float | None) -> None:
    from autotune.core.verdict import study_value

    assert study_value(attrs) == value
