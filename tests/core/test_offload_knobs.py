"""Count and fraction knobs (blocks swapped, a share offloaded), their refinement near the best, and
host RAM as part of fit: tables for the pure parts, whole searches on a modelled trainer
whose speed is not monotone in offload."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from autotune.core import outcome as oc
from autotune.core.metrics import TrialMetrics
from autotune.core.record import TrialRecord
from autotune.core.space import Candidate, Space
from autotune.core.strategy import Observation, Strategy
from autotune.core.verdict import measured_attrs
from autotune.errors import ConfigError

SWAP = {"name": "blocks_to_swap", "type": "count", "max": 20, "grid": [20, 15, 10, 5, 0]}
BATCH = {"name": "batch_size", "type": "int"}
CKPT = {"name": "gradient_checkpointing", "values": [True, False]}
PRECISION = {"name": "precision", "values": ["fp8", "bf16"]}


def make_space(*knobs: dict[str, Any], max_batch: int = 4, limits: dict[str, int] | None = None) -> Space:
    return Space.from_mapping(
        {"knobs": list(knobs)}, max_batch_size=max_batch, allow_extra_savers=False, limits=limits
    )


# -- parsing, table-driven ----------------------------------------------------------------------
PARSED = [
    # (knob entry, limits, values head, number of values, coarse grid, offload)
    ({"name": "s", "type": "count", "max": 39}, None, (39, 38, 37), 40, (39, 32, 24, 16, 8, 0), True),
    ({"name": "s", "type": "count", "max": 39}, {"s": 28}, (28, 27, 26), 29, (28, 24, 18, 12, 6, 0), True),
    ({"name": "s", "type": "count", "max": 39, "grid": [39, 36, 32, 0]}, {"s": 30}, (30,), 31, (30, 0), True),
    ({"name": "s", "type": "count", "max": 4, "host": "none"}, None, (4, 3), 5, (4, 3, 2, 1, 0), False),
    ({"name": "f", "type": "fraction"}, None, (1.0, 0.95), 21, (1.0, 0.75, 0.5, 0.25, 0.0), True),
    (
        {"name": "f", "type": "fraction", "grid": [0, 1, 0.5], "step": 0.25},
        None,
        (1.0, 0.75),
        5,
        (1.0, 0.5, 0.0),
        True,
    ),
]


@pytest.mark.parametrize(("entry", "limits", "head", "count", "coarse", "offload"), PARSED)
def test_offload_knobs_list_every_value_saving_first_and_a_coarse_grid(
    entry: dict[str, Any],
    limits: dict[str, int] | None,
    head: tuple[float, ...],
    count: int,
    coarse: tuple[float, ...],
    offload: bool,
) -> None:
    knob = make_space(entry, limits=limits).knob(entry["name"])
    assert knob.kind == entry["type"]
    assert knob.values[: len(head)] == head
    assert len(knob.values) == count
    assert knob.values[-1] == 0
    if head == (30,):  # a grid value above a smaller model's maximum becomes that maximum
        assert knob.coarse == (30, 0)
    else:
        assert knob.coarse == coarse
    assert knob.offload is offload
    assert knob.refinable is (len(coarse) < count)  # a grid of every value has nothing to refine


BAD = [
    ({"name": "s", "type": "count"}, "needs 'max'"),
    ({"name": "s", "type": "count", "max": -1}, "needs 'max'"),
    ({"name": "s", "type": "count", "max": 9, "grid": [3, "a"]}, "whole numbers"),
    ({"name": "s", "type": "count", "max": 9, "step": 2}, "unknown keys"),
    ({"name": "f", "type": "fraction", "step": 0.3}, "must divide 1"),
    ({"name": "f", "type": "fraction", "grid": [0.5, 1.5]}, "fractions in"),
    ({"name": "f", "type": "fraction", "grid": [0.33]}, "not multiples of step"),
    ({"name": "f", "type": "fraction", "host": "yes"}, "host must be"),
    ({"name": "f", "type": "fraction", "grid": []}, "non-empty list"),
]


@pytest.mark.parametrize(("entry", "message"), BAD)
def test_bad_offload_knobs_say_what_is_wrong(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Space.from_mapping({"knobs": [entry]}, source="k.yaml", max_batch_size=4, allow_extra_savers=False)
    assert f"k.yaml: knobs[0] ({entry['name']})" in str(info.value)


def test_a_choice_that_offloads_is_reversed_in_the_host_order_only() -> None:
    space = make_space({"name": "ac", "values": ["unsloth", True, False], "host": "offload"}, BATCH)
    unsloth = space.candidate({"ac": "unsloth", "batch_size": 2})
    plain = unsloth.replace(ac=True)
    assert space.needs_at_least(plain, unsloth)  # device: unsloth saves
    assert all(
        a >= b for a, b in zip(space.host_positions(unsloth), space.host_positions(plain), strict=True)
    )
    assert space.offload_room(plain) == (True, True)
    with pytest.raises(ConfigError, match="host must be"):
        make_space({"name": "ac", "values": [True, False], "host": "more"})
    with pytest.raises(ConfigError, match="unknown keys"):
        make_space({"name": "batch_size", "type": "int", "host": "offload"})


def test_a_fraction_is_a_float_whatever_the_study_gave_back() -> None:
    space = make_space({"name": "f", "type": "fraction"}, BATCH)
    one = space.candidate({"f": 1, "batch_size": 2})
    assert one.params["f"] == 1.0 and isinstance(one.params["f"], float)
    assert one == space.candidate({"f": 1.0, "batch_size": 2.0}) and one in space
    with pytest.raises(ConfigError, match="not one of"):
        space.candidate({"f": 0.33, "batch_size": 2})


def test_more_swap_needs_less_device_memory_and_more_host_ram() -> None:
    space = make_space(SWAP, BATCH, PRECISION)
    lean = space.candidate({"blocks_to_swap": 15, "batch_size": 2, "precision": "fp8"})
    less_swap = lean.replace(blocks_to_swap=5)
    assert space.needs_at_least(less_swap, lean) and not space.needs_at_least(lean, less_swap)
    host = space.host_positions
    assert all(a >= b for a, b in zip(host(lean), host(less_swap), strict=True))
    bf16 = lean.replace(precision="bf16")  # a fuller precision holds no less on the host either
    assert all(a >= b for a, b in zip(host(bf16), host(lean), strict=True))


# -- host RAM: dominance and fit ----------------------------------------------------------------
def test_a_host_oom_rules_out_more_offload_and_nothing_with_less() -> None:
    space = make_space(SWAP, BATCH, CKPT)
    base = space.candidate({"blocks_to_swap": 10, "batch_size": 1, "gradient_checkpointing": True})
    strategy = Strategy(space, base, 24.0, 0.1)
    failed = base.replace(blocks_to_swap=15)
    ruled = {v.candidate: v for v in strategy.ruled_out([Observation(failed, "host_oom")])}
    assert base.replace(blocks_to_swap=16) in ruled
    assert base.replace(blocks_to_swap=20, batch_size=3, gradient_checkpointing=False) in ruled
    assert ruled[base.replace(blocks_to_swap=18)].kind == "host_oom"
    assert "needs at least as much host RAM as" in ruled[base.replace(blocks_to_swap=18)].reason
    assert base.replace(blocks_to_swap=14) not in ruled  # less offload: less host RAM
    assert failed not in ruled  # it ran: its own outcome says why
    assert base not in ruled


def test_a_run_over_the_host_line_does_not_fit_and_rules_out_more_offload() -> None:
    space = make_space(SWAP, BATCH)
    base = space.candidate({"blocks_to_swap": 10, "batch_size": 1})
    strategy = Strategy(space, base, 24.0, 0.1)
    fast = base.replace(blocks_to_swap=15)
    history = [
        Observation(base, "ok", 1.0, 10.0, None, 0.01, True, 8.0),
        Observation(fast, "ok", 2.0, 8.0, None, 0.01, False, 40.0),
    ]
    best = strategy.best(history)
    assert best is not None and best.candidate == base  # the faster one is over the host line
    ruled = {v.candidate: v for v in strategy.ruled_out(history)}
    assert ruled[base.replace(blocks_to_swap=20)].kind == "over_host"
    assert "of host RAM, over the host line" in ruled[base.replace(blocks_to_swap=20)].reason


def test_a_stored_run_over_the_host_line_keeps_its_own_device_fit() -> None:
    record = TrialRecord(
        3, state="complete", attrs={"outcome": "ok", "fits": False, "host_fits": False, "peak_vram_gb": 5.0}
    )
    space = make_space(SWAP, BATCH)
    obs = Observation.from_record(space.candidate({"blocks_to_swap": 5, "batch_size": 1}), record)
    assert obs.fits is None and obs.host_fits is False  # device fit judged again from the peak


@pytest.mark.parametrize(
    ("host_peak", "host_ram", "fits", "host_fits"),
    [(10.0, 64.0, True, True), (60.0, 64.0, False, False), (60.0, None, True, None)],
)
def test_measured_attrs_judge_host_ram_beside_device_memory(
    host_peak: float, host_ram: float | None, fits: bool, host_fits: bool | None
) -> None:
    metrics = TrialMetrics(step_time_s=1.0, step_time_spread_s=0.01, measured_peak_vram_gb=10.0)
    attrs = measured_attrs(
        oc.Outcome.OK, "finished", metrics, 2, 24.0, 0.1, peak_host_rss_gb=host_peak, host_ram_gb=host_ram
    )
    assert attrs["fits"] is fits
    assert attrs.get("host_fits") is host_fits


def test_the_runner_ending_a_trial_past_the_host_line_is_a_host_oom() -> None:
    why = oc.explain(
        -9, 9, timed_out=False, stalled=False, interrupted=False, output="", metrics=None, host_over_gb=32.0
    )
    assert why.outcome == oc.Outcome.HOST_OOM
    assert "32" in why.reason and "--host-ram-gb" in why.reason


# -- whole searches on a modelled block-swapping trainer -----------------------------------------
Model = Callable[[dict[str, Any]], tuple[float, float, float]]


def swap_model(sweet: int) -> Model:
    """(device GB, host GB, samples/s): each swapped block frees 0.8 GB on the card and takes 1.2 GB
    of host RAM; speed has a sweet spot at ``sweet`` swapped blocks (prefetch overlaps compute best
    there, as SeedVR2#153 found 36 blocks faster than 32), not at the least swap that fits."""

    def model(p: dict[str, Any]) -> tuple[float, float, float]:
        s, b, gc = p["blocks_to_swap"], p["batch_size"], p["gradient_checkpointing"]
        device = 20 - 0.8 * s + (1.0 if gc else 2.5) * b
        host = 4 + 1.2 * s
        step = (1.0 + 0.05 * b) * b * (1.3 if gc else 1.0) + 0.02 * abs(s - sweet) ** 1.5
        return device, host, b / step

    return model


def search(
    space: Space, base: Candidate, model: Model, card: float, host: float
) -> tuple[Strategy, list[Observation]]:
    strategy = Strategy(space, base, card, 0.0)
    history: list[Observation] = []
    while (c := strategy.next_candidate(history)) is not None:
        device, host_gb, sps = model(c.params)
        if device > card:
            history.append(Observation(c, "oom"))
        elif host_gb > host:
            history.append(Observation(c, "host_oom"))
        else:
            history.append(Observation(c, "ok", sps, device, None, 0.01, True, host_gb))
        assert len(history) <= len(space)
    return strategy, history


def truth(space: Space, model: Model, card: float, host: float) -> Candidate:
    return max(
        (c for c in space if model(c.params)[0] <= card and model(c.params)[1] <= host),
        key=lambda c: model(c.params)[2],
    )


@pytest.mark.parametrize(
    ("sweet", "card", "host"), [(13, 24.0, 64.0), (17, 24.0, 64.0), (13, 16.0, 18.0), (3, 30.0, 64.0)]
)
def test_the_search_finds_a_sweet_spot_off_the_coarse_grid(sweet: int, card: float, host: float) -> None:
    space = make_space(SWAP, BATCH, CKPT, max_batch=6)
    base = space.candidate({"blocks_to_swap": 10, "batch_size": 1, "gradient_checkpointing": True})
    model = swap_model(sweet)
    strategy, history = search(space, base, model, card, host)
    best = strategy.best(history)
    assert best is not None and best.candidate == truth(space, model, card, host)
    # A search, not the grid: 42 families of 6 batches, most of which never climb past batch 1.
    assert len(history) < 0.3 * len(space)
    assert max(Counter(o.candidate for o in history).values()) == 1  # nothing ran twice
    off_grid = {o.candidate.params["blocks_to_swap"] for o in history} - {20, 15, 10, 5, 0}
    assert off_grid, "refinement tried values between the coarse ones"


def test_a_host_oom_is_never_followed_by_a_config_needing_as_much_host_ram() -> None:
    space = make_space(SWAP, BATCH, CKPT, max_batch=6)
    base = space.candidate({"blocks_to_swap": 10, "batch_size": 1, "gradient_checkpointing": True})
    _, history = search(space, base, swap_model(13), 16.0, 18.0)
    failed_at = [i for i, o in enumerate(history) if o.outcome == "host_oom"]
    assert failed_at
    for i in failed_at:
        failed = space.host_positions(history[i].candidate)
        for later in history[i + 1 :]:
            here = space.host_positions(later.candidate)
            assert not all(a >= b for a, b in zip(here, failed, strict=True)), later.candidate


def test_a_fraction_knob_is_refined_to_its_step() -> None:
    space = make_space({"name": "offload", "type": "fraction", "step": 0.05}, BATCH, max_batch=4)
    base = space.candidate({"offload": 0.5, "batch_size": 1})

    def model(p: dict[str, Any]) -> tuple[float, float, float]:
        f, b = p["offload"], p["batch_size"]
        return 12 - 10 * f + 2 * b, 2 + 30 * f, b / ((1 + 0.1 * b) * b * (1 + 3 * (f - 0.65) ** 2))

    strategy, history = search(space, base, model, 12.0, 64.0)
    best = strategy.best(history)
    assert best is not None and best.candidate == truth(space, model, 12.0, 64.0)
    assert best.candidate.params["offload"] not in (1.0, 0.75, 0.5, 0.25, 0.0)
    assert len(history) < len(space) / 2
