"""Config edits keep every line that was not set; loads fail with file:line:col."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest

from autotune.config.yamlconf import RoundTripConfig, dotted_items
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError

BASE = """\
# top comment
model:
  model_path: "/old/model.safetensors"  # where the weights are
  training_mode: lora
optimization:
  batch_size: 1   # per GPU
  optimizer_type: "adamw8bit"
  enable_gradient_checkpointing: true
acceleration:
  quantization: int8-quanto
validation:
  samples:
    - prompt: >-
        a long prompt
        over two lines
    - prompt: second
  interval: 100
flowy: {a: 1}
output_dir: outputs/x
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.mark.parametrize(
    ("key", "value", "expected_diff"),
    [
        ("optimization.batch_size", 4, ["-  batch_size: 1   # per GPU", "+  batch_size: 4   # per GPU"]),
        (
            "acceleration.quantization",
            None,
            ["-  quantization: int8-quanto", "+  quantization: null"],
        ),
        (
            "optimization.optimizer_type",
            "adamw",
            ['-  optimizer_type: "adamw8bit"', '+  optimizer_type: "adamw"'],
        ),
        (
            "model.model_path",
            "/new/m.safetensors",
            [
                '-  model_path: "/old/model.safetensors"  # where the weights are',
                '+  model_path: "/new/m.safetensors"  # where the weights are',
            ],
        ),
        ("optimization.steps", 60, ["+  steps: 60"]),
        ("hub.push_to_hub", False, ["+", "+hub:", "+  push_to_hub: false"]),
        ("flowy.b", 2, ["-flowy: {a: 1}", "+flowy: {a: 1, b: 2}"]),
    ],
)
def test_set_changes_only_that_line(key: str, value: Any, expected_diff: list[str]) -> None:
    cfg = RoundTripConfig.from_text(BASE, "base.yaml")
    cfg.set(key, value)
    out = cfg.dump()
    assert changed_lines(BASE, out) == expected_diff
    assert cfg.get(key) == value
    assert load_yaml(out)  # still valid YAML


def test_block_value_replaced_by_flow_value() -> None:
    cfg = RoundTripConfig.from_text(BASE)
    cfg.set("validation.samples", [])
    plain = cfg.to_plain()
    assert plain["validation"] == {"samples": [], "interval": 100}
    assert "a long prompt" not in cfg.dump()


def test_set_many_equals_sequential_sets() -> None:
    edits = {
        "validation.interval": None,
        "optimization.batch_size": 2,
        "acceleration.quantization": None,
        "validation.samples": [],
        "output_dir": "/tmp/o",
        "wandb.enabled": False,
    }
    one = RoundTripConfig.from_text(BASE)
    one.set_many(edits)
    seq = RoundTripConfig.from_text(BASE)
    for k, v in edits.items():
        seq.set(k, v)
    assert one.dump() == seq.dump()
    flat = dict(dotted_items(one.to_plain()))
    for k, v in edits.items():
        assert flat[k] == v


def test_syntax_error_names_file_line_and_column() -> None:
    with pytest.raises(ConfigError, match=r"bad\.yaml:3:\d+: YAML syntax error"):
        load_yaml("a:\n  b: 1\n c: [\n", "bad.yaml")


def test_setting_through_a_scalar_is_refused() -> None:
    cfg = RoundTripConfig.from_text(BASE)
    with pytest.raises(ConfigError, match="output_dir"):
        cfg.set("output_dir.sub", 1)


def test_real_configs_round_trip_untouched(ltx2_fixtures: Path) -> None:
    for path in sorted(ltx2_fixtures.glob("*.yaml")):
        text = path.read_text()
        cfg = RoundTripConfig.from_text(text, str(path))
        cfg.set_many({})
        assert cfg.dump() == text
