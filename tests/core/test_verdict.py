"""What fits, the judged peak, throughput and the winner (autotune.core.verdict), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core import verdict
from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import NO_SPEED_REASON, OomDetails, Outcome
from autotune.core.record import TrialRecord
from autotune.core.verdict import Contender

FIDELITY = {"quantization": "none", "optimizer": "adamw"}
LOW = {"quantization": "int8-quanto", "optimizer": "adamw8bit", "batch_size": 1}
HIGH = {"quantization": "none", "optimizer": "adamw8bit", "batch_size": 1}


@pytest.mark.parametrize(
    ("peak", "card", "headroom", "expected"),
    [
        (None, 40.0, 0.10, None),  # no peak measured: fit unknown
        (36.0, 40.0, 0.10, True),  # exactly on the line
        (36.0 + 1e-12, 40.0, 0.10, True),  # rounding on the line still fits
        (36.01, 40.0, 0.10, False),
        (39.9, 40.0, 0.0, True),
        (0.0, 40.0, 0.10, True),
    ],
)
def test_fits(peak: float | None, card: float, headroom: float, expected: bool | None) -> None:
    assert verdict.fits(peak, card, headroom) is expected


@pytest.mark.parametrize(
    ("recorded", "peak", "limit", "expected"),
    [
        (True, 50.0, 36.0, True),  # a recorded fit is kept as recorded
        (False, 10.0, 36.0, False),
        (None, 35.0, 36.0, True),
        (None, 37.0, 36.0, False),
        (None, None, 36.0, None),  # missing peak: unknown, not a no
        (None, 37.0, None, None),  # no card to judge against
    ],
)
def test_judge_fit(
    recorded: bool | None, peak: float | None, limit: float | None, expected: bool | None
) -> None:
    assert verdict.judge_fit(recorded, peak, limit) is expected


@pytest.mark.parametrize(
    ("trainer", "measured", "expected"),
    [(None, None, None), (10.0, None, 10.0), (None, 12.0, 12.0), (10.0, 12.0, 12.0), (14.0, 12.0, 14.0)],
)
def test_judged_peak_is_the_larger_of_both(
    trainer: float | None, measured: float | None, expected: float | None
) -> None:
    metrics = TrialMetrics(trainer_peak_vram_gb=trainer, measured_peak_vram_gb=measured)
    assert verdict.judged_peak(metrics) == expected


@pytest.mark.parametrize(
    ("trainer", "measured", "covers", "trainers_card", "expected"),
    [
        # ours saw every phase (the hook on CUDA, NVML per process): the whole card held another's 18 GB
        (78.0, 60.0, True, True, 60.0),
        (40.0, 60.0, None, True, 60.0),  # sampled sparsely, it missed the trial's peak: ours again
        (78.0, None, None, True, 78.0),  # nothing of ours, and it is the trial's card: judged
        (78.0, None, None, False, None),  # device 0 while the trial ran on another card: not judged
        (None, 60.0, None, False, 60.0),
        # ours may have missed a phase (a counter on CPU, no NVML): over 10 % above it, the larger
        (78.0, 60.0, None, True, 78.0),
        (34.0, 0.0, False, True, 34.0),  # a counter that saw nothing never hides the trainer's 34 GB
        (65.0, 60.0, None, True, 60.0),  # within 10 %: ours
        (78.0, 60.0, None, False, 60.0),  # over, but of device 0, not the trial's card: ours
    ],
)
def test_a_whole_card_trainer_figure_is_information_unless_nothing_better_exists(
    trainer: float | None,
    measured: float | None,
    covers: bool | None,
    trainers_card: bool,
    expected: float | None,
) -> None:
    metrics = TrialMetrics(
        trainer_peak_vram_gb=trainer,
        measured_peak_vram_gb=measured,
        trainer_peak_device_wide=True,
        measured_peak_covers_all=covers,
    )
    assert verdict.judged_peak(metrics, trainer_card_is_the_trials=trainers_card) == expected
    attrs = verdict.measured_attrs(
        Outcome.OK, "r", metrics, 1, card_gb=80.0, headroom=0.1, trainer_card_is_the_trials=trainers_card
    )
    assert attrs.get("peak_vram_gb") == expected
    assert attrs.get("trainer_peak_vram_gb") == trainer  # still shown, as information


@pytest.mark.parametrize(
    ("sps", "step", "effective", "expected"),
    [
        (3.0, 2.0, 4, 3.0),
        (None, 2.0, 4, 2.0),
        (0.0, 2.0, 4, 2.0),
        (None, None, 4, None),
        (None, 0.0, 4, None),
    ],
)
def test_samples_per_s(sps: float | None, step: float | None, effective: int, expected: float | None) -> None:
    metrics = TrialMetrics(samples_per_s=sps, step_time_s=step)
    assert verdict.samples_per_s(metrics, effective) == expected


def c(name: str, sps: float, noise: float = 0.0, fidelity: int = 0, order: int = 0) -> Contender[str]:
    return Contender(name, sps, noise, fidelity, order)


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        ([], None),
        ([c("a", 1.0), c("b", 2.0)], "b"),
        # near-tie within the 1.5 % floor: the higher fidelity wins though slower
        ([c("fast", 1.01), c("faithful", 1.0, fidelity=1)], "faithful"),
        # just outside the floor: speed wins
        ([c("fast", 1.02), c("faithful", 1.0, fidelity=1)], "fast"),
        # the measured noise widens the tie beyond the floor
        ([c("fast", 1.04, noise=0.05), c("faithful", 1.0, fidelity=1)], "faithful"),
        ([c("fast", 1.10, noise=0.05), c("faithful", 1.0, fidelity=1)], "fast"),
        # among equally faithful near-ties the faster wins; a full tie goes to the earliest
        ([c("x", 1.0, fidelity=1), c("y", 1.01, fidelity=1)], "y"),
        ([c("late", 1.0, order=5), c("early", 1.0, order=2)], "early"),
    ],
)
def test_winner(pool: list[Contender[str]], expected: str | None) -> None:
    best = verdict.winner(pool)
    assert (best.item if best else None) == expected


def test_the_noise_floor_is_the_strategys() -> None:
    from autotune.core.strategy import Strategy

    assert verdict.MIN_NOISE == 0.015
    assert Strategy.__init__.__kwdefaults__["min_noise"] == verdict.MIN_NOISE  # type: ignore[index]


def rec(number: int, params: dict[str, Any], state: str = "complete", **attrs: Any) -> TrialRecord:
    return TrialRecord(number, state, params, attrs.get("samples_per_s"), TrialRecord.attrs_of(**attrs))


def ok(number: int, params: dict[str, Any], sps: float, **attrs: Any) -> TrialRecord:
    attrs.setdefault("fits", True)
    return rec(number, params, outcome="ok", samples_per_s=sps, **attrs)


@pytest.mark.parametrize(
    ("records", "winner", "beaten"),
    [
        ([], None, None),
        ([ok(0, LOW, 1.0), ok(1, LOW, 2.0)], 1, None),
        # the near-tie: a faster low-fidelity trial loses to a faithful one within noise
        ([ok(0, LOW, 1.01), ok(1, HIGH, 1.0)], 1, 0),
        ([ok(0, LOW, 1.10), ok(1, HIGH, 1.0)], 0, None),
        # over the headroom line never wins, however fast
        ([ok(0, LOW, 1.0), ok(1, LOW, 9.0, fits=False)], 0, None),
        # missing peak and no recorded fit: no evidence against, it may win
        ([ok(0, LOW, 1.0), rec(1, LOW, outcome="ok", samples_per_s=2.0)], 1, None),
        # no recorded fit: its peak is judged against the line
        ([ok(0, LOW, 1.0), rec(1, LOW, outcome="ok", samples_per_s=2.0, peak_vram_gb=37.0)], 0, None),
        ([ok(0, LOW, 1.0), rec(1, LOW, outcome="ok", samples_per_s=2.0, peak_vram_gb=35.0)], 1, None),
        # a confirmation re-run confirms another trial; it is never a candidate of its own
        ([ok(0, LOW, 1.0), ok(1, LOW, 2.0, confirm_of=0)], 0, None),
        # failed or unmeasured trials never win
        ([ok(0, LOW, 1.0), rec(1, LOW, "fail", outcome="nan", samples_per_s=5.0)], 0, None),
        ([rec(0, LOW, outcome="ok")], None, None),
    ],
)
def test_pick_winner(records: list[TrialRecord], winner: int | None, beaten: int | None) -> None:
    best, faster = verdict.pick_winner(records, FIDELITY, limit_gb=36.0)
    assert (best.number if best else None) == winner
    assert (faster.number if faster else None) == beaten


def test_status_and_sweep_now_agree_on_a_near_tie() -> None:
    """The old ``autotune status`` copy took the fastest fitting trial, with no near-tie step:
    here it named trial 0 while the sweep and its report named trial 1."""
    records = [ok(0, LOW, 1.01, step_time_s=1.0, step_time_spread_s=0.0), ok(1, HIGH, 1.0)]
    old_status = max(
        (r for r in records if r.fits is not False and r.samples_per_s is not None),
        key=lambda r: r.samples_per_s or 0.0,
    )
    best, _ = verdict.pick_winner(records, FIDELITY, limit_gb=None)
    assert old_status.number == 0
    assert best is not None and best.number == 1


def test_beaten_by_fidelity_for_the_sweeps_own_pick() -> None:
    records = [ok(0, LOW, 1.01), ok(1, HIGH, 1.0), ok(2, LOW, 0.5)]
    beaten = verdict.beaten_by_fidelity(records[1], records, FIDELITY, None)
    assert beaten is not None and beaten.number == 0
    assert verdict.beaten_by_fidelity(records[0], records, FIDELITY, None) is None


@pytest.mark.parametrize(
    ("outcome", "metrics", "expected"),
    [
        (
            Outcome.OK,
            TrialMetrics(step_time_s=2.0, step_time_spread_s=0.1, trainer_peak_vram_gb=30.0),
            {
                "outcome": "ok",
                "reason": "r",
                "step_time_s": 2.0,
                "step_time_spread_s": 0.1,
                "samples_per_s": 2.0,
                "peak_vram_gb": 30.0,
                "trainer_peak_vram_gb": 30.0,
                "headroom_gb": 10.0,
                "fits": True,
            },
        ),
        # over the line: measured, and recorded as not fitting
        (
            Outcome.OK,
            TrialMetrics(samples_per_s=5.0, trainer_peak_vram_gb=30.0, measured_peak_vram_gb=38.0),
            {
                "outcome": "ok",
                "reason": "r",
                "samples_per_s": 5.0,
                "spread_unknown": True,  # one figure (the trainer's samples/s): its spread is not invented
                "peak_vram_gb": 38.0,
                "trainer_peak_vram_gb": 30.0,
                "measured_peak_vram_gb": 38.0,
                "headroom_gb": 2.0,
                "fits": False,
            },
        ),
        # ok with no peak measured: fit unknown
        (
            Outcome.OK,
            TrialMetrics(samples_per_s=5.0),
            {"outcome": "ok", "reason": "r", "samples_per_s": 5.0, "spread_unknown": True, "fits": None},
        ),
        # ended ok but nothing to rank it by: a crash, and no fit judged
        (
            Outcome.OK,
            TrialMetrics(step_time_s=float("nan")),
            {"outcome": "crash", "reason": NO_SPEED_REASON},
        ),
        # one step time and no spread: the record says the spread is unknown
        (
            Outcome.OK,
            TrialMetrics(step_time_s=2.0, trainer_peak_vram_gb=30.0),
            {
                "outcome": "ok",
                "reason": "r",
                "step_time_s": 2.0,
                "samples_per_s": 2.0,
                "spread_unknown": True,
                "peak_vram_gb": 30.0,
                "trainer_peak_vram_gb": 30.0,
                "headroom_gb": 10.0,
                "fits": True,
            },
        ),
        (
            Outcome.NAN,
            TrialMetrics(samples_per_s=5.0),
            {"outcome": "nan", "reason": "r", "samples_per_s": 5.0, "spread_unknown": True},
        ),
    ],
)
def test_measured_attrs(outcome: Outcome, metrics: TrialMetrics, expected: dict[str, Any]) -> None:
    assert verdict.measured_attrs(outcome, "r", metrics, 4, card_gb=40.0, headroom=0.1) == expected


def test_measured_attrs_of_an_oom_keep_its_figures() -> None:
    oom = OomDetails(tried_gb=2.0, free_gb=1.123456, total_gb=None)
    attrs = verdict.measured_attrs(
        Outcome.OOM, "r", TrialMetrics(), 1, 40.0, 0.1, oom=oom, peak_host_rss_gb=3.0
    )
    assert attrs == {
        "outcome": "oom",
        "reason": "r",
        "peak_host_rss_gb": 3.0,
        "oom_tried_gb": 2.0,
        "oom_free_gb": 1.1235,
    }


@pytest.mark.parametrize(
    ("fit", "peak", "expected"),
    [
        (True, 9.0, -1.8),  # under the 10.8 GB line: feasible, by how much
        (False, 11.5, 0.7),  # over it
        (True, 10.8, 0.0),  # on the line fits
        (None, None, 1.2),  # unknown fit: the most a finished run could be over (card - line)
        (False, None, 1.2),  # a recorded misfit with no peak kept: as unknown, never feasible
        (True, None, 0.0),  # a recorded fit with no peak kept: feasible
        (True, 10.8000001, 0.0),  # the verdict's rounding decides the side, never Optuna's
        (False, 10.79, 0.001),  # likewise: a recorded misfit is never feasible
    ],
)
def test_fit_constraint_is_over_the_line_with_the_verdicts_sign(
    fit: bool | None, peak: float | None, expected: float
) -> None:
    value = verdict.fit_constraint(fit, peak, verdict.fit_limit_gb(12.0, 0.1), 12.0)
    assert value == pytest.approx(expected, abs=1e-6)
    assert (value <= 0) == (fit is True)


def test_an_unknown_fit_is_infeasible_even_with_no_headroom() -> None:
    assert verdict.fit_constraint(None, None, verdict.fit_limit_gb(12.0, 0.0), 12.0) > 0
