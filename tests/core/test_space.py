"""Knob files, candidates and the memory order (autotune.core.space)."""

from __future__ import annotations

import pytest

from autotune.core.space import Candidate, Space, batch_sizes
from autotune.errors import ConfigError, UsageError
from tests.fakes.landscape import KNOBS_YAML


def space(max_batch_size: int = 16, extra: bool = False) -> Space:
    return Space.from_text(KNOBS_YAML, max_batch_size=max_batch_size, allow_extra_savers=extra)


def cand(q: str = "int8-quanto", o: str = "adamw8bit", b: int = 1, gc: bool = True) -> Candidate:
    return space(32).candidate(
        {"quantization": q, "optimizer": o, "batch_size": b, "gradient_checkpointing": gc}
    )


@pytest.mark.parametrize(("max_batch", "expected"), [(1, (1,)), (2, (1, 2)), (6, (1, 2, 3, 4, 5, 6))])
def test_batch_sizes_are_every_integer_up_to_the_max(max_batch: int, expected: tuple[int, ...]) -> None:
    assert batch_sizes(max_batch) == expected
    assert batch_sizes(24) == tuple(range(1, 25))
    huge = batch_sizes(1048576)  # past 64 they double: a huge maximum is still a short list
    assert huge[:64] == tuple(range(1, 65)) and huge[64:67] == (128, 256, 512) and huge[-1] == 1048576
    assert len(huge) == 64 + 14


@pytest.mark.parametrize(
    ("max_batch", "ladder", "expected"),
    [(16, (1, 2, 4, 8), (1, 2, 4, 8)), (6, (8, 4, 2, 1, 4), (1, 2, 4)), (24, (1, 24, 16), (1, 16, 24))],
)
def test_a_batch_ladder_keeps_its_sizes_up_to_the_max(
    max_batch: int, ladder: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    assert batch_sizes(max_batch, ladder) == expected
    space = Space.from_text(
        KNOBS_YAML, max_batch_size=max_batch, allow_extra_savers=False, batch_ladder=ladder
    )
    assert space.batch_values() == expected


@pytest.mark.parametrize(("ladder", "match"), [((0, 2), "positive integers"), ((32,), "none is <=")])
def test_a_bad_batch_ladder_says_what_is_wrong(ladder: tuple[int, ...], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        batch_sizes(16, ladder)


def test_batch_sizes_reject_zero() -> None:
    with pytest.raises(UsageError, match="max-batch-size"):
        batch_sizes(0)


def test_extra_savers_only_when_allowed_and_placed_before_values() -> None:
    assert space(extra=False).knob("quantization").values == ("int8-quanto", "none")
    assert space(extra=True).knob("quantization").values == (
        "int4-quanto",
        "int2-quanto",
        "int8-quanto",
        "none",
    )


def test_extra_savers_are_below_every_value_but_unordered_among_themselves() -> None:
    """A knob file may list them in the order to try (int4 before int2): no verdict crosses between them."""
    s = Space.from_text(KNOBS_YAML, max_batch_size=8, allow_extra_savers=True)

    def c(q: str) -> Candidate:
        return s.candidate(
            {"quantization": q, "optimizer": "adamw8bit", "batch_size": 2, "gradient_checkpointing": True}
        )

    for extra in ("int4-quanto", "int2-quanto"):
        for regular in ("int8-quanto", "none"):
            assert s.needs_at_least(c(regular), c(extra)) and not s.needs_at_least(c(extra), c(regular))
        assert s.needs_at_least(c(extra), c(extra))
    assert not s.needs_at_least(c("int2-quanto"), c("int4-quanto"))
    assert not s.needs_at_least(c("int4-quanto"), c("int2-quanto"))


def test_yaml_null_is_the_string_none() -> None:
    s = Space.from_text(
        "knobs:\n  - name: quantization\n    values: [int8-quanto, null]\n",
        max_batch_size=1,
        allow_extra_savers=False,
    )
    assert s.knob("quantization").values == ("int8-quanto", "none")
    assert s.batch_knob is None
    assert s.candidate({"quantization": None}).params == {"quantization": "none"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("knobs: 3\n", "knobs:' list"),
        ("knobs:\n  - values: [a]\n", "needs a 'name'"),
        ("knobs:\n  - name: q\n    values: []\n", "non-empty list"),
        ("knobs:\n  - name: q\n    values: [a, a]\n", "values repeat"),
        ("knobs:\n  - name: q\n    values: [a]\n    colour: red\n", "unknown keys"),
        ("knobs:\n  - name: q\n    values: [a]\nfidelity: {z: a}\n", "unknown knob 'z'"),
        ("knobs:\n  - name: q\n    values: [a]\nfidelity: {q: b}\n", "not one of a"),
        ("knobs:\n  - name: b\n    type: int\n    values: [64]\n", "no value is <= --max-batch-size"),
        (
            "knobs:\n  - name: q\n    type: float\n    values: [1]\n",
            "type must be int, count, fraction, choice",
        ),
    ],
)
def test_bad_knob_files_say_what_and_where(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Space.from_text(text, source="knobs.yaml", max_batch_size=8, allow_extra_savers=False)
    assert "knobs.yaml" in str(info.value) or "fidelity" in str(info.value) or "value" in str(info.value)


def test_candidate_is_frozen_hashable_and_order_insensitive() -> None:
    a = cand(b=4)
    b = Candidate(
        (
            ("batch_size", 4),
            ("gradient_checkpointing", True),
            ("optimizer", "adamw8bit"),
            ("quantization", "int8-quanto"),
        )
    )
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert list(a.params) == ["quantization", "optimizer", "batch_size", "gradient_checkpointing"]
    assert space().candidate(b.params) == a
    with pytest.raises(AttributeError):
        a.items = ()  # type: ignore[misc]


def test_true_and_one_are_different_values() -> None:
    assert Candidate((("x", True),)) != Candidate((("x", 1),))


def test_none_param_reads_as_the_string_none() -> None:
    c = space().candidate(
        {"quantization": None, "optimizer": "adamw", "batch_size": 1, "gradient_checkpointing": True}
    )
    assert c.params["quantization"] == "none"
    assert str(c) == "quantization=none optimizer=adamw batch_size=1 gradient_checkpointing=true"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"quantization": "int3", "optimizer": "adamw", "batch_size": 1, "gradient_checkpointing": True},
            "int3",
        ),
        ({"quantization": "none", "optimizer": "adamw", "batch_size": 1}, "missing"),
        (
            {
                "quantization": "none",
                "optimizer": "adamw",
                "batch_size": 1,
                "gradient_checkpointing": True,
                "lr": 1,
            },
            "unknown",
        ),
        (
            {
                "quantization": "none",
                "optimizer": "adamw",
                "batch_size": "big",
                "gradient_checkpointing": True,
            },
            "not an integer",
        ),
    ],
)
def test_invalid_params_are_named(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        space().candidate(params)


# (a, b, a needs at least as much memory as b)
NEEDS = [
    (cand(), cand(), True),
    (cand(b=2), cand(b=1), True),
    (cand(b=1), cand(b=2), False),
    (cand(q="none"), cand(), True),
    (cand(o="adamw", gc=False, b=4), cand(b=2), True),
    (cand(q="none", b=1), cand(q="int8-quanto", b=2), False),  # hungrier in one knob, saving in another
    (cand(gc=False, b=1), cand(gc=True, b=8), False),
    (cand(q="none", o="adamw", b=32, gc=False), cand(), True),
    (cand(b=12), cand(b=8), True),  # batch sizes compare by number, not by list position
]


@pytest.mark.parametrize(("a", "b", "expected"), NEEDS)
def test_needs_at_least(a: Candidate, b: Candidate, expected: bool) -> None:
    assert space(32).needs_at_least(a, b) is expected


def test_family_drops_only_the_batch() -> None:
    s = space()
    fam = s.family(cand(b=8))
    assert fam == s.family(cand(b=1))
    assert "batch_size" not in fam.params
    assert s.with_batch(fam, 4) == cand(b=4)
    assert len(s.families()) == 8
    assert s.batch(cand(b=8)) == 8


@pytest.mark.parametrize(
    ("candidate", "score"),
    [(cand(), 0), (cand(q="none"), 1), (cand(o="adamw"), 1), (cand(q="none", o="adamw", gc=False), 2)],
)
def test_fidelity_score(candidate: Candidate, score: int) -> None:
    assert space().fidelity_score(candidate) == score


def test_the_batch_sizes_flag_parses_a_comma_list() -> None:
    import argparse

    from autotune.cli.sweep_worker import batch_list

    assert batch_list("8, 1,2,4,2") == (1, 2, 4, 8)
    for bad in ("", "0,2", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="--batch-sizes"):
            batch_list(bad)


# -- fidelity: never traded away unasked ---------------------------------------------------------
# (baseline quantization, optimizer, checkpointing; values held back)
HELD_BACK = [
    (("none", "adamw", True), {"quantization": ("int8-quanto",), "optimizer": ("adamw8bit",)}),
    (("none", "adamw8bit", True), {"quantization": ("int8-quanto",)}),
    (("int8-quanto", "adamw", False), {"optimizer": ("adamw8bit",)}),
    (("int8-quanto", "adamw8bit", True), {}),  # the low-VRAM baseline: every value relaxes a saver it uses
]


@pytest.mark.parametrize(("base", "held"), HELD_BACK)
def test_fidelity_knobs_keep_the_baselines_value_or_a_hungrier_one(
    base: tuple[str, str, bool], held: dict[str, tuple[str, ...]]
) -> None:
    s = space(8)
    baseline = cand(q=base[0], o=base[1], gc=base[2])
    assert s.held_back(baseline) == held
    kept = s.keep_fidelity(baseline)
    for knob in kept.knobs:
        assert not set(knob.values) & set(held.get(knob.name, ()))
    # checkpointing is no fidelity knob: both values stay, whatever the baseline has
    assert kept.knob("gradient_checkpointing").values == (True, False)
    assert kept.candidate(baseline.params) == baseline and kept.fidelity == s.fidelity
    assert len(kept) == len(s) // (2 ** len(held))
    # extra savers (only with --allow-extra-savers) sit below every value: held back too
    assert set(space(8, extra=True).held_back(baseline).get("quantization", ())) >= set(
        held.get("quantization", ())
    )


def test_fidelity_knobs_are_the_knob_files_fidelity_mapping() -> None:
    text = """knobs:
  - name: precision
    values: [fp8, fp8_scaled, bf16]
  - name: split_attn
    values: [true, false]
  - name: batch_size
    type: int
fidelity: {precision: fp8_scaled}
"""
    s = Space.from_text(text, max_batch_size=4, allow_extra_savers=False)
    base = s.candidate({"precision": "bf16", "split_attn": False, "batch_size": 1})
    assert s.held_back(base) == {"precision": ("fp8", "fp8_scaled")}  # split_attn: not a fidelity knob
    kept = s.keep_fidelity(base)
    assert kept.knob("precision").values == ("bf16",) and kept.knob("split_attn").values == (True, False)
    assert kept.fidelity == {}  # the preferred value is held back: no near-tie can prefer it
