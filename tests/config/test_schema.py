"""The LTX-2 key schema: the real shipped configs pass, typos are named with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.schema import check_keys, find_unknown_keys, load_schema
from autotune.config.yamlconf import RoundTripConfig
from autotune.errors import ConfigError


def test_every_real_config_passes(ltx2_fixtures: Path) -> None:
    files = sorted(ltx2_fixtures.glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        text = f.read_text()
        check_keys(text, str(f))  # no unknown keys
        assert RoundTripConfig.from_text(text, str(f)).get("optimization.batch_size") == 1


def test_schema_sections_cover_the_real_configs(ltx2_fixtures: Path) -> None:
    """Every top-level section of the real configs is in the schema, and nothing invented is required."""
    schema = load_schema()
    for f in ltx2_fixtures.glob("*.yaml"):
        top = RoundTripConfig.from_text(f.read_text(), str(f)).to_plain()
        assert set(top) <= set(schema)


# (text, dotted key, line, hint fragment)
CASES = [
    ("optimization:\n  batchsize: 1\n", "optimization.batchsize", 2, "did you mean 'batch_size'?"),
    ("optimisation:\n  batch_size: 1\n", "optimisation", 1, "did you mean 'optimization'?"),
    (
        "acceleration:\n  quantization: null\n  batch_size: 2\n",
        "acceleration.batch_size",
        3,
        "belongs in 'optimization'",
    ),
    ("seed: 1\noutput_dirs: x\n", "output_dirs", 2, "did you mean 'output_dir'?"),
    (
        # ``name: flexible``: without it the trainer takes text_to_video, which has no ``video``.
        "training_strategy:\n  name: flexible\n  video:\n    conditions:\n      - type: first_frame\n"
        "        probabilty: 0.5\n",
        "training_strategy.video.conditions[0].probabilty",
        6,
        "did you mean 'probability'?",
    ),
    (
        "validation:\n  samples:\n    - prompt: a\n    - prompt: b\n      conditons: []\n",
        "validation.samples[1].conditons",
        5,
        "did you mean 'conditions'?",
    ),
    ("hub:\n  zzz: 1\n", "hub.zzz", 2, "allowed here: push_to_hub, hub_model_id"),
]


@pytest.mark.parametrize(("text", "dotted", "line", "hint"), CASES)
def test_unknown_keys_are_named(text: str, dotted: str, line: int, hint: str) -> None:
    [u] = find_unknown_keys(text, load_schema(), "c.yaml")
    assert (u.dotted, u.line) == (dotted, line)
    assert hint in u.hint()


def test_free_form_sections_and_extra_sections() -> None:
    ok = "optimization:\n  scheduler_params: {power: 2, anything: 1}\nreference:\n  model_dim: 64\n"
    assert [u.dotted for u in find_unknown_keys(ok, load_schema())] == ["reference"]
    check_keys(ok, "r.yaml", extra_sections=("reference",))


def test_check_keys_lists_all_with_where_and_how(ltx2_fixtures: Path) -> None:
    text = (ltx2_fixtures / "t2v_lora.yaml").read_text()
    bad = text.replace("  batch_size: 1", "  batch_sise: 1").replace("\nseed: 42", "\nseeed: 42")
    with pytest.raises(ConfigError) as err:
        check_keys(bad, "/x/t2v_lora.yaml")
    msg = str(err.value)
    line = bad.splitlines().index("  batch_sise: 1") + 1
    assert msg.startswith("2 unknown keys in /x/t2v_lora.yaml")
    assert (
        f"/x/t2v_lora.yaml:{line}:3: unknown key 'optimization.batch_sise' (did you mean 'batch_size'?)"
        in msg
    )
    assert "'seeed' (did you mean 'seed'?)" in msg
    assert "Fix the spelling or remove the key" in msg


def test_syntax_error_is_a_config_error_with_position() -> None:
    with pytest.raises(ConfigError, match=r"c.yaml:\d+:\d+: YAML syntax error"):
        check_keys("model:\n  model_path: [unclosed\n", "c.yaml")
