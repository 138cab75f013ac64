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


# Any valid YAML: each row is (file, edits, the file after them). Flow style, aliases, merges and
# quoted keys are edited in place where that is exact, else by ruamel's round trip; either way
# comments stay and a value the file already says keeps its spelling.
ANY_YAML = [
    pytest.param(
        "model: {path: /m}\noptimization: {batch_size: 1, steps: 40}  # short\n",
        {"optimization.batch_size": 4, "optimization.lr": 0.1},
        "model: {path: /m}\noptimization: {batch_size: 4, steps: 40, lr: 0.1}  # short\n",
        id="flow-one-line",
    ),
    pytest.param(
        "optimization: {\n  batch_size: 1,  # per GPU\n  steps: 40\n}\n",
        {"optimization.batch_size": 4, "optimization.optimizer_type": "adamw"},
        "optimization: {\n  batch_size: 4,  # per GPU\n  steps: 40,\n  optimizer_type: adamw\n}\n",
        id="flow-multi-line",
    ),
    pytest.param(
        "optimization: {\n  batch_size: 1,\n  steps: 40,\n}\n",
        {"optimization.lr": 1},
        "optimization: {\n  batch_size: 1,\n  steps: 40,\n  lr: 1\n}\n",
        id="flow-multi-line-trailing-comma",
    ),
    pytest.param(
        "a: {b: {c: 1, d: [1, 2]}, e: 'q'}  # nested\n",
        {"a.b.c": 2, "a.b.d": [3], "a.e": "z", "a.b.f.g": None},
        "a: {b: {c: 2, d: [3], f: {g: null}}, e: 'z'}  # nested\n",
        id="flow-nested",
    ),
    pytest.param(
        "steps: &n 40\ntraining:\n  steps: *n  # same as above\nvalidation: {steps: *n, every: 2}\n",
        {"training.steps": 60, "validation.steps": 5},
        "steps: &n 40\ntraining:\n  steps: 60  # same as above\nvalidation: {steps: 5, every: 2}\n",
        id="alias-edited-where-written",
    ),
    pytest.param(
        "base: &b 1\nother:\n  batch_size: *b\n",
        {"base": 4},
        "base: 4\nother:\n  batch_size: &b 1\n",
        id="alias-target-edited-alias-keeps-value",
    ),
    pytest.param(
        "defaults: &d\n  lr: 1  # c\n  bs: 1\noptimization:\n  <<: *d\n  steps: 40\n",
        {"optimization.bs": 4},
        "defaults: &d\n  lr: 1  # c\n  bs: 1\noptimization:\n  <<: *d\n  steps: 40\n  bs: 4\n",
        id="merged-key-overridden",
    ),
    pytest.param(
        "defaults: &d {lr: 1, bs: 1}\noptimization: {<<: *d, steps: 40}\n",
        {"optimization.bs": 4},
        "defaults: &d {lr: 1, bs: 1}\noptimization: {<<: *d, steps: 40, bs: 4}\n",
        id="merged-key-overridden-flow",
    ),
    pytest.param(
        "defaults: &d\n  lr: 1  # c\n  bs: 1\noptimization:\n  <<: *d\n  steps: 40\n",
        {"defaults.lr": 4},
        "defaults: &d\n  lr: 4  # c\n  bs: 1\noptimization:\n  <<: *d\n  steps: 40\n  lr: 1\n",
        id="merge-source-edited-merged-copy-keeps-value",
    ),
    pytest.param(
        "opt: &o\n  bs: 1  # c\nother: *o\n",
        {"other.bs": 4},
        "opt:\n  bs: 1  # c\nother:\n  bs: 4\n",
        id="aliased-section-edited-at-the-alias",
    ),
    pytest.param(
        "opt: &o\n  bs: 1  # c\nother: *o\n",
        {"opt.bs": 4},
        "opt:\n  bs: 4  # c\nother:\n  bs: 1\n",
        id="aliased-section-edited-at-the-anchor",
    ),
    pytest.param(
        '"optimization":\n  \'batch_size\': 1\n  "optimizer_type": "adamw8bit"\n',
        {"optimization.batch_size": 4, "optimization.optimizer_type": "adamw"},
        '"optimization":\n  \'batch_size\': 4\n  "optimizer_type": "adamw"\n',
        id="quoted-keys-block",
    ),
    pytest.param(
        "o: {\"batch_size\": 1, 'q': 'x'}\n",
        {"o.batch_size": 4, "o.q": "it's"},
        "o: {\"batch_size\": 4, 'q': 'it''s'}\n",
        id="quoted-keys-flow-single-quotes-kept",
    ),
    pytest.param(
        "acceleration:\n  quantization: none  # off\n  a: ~\n  b: True\n  c: null\n  d: NULL\n",
        {
            "acceleration.quantization": None,
            "acceleration.a": None,
            "acceleration.b": False,
            "acceleration.c": None,
        },
        "acceleration:\n  quantization: none  # off\n  a: ~\n  b: False\n  c: null\n  d: NULL\n",
        id="spelling-kept-block",
    ),
    pytest.param(
        "acceleration: {quantization: none, b: TRUE, c: ~, d: yes}\n",
        {
            "acceleration.quantization": None,
            "acceleration.b": False,
            "acceleration.c": None,
            "acceleration.d": True,
        },
        "acceleration: {quantization: none, b: FALSE, c: ~, d: yes}\n",
        id="spelling-kept-flow",
    ),
    pytest.param(
        "acceleration:\n  quantization: int8-quanto\n",
        {"acceleration.quantization": None},
        "acceleration:\n  quantization: null\n",
        id="a-new-null-is-null",
    ),
    pytest.param(
        "validation:\noutput_dir: x  # c\n",
        {"validation.interval": None, "output_dir": "y"},
        "validation:\n  interval: null\noutput_dir: y  # c\n",
        id="empty-section-filled",
    ),
    pytest.param(
        "{optimization: {batch_size: 1}, a: 2}\n",
        {"optimization.batch_size": 3, "hub.push": False},
        "{optimization: {batch_size: 3}, a: 2, hub: {push: false}}\n",
        id="whole-document-in-flow-style",
    ),
]


@pytest.mark.parametrize(("text", "edits", "expected"), ANY_YAML)
def test_any_valid_yaml_is_edited_exactly(text: str, edits: dict[str, Any], expected: str) -> None:
    cfg = RoundTripConfig.from_text(text, "base.yaml")
    before = load_yaml(text)
    cfg.set_many(edits)
    assert cfg.dump() == expected
    after = cfg.to_plain()
    for key, value in edits.items():
        old, new = dict(dotted_items(before)).get(key), dict(dotted_items(after))[key]
        assert (type(new), new) == (type(value), value) or (value is None and old == "none"), key
    # Every leaf not set keeps its value (an alias or merge does not carry an edit elsewhere).
    untouched = {
        k: v
        for k, v in dotted_items(before)
        if k not in edits and not any(e.startswith(k + ".") for e in edits)
    }
    assert {k: v for k, v in dotted_items(after) if k in untouched} == untouched


def test_set_one_by_one_on_a_flow_config_stays_valid() -> None:
    cfg = RoundTripConfig.from_text("optimization: {batch_size: 1, steps: 40}\n", "base.yaml")
    for key, value in [("optimization.batch_size", 2), ("optimization.steps", 5), ("hub.push", False)]:
        cfg.set(key, value)
    assert cfg.to_plain() == {"optimization": {"batch_size": 2, "steps": 5}, "hub": {"push": False}}


def test_our_failed_edit_is_our_error_not_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.config import yamledit
    from autotune.errors import ConfigEditError, UsageError

    text = "optimization: {batch_size: 1, steps: 40}\n"
    cfg = RoundTripConfig.from_text(text, "base.yaml")
    monkeypatch.setattr(yamledit, "ruamel_rewrite", lambda *_: "optimization: {batch_size: 1, steps: [\n")
    monkeypatch.setattr(yamledit, "flow", lambda _v: "[")  # both editors now write broken YAML
    with pytest.raises(ConfigEditError, match=r"bug in autotune, not in your file") as info:
        cfg.set("optimization.batch_size", 4)
    assert not isinstance(info.value, UsageError)
    assert "syntax error" not in str(info.value)
    assert cfg.dump() == text  # the document is left as it was


AITK_LIKE = """\
job: extension
config:
  name: "x"  # the job
  process:
    - type: 'sd_trainer'
      datasets:
        # images
        - folder_path: "/data"
          resolution: [ 512, 768 ]
      train:
        batch_size: 1  # per step
      model:
        quantize: true
"""


@pytest.mark.parametrize(
    ("dotted", "value", "line"),
    [
        ("config.process.0.train.batch_size", 4, "        batch_size: 4  # per step\n"),
        ("config.process.0.datasets.0.resolution", [768], "          resolution: [768]\n"),
        ("config.process.0.model.quantize", False, "        quantize: false\n"),
        ("config.process.0.model.low_vram", True, "        low_vram: true\n"),
    ],
)
def test_an_index_part_reaches_into_a_list(dotted: str, value: object, line: str) -> None:
    """ai-toolkit keeps its settings in ``config.process[0]``: a dotted path names the item by index."""
    cfg = RoundTripConfig.from_text(AITK_LIKE)
    cfg.set(dotted, value)
    assert cfg.get(dotted) == value and line in cfg.dump()
    assert "# images" in cfg.dump() and '  name: "x"  # the job\n' in cfg.dump()
    assert len(cfg.dump().splitlines()) - len(AITK_LIKE.splitlines()) in (0, 1)


def test_an_index_past_the_list_is_a_config_error() -> None:
    cfg = RoundTripConfig.from_text(AITK_LIKE)
    assert cfg.get("config.process.1.train", "none") == "none"
    with pytest.raises(ConfigError, match="no such item"):
        cfg.set("config.process.1.train.batch_size", 2)
