"""The search brain (autotune.core.strategy): dominance tables, and whole searches on simulated landscapes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from autotune.core import memory
from autotune.core.grid import Grid
from autotune.core.space import Candidate, Space
from autotune.core.strategy import Observation, Strategy
from tests.fakes.landscape import (
    KNOBS_YAML,
    SCRIPT_KNOBS_YAML,
    Landscape,
    ScriptLandscape,
    generate,
    generate_script,
    space_of,
    suite,
)
from tests.helpers import FAKES

CARD = 80.0
HEADROOM = 0.1  # fit line: 72 GB


def space(max_batch_size: int = 16, extra: bool = False) -> Space:
    return Space.from_text(KNOBS_YAML, max_batch_size=max_batch_size, allow_extra_savers=extra)


def cand(q: str = "int8-quanto", o: str = "adamw8bit", b: int = 1, gc: bool = True) -> Candidate:
    return space(32, extra=True).candidate(
        {"quantization": q, "optimizer": o, "batch_size": b, "gradient_checkpointing": gc}
    )


def strategy(baseline: Candidate | None = None, extra: bool = False, max_batch: int = 16) -> Strategy:
    return Strategy(space(max_batch, extra), baseline or cand(), CARD, HEADROOM)


def ok(c: Candidate, sps: float, peak: float, spread: float = 0.01) -> Observation:
    return Observation(c, "ok", sps, peak, None, spread)


def oom(c: Candidate) -> Observation:
    return Observation(c, "oom")


# -- dominance, table-driven -----------------------------------------------------------------
# (history, candidate, expected verdict kind or None)
DOMINANCE = [
    ([oom(cand(b=4))], cand(b=8), "oom"),
    ([oom(cand(b=4))], cand(b=4, q="none", o="adamw", gc=False), "oom"),
    ([oom(cand(b=4))], cand(b=2), None),
    ([oom(cand(b=4))], cand(b=8, q="int2-quanto"), None),  # more saving in one knob: not dominated
    ([oom(cand(b=2, q="int4-quanto"))], cand(b=2, q="int2-quanto"), None),  # extra savers: unordered
    ([oom(cand(b=2, q="int4-quanto"))], cand(b=2, q="int8-quanto"), "oom"),
    ([oom(cand(q="none", b=2))], cand(q="int8-quanto", b=16), None),
    ([ok(cand(b=4), 1.0, 75.0)], cand(b=8), "over_headroom"),  # measured peak over the 72 GB line
    ([ok(cand(b=4), 1.0, 70.0)], cand(b=8), None),  # under the line: proves nothing hungrier fails
    ([ok(cand(b=4), 1.0, 75.0), oom(cand(b=8))], cand(b=16), "oom"),  # an OOM outranks headroom
    ([Observation(cand(b=2), "nan", None, 76.0, False, None)], cand(b=4), "over_headroom"),
    ([Observation(cand(b=2), "crash"), Observation(cand(b=2), "crash")], cand(b=4), "failed"),
    ([Observation(cand(b=2), "crash")], cand(b=4), None),  # one crash may be transient
    ([Observation(cand(b=2), "timeout")], cand(b=4, gc=False), None),  # not a memory verdict
    ([Observation(cand(b=4), None), oom(cand(b=2))], cand(b=4), None),  # running elsewhere: no verdict
]


@pytest.mark.parametrize(("history", "candidate", "kind"), DOMINANCE)
def test_dominance_verdicts(history: list[Observation], candidate: Candidate, kind: str | None) -> None:
    s = strategy(extra=True)
    verdicts = {v.candidate: v for v in s.ruled_out(history)}
    if kind is None:
        assert candidate not in verdicts
        return
    verdict = verdicts[candidate]
    assert verdict.kind == kind
    assert verdict.by and all(b in {o.candidate for o in history} for b in verdict.by)
    if kind == "oom":
        assert "ran out of device memory" in verdict.reason
    if kind == "over_headroom":
        assert (
            "over the headroom line 72.00 GB" in verdict.reason
            and "out of device memory" not in verdict.reason
        )


def test_measured_candidates_get_no_verdict() -> None:
    s = strategy()
    history = [oom(cand(b=4)), ok(cand(b=8), 1.0, 70.0)]  # contradictory, as noise can be
    assert cand(b=8) not in {v.candidate for v in s.ruled_out(history)}
    assert cand(b=4) not in {v.candidate for v in s.ruled_out(history)}


def test_a_batch_below_a_measured_fit_is_still_measured_when_it_could_win() -> None:
    """b=2 needs no more memory than b=4 with AdamW, which fit, so it fits too; no speed bound says
    it cannot beat 1.05, so it is measured, not assumed."""
    s = strategy()
    history = [ok(cand(b=1), 1.0, 30.0), ok(cand(b=4, o="adamw"), 1.05, 50.0)]
    assert cand(b=2) in s.could_win(history)
    # A family whose speed nothing bounds yet (bf16: no prior relates it) gets its first run
    # first; measured slow, it is bounded, and then b=2 runs.
    while (nxt := s.next_candidate(history)) != cand(b=2):
        assert nxt is not None and s.space.family(nxt) not in {s.space.family(o.candidate) for o in history}
        assert math.isinf(s.could_win(history)[nxt])
        history.append(ok(nxt, 0.5, 40.0))
    assert len(history) <= 4


# -- best and near-ties -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([ok(cand(b=1), 1.00, 30), ok(cand(b=2), 1.10, 40)], cand(b=2)),
        # within noise: the higher-fidelity candidate (full AdamW) wins the tie
        ([ok(cand(b=2), 1.10, 40), ok(cand(b=2, o="adamw"), 1.09, 41)], cand(b=2, o="adamw")),
        # out of noise: speed wins
        ([ok(cand(b=2), 1.10, 40), ok(cand(b=2, o="adamw"), 1.00, 41)], cand(b=2)),
        # a wide measured spread widens the tie (a run's noise: half its per-step spread)
        ([ok(cand(b=2), 1.10, 40, 0.12), ok(cand(b=2, q="none"), 1.05, 60)], cand(b=2, q="none")),
        ([ok(cand(b=2), 1.10, 40, 0.06), ok(cand(b=2, q="none"), 1.05, 60)], cand(b=2)),
        # over headroom and NaN never win
        ([ok(cand(b=1), 1.0, 30), ok(cand(b=8), 2.0, 75)], cand(b=1)),
        ([ok(cand(b=1), 1.0, 30), Observation(cand(b=2), "nan", 2.0, 40)], cand(b=1)),
        ([oom(cand(b=1))], None),
    ],
)
def test_best(history: list[Observation], expected: Candidate | None) -> None:
    best = strategy().best(history)
    assert (best.candidate if best else None) == expected


# -- the order of work --------------------------------------------------------------------------
def test_baseline_first_then_never_again() -> None:
    s = strategy(baseline=cand(q="none", o="adamw"))
    assert s.next_candidate([]) == cand(q="none", o="adamw")
    nxt = s.next_candidate([ok(cand(q="none", o="adamw"), 1.0, 50)])
    assert nxt is not None and nxt != cand(q="none", o="adamw")


@pytest.mark.parametrize("outcome", ["crash", "config_error", "timeout", "host_oom"])
def test_baseline_failing_for_another_reason_stops_the_search(outcome: str) -> None:
    assert strategy().next_candidate([Observation(cand(), outcome)]) is None


def test_interrupted_baseline_is_run_again() -> None:
    assert strategy().next_candidate([Observation(cand(), "interrupted")]) == cand()


def test_baseline_oom_leaves_only_extra_savers() -> None:
    s = strategy(extra=True)
    history = [oom(cand())]
    proposed = []
    while (c := s.next_candidate(history)) is not None:
        proposed.append(c)
        history.append(oom(c))
        assert len(proposed) < 50
    assert proposed and all(c.params["quantization"] in ("int2-quanto", "int4-quanto") for c in proposed)
    assert strategy(extra=False).next_candidate([oom(cand())]) is None


def test_running_elsewhere_is_never_proposed() -> None:
    s = strategy()
    history = [ok(cand(), 1.0, 30.0)]
    first = s.next_candidate(history)
    assert first is not None
    history.append(Observation(first, None))
    second = s.next_candidate(history)
    assert second not in (first, None)
    # the baseline itself running elsewhere: the search goes on around it
    assert s.next_candidate([Observation(cand(), None)]) not in (cand(), None)


def test_resume_gives_the_same_next_candidate() -> None:
    land = generate(26)
    history = run_search(land, stop_after=4).history  # its search ends at 5
    a = make_strategy(land).next_candidate(history)
    b = make_strategy(land).next_candidate(list(history))
    c = make_strategy(land).next_candidate(history)
    assert a == b == c and a is not None


@pytest.mark.parametrize("outcome", ["crash", "timeout", "stalled", "config_error", "interrupted"])
def test_non_oom_failures_are_not_retried_forever(outcome: str) -> None:
    """Every int8 candidate fails: the search still ends, retrying each at most a few times."""
    land = replace(generate(26), allow_extra_savers=True)  # int8 on an unquantized baseline: asked for
    result = run_search(land, fail=lambda c: c.params["quantization"] == "int8-quanto", fail_as=outcome)
    counts = Counter(o.candidate for o in result.history if o.outcome == outcome)
    assert counts, "the scenario must exercise failures"
    assert max(counts.values()) <= (5 if outcome == "interrupted" else 2)
    assert result.best is not None and result.best.candidate.params["quantization"] != "int8-quanto"


def test_next_candidate_with_100_observations_answers_the_same_and_leaves_history_alone() -> None:
    """A long history (its cost per call is measured by ``scripts/bench_strategy_calls.py``)."""
    s = Space.from_text(KNOBS_YAML, max_batch_size=32, allow_extra_savers=True)
    land = generate(7)
    history = []
    for c in list(s)[:100]:
        r = land.simulate(c.params)
        history.append(Observation(c, r.outcome, r.samples_per_s, r.peak_vram_gb, None, r.spread))
    before = list(history)
    strat = Strategy(s, s.candidate(land.baseline), land.card_gb, land.headroom)
    answers = {strat.next_candidate(history) for _ in range(5)}
    assert len(answers) == 1 and history == before
    (answer,) = answers
    assert answer is None or answer in set(s)


# -- whole searches on simulated landscapes ------------------------------------------------------
@dataclass
class SearchResult:
    history: list[Observation]
    best: Observation | None
    found: bool
    trials: int
    grid: int


def make_strategy(land: Landscape) -> Strategy:
    s = space_of(land)
    return Strategy(s, s.candidate(land.baseline), land.card_gb, land.headroom)


def run_search(
    land: Landscape,
    *,
    stop_after: int | None = None,
    fail: object = None,
    fail_as: str = "crash",
) -> SearchResult:
    """The in-process loop: next_candidate -> simulate -> observe, checking dominance at every step."""
    strat = make_strategy(land)
    history: list[Observation] = []
    while stop_after is None or len(history) < stop_after:
        c = strat.next_candidate(history)
        if c is None:
            break
        ruled = {v.candidate for v in strat.ruled_out(history)}
        assert c not in ruled, f"{land.name}: proposed {c}, which dominance already ruled out"
        retryable = (None, "interrupted", "crash", "timeout", "stalled", "host_oom")
        finished = {o.candidate for o in history if o.outcome not in retryable}
        assert c not in finished, f"{land.name}: proposed {c} again"
        if callable(fail) and fail(c):
            history.append(Observation(c, fail_as))
        else:
            r = land.simulate(c.params, run=len(history))
            history.append(Observation(c, r.outcome, r.samples_per_s, r.peak_vram_gb, None, r.spread))
        assert len(history) <= len(land.grid()) * 3, f"{land.name}: the search does not end"
    best = strat.best(history)
    truth = land.true_best()
    if truth is None:
        found = best is None
    else:
        found = (
            best is not None
            and land.fits(best.candidate.params)
            and (land.samples_per_s(best.candidate.params) >= 0.97 * truth[1])
        )
    return SearchResult(history, best, found, len(history), len(land.grid()))


def test_search_finds_the_true_best_on_simulated_landscapes_at_a_fraction_of_the_grid() -> None:
    lands = suite(60)
    results = [run_search(land) for land in lands]
    found = sum(r.found for r in results)
    ratios = [r.trials / r.grid for r in results]
    mean_ratio = sum(ratios) / len(ratios)
    worst = max(range(len(results)), key=lambda i: ratios[i])
    tiers = Counter(land.tier for land in lands)
    print(
        f"\nstrategy on {len(lands)} landscapes {dict(tiers)}: true best found (within 3 %) in {found}/{len(lands)}; "
        f"trials {sum(r.trials for r in results)} vs grid {sum(r.grid for r in results)}; "
        f"mean {mean_ratio:.1%} of the grid, worst {ratios[worst]:.1%} ({lands[worst].name}, "
        f"{results[worst].trials}/{results[worst].grid})"
    )
    missed = [land.name for land, r in zip(lands, results, strict=True) if not r.found]
    assert found >= 0.95 * len(lands), f"missed the true best on {missed}"
    assert mean_ratio <= 0.30


def test_sim_trainer_prints_ltx2_statistics_or_a_cuda_oom(tmp_path: Path) -> None:
    land = generate(26)
    spec = tmp_path / "landscape.json"
    spec.write_text(land.to_json())
    fits = {"quantization": "none", "optimizer": "adamw", "batch_size": 2, "gradient_checkpointing": True}
    config = tmp_path / "trial.yaml"
    config.write_text(
        "acceleration:\n  quantization: null\noptimization:\n  optimizer_type: adamw\n  batch_size: 2\n"
        "  enable_gradient_checkpointing: true\n  steps: 40\n"
    )
    metrics = tmp_path / "metrics.json"
    env = {"AUTOTUNE_METRICS_FILE": str(metrics), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [
            sys.executable,
            str(FAKES / "sim_trainer.py"),
            "--landscape",
            str(spec),
            "--config",
            str(config),
            "--disable-progress-bars",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "Step 40/40 - Loss:" in run.stdout and "📊 Training Statistics:" in run.stdout
    assert f" - Peak GPU memory: {land.peak_gb(fits):.2f} GB" in run.stdout
    data = json.loads(metrics.read_text())
    assert data["simulated_seconds"] > land.load_s * 0.9  # the model load is paid, in simulated time
    assert abs(data["samples_per_s"] - land.samples_per_s(fits)) / land.samples_per_s(fits) < 0.1

    too_big = [
        "--param",
        "quantization=none",
        "--param",
        "optimizer=adamw",
        "--param",
        "batch_size=8",
        "--param",
        "gradient_checkpointing=false",
    ]
    assert land.ooms(
        {"quantization": "none", "optimizer": "adamw", "batch_size": 8, "gradient_checkpointing": False}
    )
    run = subprocess.run(
        [sys.executable, str(FAKES / "sim_trainer.py"), "--landscape", str(spec), *too_big],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in run.stderr
    assert "Training Statistics" not in run.stdout


# -- integer batch sizes, noise, learned priors ----------------------------------------
BATCH_ONLY = "knobs:\n  - name: batch_size\n    type: int\n"


def batch_search(peak_of: object, step_s_of: object, max_batch: int = 16) -> list[Observation]:
    """A whole search of a batch-only space on a card of 48 GB (fit line 43.2 GB), re-measures included."""
    s = Space.from_text(BATCH_ONLY, max_batch_size=max_batch, allow_extra_savers=False)
    strat = Strategy(s, s.candidate({"batch_size": 1}), 48.0, 0.1)
    history: list[Observation] = []
    while (c := strat.next_candidate(history) or strat.remeasure(history)) is not None:
        assert len(history) < max_batch, "the search walks the integers"
        b = s.batch(c)
        peak = peak_of(b)  # type: ignore[operator]
        if peak > 48.0:
            history.append(oom(c))
        else:
            history.append(ok(c, b / step_s_of(b), peak))  # type: ignore[operator]
    best = strat.best(history)
    assert best is not None
    history.append(best)  # the pick, last
    return history


@pytest.mark.parametrize(
    ("peak_of", "limit", "most"),
    [
        (lambda b: 20.0 + 3.0 * b, 7, 5),  # affine: the line predicts 7 at once; 8 (44 GB) is over the line
        (lambda b: 4.0 * -(-(20.0 + 3.0 * b) // 4.0), 6, 6),  # allocator blocks of 4 GB: 7 -> 44 GB, over
        # fragmentation grows with the batch: the line overshoots (12, 11 OOM, cheaply), then bisects
        (lambda b: 18.0 + 1.0 * b + 0.35 * b * b, 7, 10),
    ],
)
def test_the_largest_fitting_batch_is_found_exactly_and_its_plus_one_verified(
    peak_of: object, limit: int, most: int
) -> None:
    *runs, best = batch_search(peak_of, lambda b: 1.0 + 0.5 * b)
    batches = [b.candidate.params["batch_size"] for b in runs]
    assert best.candidate.params["batch_size"] == limit  # not the power of two below it
    assert limit in batches and limit + 1 in batches  # the limit, and the one above it, ran for real
    assert len(batches) <= most  # far from all 16 integers


def test_a_batch_between_two_measured_ones_that_could_win_is_measured() -> None:
    # Odd batch sizes pay 12 % more per step: 7 is slow, 6 is the fastest that fits.
    *runs, best = batch_search(lambda b: 20.0 + 3.0 * b, lambda b: (1.0 + 0.5 * b) * (1.12 if b % 2 else 1.0))
    assert best.candidate.params["batch_size"] == 6
    assert 7 in [r.candidate.params["batch_size"] for r in runs]


def test_a_secant_never_starts_at_a_batch_that_paid_extra() -> None:
    from autotune.core.bounds import own_bound

    t = {1: 28.6, 2: 42.0, 3: 62.1, 4: 73.1, 5: 95.6, 7: 130.6}  # 5 and 7: odd sizes paying 8 %
    true_6 = 6 / 0.0572
    pts = [(b, ti, 0.015) for b, ti in sorted(t.items())]
    assert own_bound(pts, 6) >= 6 / true_6  # the bound still lets batch 6 win
    assert own_bound(pts, 9) < 9 / (130.6 * 0.985)  # and the hull's secants still bound beyond


def test_a_near_tie_is_remeasured_within_a_bound_then_the_baseline_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.core.strategy import REMEASURE_RUNS

    monkeypatch.setattr("autotune.core.strategy.REMEASURE_AT_LEAST", 99)  # which ones, not how many
    s = strategy()
    a, b = cand(b=2), cand(b=2, o="adamw")
    history = [ok(cand(), 1.0, 30, 0.02), ok(a, 1.50, 40, 0.03), ok(b, 1.48, 41, 0.03)]
    asked = []
    while (c := s.remeasure(history)) is not None:
        asked.append(c)
        history.append(ok(c, {a: 1.50, b: 1.48}.get(c, 1.0), 40, 0.03))
        assert len(asked) <= 2 * REMEASURE_RUNS
    assert Counter(asked) == {a: REMEASURE_RUNS - 1, b: REMEASURE_RUNS - 1, cand(): 1}
    assert asked[-1] == cand()  # the baseline last, once
    best = s.best(history)
    assert best is not None
    second = s.best([o for o in history if o.candidate != best.candidate])  # the best set aside
    assert second is not None and {best.candidate, second.candidate} == {a, b}


# Each row: (label, {candidate: (samples/s, spread)} besides the baseline at 1.0, the candidates
# re-measured). The leader is A at 1.50; a contender is re-measured when it sits within twice the
# noise of the leader, the most likely to beat it first (fewest combined noises below it), at
# most REMEASURE_CONTENDERS of them; each, and the leader, to REMEASURE_RUNS runs.
_A, _B, _C, _D, _E = cand(b=2), cand(b=2, o="adamw"), cand(b=3), cand(b=3, o="adamw"), cand(b=4)
REMEASURE_CASES = [
    ("the runner-up alone is near", {_A: (1.50, 0.03), _B: (1.48, 0.03), _C: (1.20, 0.03)}, {_A, _B}),
    ("nothing near", {_A: (1.50, 0.02), _B: (1.40, 0.02)}, set()),
    (
        "two noisy ones below the runner-up are likelier to beat the leader than it",
        {_A: (1.50, 0.02), _B: (1.465, 0.02), _C: (1.44, 0.10), _D: (1.43, 0.10), _E: (1.30, 0.10)},
        {_A, _C, _D},
    ),
    (
        "a third near contender joins the runner-up",
        {_A: (1.50, 0.06), _B: (1.49, 0.06), _C: (1.47, 0.06), _D: (1.40, 0.01)},
        {_A, _B, _C},
    ),
]


@pytest.mark.parametrize(
    ("label", "points", "expected"), REMEASURE_CASES, ids=[c[0] for c in REMEASURE_CASES]
)
def test_which_near_contenders_are_remeasured(
    label: str,
    points: dict[Candidate, tuple[float, float]],
    expected: set[Candidate],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.core.strategy import REMEASURE_CONTENDERS, REMEASURE_RUNS

    monkeypatch.setattr("autotune.core.strategy.REMEASURE_AT_LEAST", 99)  # which ones, not how many
    s = strategy()
    history = [ok(cand(), 1.0, 30, 0.02)] + [ok(c, sps, 40, sp) for c, (sps, sp) in points.items()]
    asked: list[Candidate] = []
    while (c := s.remeasure(history)) is not None:
        asked.append(c)
        sps, sp = points.get(c, (1.0, 0.02))
        history.append(ok(c, sps, 40, sp))
        assert len(asked) <= (REMEASURE_CONTENDERS + 1) * REMEASURE_RUNS + 1, label
    contenders = set(asked) - {cand()}
    assert contenders == expected, label
    assert len(contenders) <= REMEASURE_CONTENDERS + 1
    assert all(asked.count(x) == REMEASURE_RUNS - 1 for x in contenders), label
    assert asked.count(cand()) == (1 if expected else 0), label  # the baseline once, after a re-measure


def test_no_remeasure_outside_the_noise_and_noise_narrows_with_runs() -> None:
    from autotune.core.knowledge import noise_of

    s = strategy()
    history = [
        ok(cand(), 1.0, 30, 0.02),
        ok(cand(b=2), 1.50, 40, 0.02),
        ok(cand(b=2, o="adamw"), 1.30, 41, 0.02),
    ]
    assert s.remeasure(history) is None
    assert noise_of([0.04, 0.04], [1.0, 1.0]) == pytest.approx(noise_of([0.04], [1.0]) / 2**0.5)
    assert noise_of([0.01, 0.01], [1.0, 1.2]) > noise_of([0.01], [1.0])  # runs that disagree: noisier


def test_a_family_slower_at_a_cheap_batch_is_not_climbed() -> None:
    """The learned ratio: bf16 measured at batch 1 at half the speed of int8 ends the bf16 family."""
    s = strategy()
    history = [
        ok(cand(b=1), 1.0, 20),
        ok(cand(b=2), 1.6, 24),
        ok(cand(b=4), 2.4, 32),
        ok(cand(b=8), 3.0, 48),
        ok(cand(b=9), 3.05, 52),
        ok(cand(b=10), 3.1, 73),  # over the 72 GB line: 9 is the limit
    ]
    bf16 = [
        c
        for c in s.could_win(history)
        if c.params["quantization"] == "none" and c.params["gradient_checkpointing"]
    ]
    assert bf16  # unmeasured: it could still win
    history.append(ok(cand(b=1, q="none"), 0.5, 40))
    bf16 = [
        c
        for c in s.could_win(history)
        if c.params["quantization"] == "none" and c.params["gradient_checkpointing"]
    ]
    assert bf16 == []


# -- the baseline's fidelity, small grids, large batch ranges --------------------------------------
def full_search(strat: Strategy, simulate: object, limit: int = 400) -> list[Observation]:
    """The sweep's loop in-process: the search, then re-measures when it is done, to the end."""
    history: list[Observation] = []
    while (c := strat.next_candidate(history) or strat.remeasure(history)) is not None:
        again = sum(1 for o in history if o.candidate == c and o.outcome == "ok")
        r = simulate(dict(c.params), run=again)  # type: ignore[operator]
        history.append(Observation(c, r.outcome, r.samples_per_s, r.peak_vram_gb, None, r.spread))
        assert len(history) < limit, "the search does not end"
    return history


def found_best(land: Landscape, strat: Strategy, history: list[Observation]) -> bool:
    best, truth = strat.best(history), land.true_best()
    assert truth is not None
    return (
        best is not None
        and land.fits(best.candidate.params)
        and land.samples_per_s(best.candidate.params) >= 0.97 * truth[1]
    )


def test_an_unquantized_adamw_baseline_never_meets_quantization_or_8bit_adamw_unasked() -> None:
    standard = [land for land in suite(60) if land.baseline["quantization"] == "none"]
    assert len(standard) > 10
    for land in standard:
        strat = make_strategy(land)
        history = full_search(strat, land.simulate)
        tried = {(o.candidate.params["quantization"], o.candidate.params["optimizer"]) for o in history}
        if land.allow_extra_savers:
            continue
        assert tried == {("none", "adamw")}, land.name
        assert len(history) <= len(strat.space) + 2, land.name  # re-measures bounded by the grid
    asked = replace(generate(26), allow_extra_savers=True)  # --allow-extra-savers: they are tried
    tried = {o.candidate.params["quantization"] for o in full_search(make_strategy(asked), asked.simulate)}
    assert tried - {"none"}


# 80GB+ landscapes with batches 1..8: 16 candidates once fidelity is kept (checkpointing x batch),
# per-step noise under 5 % (151, 10 %, is in the loud test below).
QUIET_16 = [12, 35, 40, 44, 74, 99, 152, 155, 196, 1049]


@pytest.mark.parametrize("seed", QUIET_16)
def test_a_16_candidate_grid_takes_at_most_8_trials_and_finds_the_best(seed: int) -> None:
    land = generate(seed)
    strat = make_strategy(land)
    assert len(strat.space) == 16 and land.tier == "80GB+"
    history = full_search(strat, land.simulate)
    assert len(history) <= 8, [str(o.candidate) for o in history]
    assert found_best(land, strat, history)


@pytest.mark.parametrize(
    ("max_batch", "measured", "top", "expected"),
    [
        (8, (1, 2, 8), 5, 4),  # the middle of 2..8 in log space; the middle place would be 5
        (8, (1, 2, 8), 3, 4),  # the gap is chosen by its top bound, the probe is its middle
        (8, (1, 4, 8), 6, 6),  # 5..7: sqrt(32) = 5.7
        (8, (8,), 3, 2),  # nothing measured below: from half the smallest batch, sqrt(0.5 * 8)
        (16, (1, 16), 9, 4),  # a power of two between two powers of two; the middle place: 8
        (32, (16, 32), 20, 23),  # sqrt(512) = 22.6
        (8, (1, 2, 5), 4, 4),  # a gap of two is not bisected: its top goes
    ],
)
def test_a_gap_is_bisected_in_log_space(
    max_batch: int, measured: tuple[int, ...], top: int, expected: int
) -> None:
    """Once a family's limit is known, the probe in a gap is the batch nearest the geometric mean of
    the gap's ends: batch sizes act by ratios (throughput saturates in log batch), and between two
    powers of two that is a power of two, the batch least likely to sit in an unaligned batch's dip."""
    land = replace(generate(1049), max_batch_size=max_batch)
    s = space_of(land)
    grid = Grid(s, s.candidate(land.baseline))

    def on(b: int) -> Candidate:
        return s.candidate({**land.baseline, "batch_size": b})

    members = [on(b) for b in range(1, max_batch + 1) if b not in measured]
    bounds = {c: (2.0 if c == on(top) else 1.0) for c in members}
    assert s.batch(memory.bisect_gap(grid, members, measured, bounds)) == expected


@pytest.mark.parametrize(("off_at_most", "expected"), [(1.6, (False, 1)), (1.0, (True, 4))])
def test_a_family_down_to_its_gaps_yields_to_one_whose_bound_is_above_them(
    off_at_most: float, expected: tuple[bool, int]
) -> None:
    """Checkpointing on measured at 1, 2 and 8 (its memory limit known): its gaps 3..7 could gain a
    few %, checkpointing off up to 60 % (the prior): more than the gaps could give even at their
    bounds, so it runs first. With a prior that says off is never faster, its bound is not above
    the gaps': they are bisected first (4, the middle of 2..8 in log space)."""
    land = generate(312)
    s = space_of(land)
    priors = {"gradient_checkpointing": {(True, False): off_at_most, (False, True): 1.05}}
    strat = Strategy(s, s.candidate(land.baseline), land.card_gb, land.headroom, speed_priors=priors)

    def on(b: int) -> Candidate:
        return s.candidate({**land.baseline, "batch_size": b})

    history = [ok(on(1), 0.490, 47.8, 0.02), ok(on(2), 0.515, 52.0, 0.02), ok(on(8), 0.527, 77.3, 0.02)]
    nxt = strat.next_candidate(history)
    assert nxt is not None
    assert (nxt.params["gradient_checkpointing"], nxt.params["batch_size"]) == expected


def test_every_16_candidate_grid_stays_within_the_grid_and_finds_the_best() -> None:
    """Noisy hosts (5-10 % per step) earn more re-measures, but never more than candidates + 2."""
    lands = [
        land
        for land in (generate(s) for s in range(1, 201))
        if land.tier == "80GB+" and not land.allow_extra_savers and land.max_batch_size == 8
    ]
    trials = []
    for land in lands:
        strat = make_strategy(land)
        history = full_search(strat, land.simulate)
        assert len(history) <= 18 and found_best(land, strat, history), land.name
        trials.append(len(history))
    print(f"\n16-candidate grids: {len(lands)}, trials {sorted(trials)}")
    assert len(lands) >= 10 and sorted(trials)[len(trials) // 2] <= 8


def test_every_quiet_16_candidate_grid_finds_the_best_within_8_trials() -> None:
    """Seeds 1-400 and 1001-1060: on a quiet host a re-measure never takes a sweep past half the
    grid, so flat landscapes (152: every batch within 3 %) and near-ties (196) stay within 8; and
    a family down to its gaps yields to one whose bound is above them, so checkpointing off, which
    wins, is measured before checkpointing on's gaps 5..7 are (312: 6 trials, not 9); and a gap is
    bisected in log space (1049: odd batches run 7 % slower; 2..8 opens at 4, an aligned batch on
    the hull, then 6 and 7, and 3 and 5 are bounded out; opened at 5, a dip that bounds only by
    monotonicity, 4, 6 and 7 all ran after it: 9 trials)."""
    lands = [
        land
        for land in (generate(s) for s in (*range(1, 401), *range(1001, 1061)))
        if land.tier == "80GB+"
        and not land.allow_extra_savers
        and land.max_batch_size == 8
        and land.step_noise < 0.05
    ]
    assert len(lands) >= 15
    over = {}
    for land in lands:
        strat = make_strategy(land)
        assert len(strat.space) == 16
        history = full_search(strat, land.simulate)
        assert found_best(land, strat, history), land.name
        if len(history) > 8:
            over[land.seed] = len(history)
    assert not over, over


def script_search(seed: int) -> tuple[ScriptLandscape, Strategy, list[Observation]]:
    land = generate_script(seed)
    s = Space.from_text(SCRIPT_KNOBS_YAML, max_batch_size=land.max_batch_size, allow_extra_savers=False)
    strat = Strategy(s, s.candidate(land.baseline), land.card_gb, land.headroom)
    return land, strat, full_search(strat, land.simulate)


@pytest.mark.parametrize("seed", range(1, 13))
def test_batch_ranges_to_4096_are_bracketed_and_every_precision_opened_early(seed: int) -> None:
    """A --cmd script with a declared precision knob: 32-true wins at batch 1024. Each family takes
    O(log range) trials (not a walk 63, 62, ... down from a fit), and the second precision runs
    second, not after the first family's search."""
    land, strat, history = script_search(seed)
    assert strat.space.batch_values()[-1] == 4096 and len(strat.space.batch_values()) == 70
    per_family = Counter(o.candidate.params["precision"] for o in history)
    assert max(per_family.values()) <= math.log2(4096), per_family
    assert history[1].candidate.params["precision"] == "32-true"
    best = strat.best(history)
    truth = land.true_best(strat.space.batch_values())
    assert best is not None and best.candidate.params == truth[0] == {
        "precision": "32-true",
        "batch_size": 1024,
    }


@pytest.mark.process
def test_a_real_sweep_from_an_unquantized_adamw_baseline_keeps_fidelity_and_a_small_grid_cheap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep as ``autotune sweep --cmd`` runs it (in-process, real trial subprocesses of the
    simulated LTX-2 trainer): no trial quantizes or uses 8-bit AdamW, 16 candidates take <= 8
    trials, the best is found, and the report says what was held back."""
    import io

    import optuna

    from autotune import cli
    from autotune.sweep.api import run_sweep
    from scripts import bench_sweep as bench

    land = generate(35)  # H100 80GB, batches 1..8, the trainer's standard config as the baseline
    spec, config = bench.write_inputs(land, tmp_path)
    argv = bench.sweep_argv(land, spec, config, tmp_path, "fidelity")
    assert "--allow-extra-savers" not in argv
    run_sweep(
        cli._sweep_options(cli.build_parser().parse_args(argv)),
        nvml=False,
        stream=io.StringIO(),
        tty=False,
        claims=False,
    )
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.load_study(study_name="fidelity", storage=url)
    trials = [t for t in study.trials if t.state.is_finished()]
    assert {(t.params["quantization"], t.params["optimizer"]) for t in trials} == {("none", "adamw")}
    assert len(trials) <= 8
    truth = land.true_best()
    assert truth is not None
    best = study.trials[study.user_attrs["best_trial"]].params
    assert land.samples_per_s(best) >= 0.97 * truth[1]
    assert cli.main(["report", "--storage", url, "--study", "fidelity", "--format", "json"]) == 0
    savers = json.loads(capsys.readouterr().out)["extra_savers"]
    assert savers == {
        "allowed": False,
        "held_back": {"quantization": ["int8-quanto"], "optimizer": ["adamw8bit"]},
    }
