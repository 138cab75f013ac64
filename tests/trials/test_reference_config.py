"""The reference trainer's config: LTX-2 key names, unknown keys refused, baselines shaped like LTX-2's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from trials.reference.config import ConfigError, parse_config

BASELINES = REPO / "configs" / "reference"


def baseline(name: str = "low_vram") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((BASELINES / f"{name}.yaml").read_text(encoding="utf-8"))
    return data


def with_change(path: str, value: Any, *, delete: bool = False) -> dict[str, Any]:
    data = baseline()
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if delete:
        del node[last]
    else:
        node[last] = value
    return data


def test_baselines_parse_with_the_low_vram_and_standard_knobs() -> None:
    low = parse_config(baseline("low_vram"))
    std = parse_config(baseline("standard"))
    assert (low.quantization, low.optimizer, low.batch_size, low.checkpointing) == (
        "int8-quanto",
        "adamw8bit",
        1,
        True,
    )
    assert (std.quantization, std.optimizer, std.batch_size, std.checkpointing) == (None, "adamw", 1, True)
    assert (low.lora_rank, std.lora_rank) == (16, 32)
    assert low.grad_accum == std.grad_accum == 1
    assert low.emulated_vram_gb is not None and std.emulated_vram_gb is not None
    assert low.emulated_vram_gb < std.emulated_vram_gb


def test_learning_rate_written_like_ltx2_reads_as_a_number() -> None:
    # YAML 1.1 reads 1e-4 as a string; the LTX-2 trainer (pydantic) takes it as a float.
    assert parse_config(baseline()).learning_rate == pytest.approx(1e-4)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("optimization.batch_sise", 2, "optimization.batch_sise: Extra inputs are not permitted"),
        ("acceleration.quantisation", None, "acceleration.quantisation: Extra inputs are not permitted"),
        ("reference.model.width", 3, "reference.model.width: Extra inputs are not permitted"),
        ("validation.bogus", 1, "validation.bogus: Extra inputs are not permitted"),
        ("training", {}, "training: Extra inputs are not permitted"),
        (
            "acceleration.quantization",
            "int3-quanto",
            "acceleration.quantization: 'int3-quanto' is not one of",
        ),
        ("optimization.optimizer_type", "sgd", "optimization.optimizer_type: 'sgd' is not one of"),
        ("optimization.batch_size", 0, "optimization.batch_size: must be >= 1"),
        ("optimization.batch_size", "2", "optimization.batch_size: expected an integer"),
        ("optimization.enable_gradient_checkpointing", "yes", "expected true or false"),
        ("model.training_mode", "full", "cannot be used with model.training_mode 'full'"),
        ("reference.device", "tpu", "reference.device: 'tpu' is not one of"),
        ("reference.data.num_samples", 0, "reference.data.num_samples: must be >= 1"),
        ("reference.model.heads", 3, "not divisible by reference.model.heads"),
        ("reference.data.height", 7, "reference.data.height: 7 is not divisible by the patch size 2"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        parse_config(with_change(path, value))
    assert message in str(err.value)


@pytest.mark.parametrize(
    "path",
    [
        "optimization.batch_size",
        "optimization.optimizer_type",
        "optimization.enable_gradient_checkpointing",
        "acceleration.quantization",
    ],
)
def test_every_knob_must_be_written(path: str) -> None:
    with pytest.raises(ConfigError, match="Field required"):
        parse_config(with_change(path, None, delete=True))


def test_full_training_without_quantization_is_accepted() -> None:
    data = with_change("model.training_mode", "full")
    data["acceleration"]["quantization"] = None
    data["lora"] = None
    assert parse_config(data).training_mode == "full"


def test_dataset_smaller_than_a_batch_is_refused() -> None:
    data = with_change("optimization.batch_size", 32)
    with pytest.raises(ConfigError, match="cannot fill one batch"):
        parse_config(data)


def test_unknown_key_exits_1_with_ltx2_wording_on_stdout(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(with_change("optimization.batch_sise", 2)), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "trials.reference", str(config), "--disable-progress-bars"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.startswith("Error: Invalid configuration data: optimization.batch_sise: Extra inputs")
    assert "Traceback" not in proc.stderr


def test_real_ltx2_configs_are_accepted(ltx2_fixtures: Path) -> None:
    """Every section and key of the trainer's own configs is known here (we read LTX-2's schema)."""
    for name in ("t2v_lora.yaml", "t2v_lora_low_vram.yaml", "i2v_lora.yaml"):
        data = yaml.safe_load((ltx2_fixtures / name).read_text(encoding="utf-8"))
        data["reference"] = {"data": {"num_samples": 4}}
        cfg = parse_config(data)
        model, lora, opt, acc = data["model"], data["lora"], data["optimization"], data["acceleration"]
        assert (cfg.training_mode, cfg.lora_rank, cfg.lora_alpha) == (
            model["training_mode"],
            lora["rank"],
            lora["alpha"],
        ), name
        assert cfg.lora_targets == tuple(lora["target_modules"]), name
        assert (cfg.learning_rate, cfg.steps, cfg.batch_size, cfg.grad_accum) == (
            float(opt["learning_rate"]),  # PyYAML reads 1e-4 as a string; the schema takes it as a number
            opt["steps"],
            opt["batch_size"],
            opt["gradient_accumulation_steps"],
        ), name
        assert (cfg.optimizer, cfg.checkpointing) == (
            opt["optimizer_type"],
            opt["enable_gradient_checkpointing"],
        ), name
        assert (cfg.quantization, cfg.mixed_precision) == (
            acc["quantization"],
            acc["mixed_precision_mode"],
        ), name
        assert cfg.seed == data["seed"] and cfg.data.num_samples == 4, name


def _key_paths(node: Any, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return set()
    out = set()
    for key, value in node.items():
        path = f"{prefix}{key}"
        out.add(path)
        if key != "scheduler_params":
            out |= _key_paths(value, path + ".")
    return out


def test_baselines_use_only_ltx2_key_names(ltx2_fixtures: Path) -> None:
    ltx2 = _key_paths(yaml.safe_load((ltx2_fixtures / "t2v_lora_low_vram.yaml").read_text(encoding="utf-8")))
    for name in ("low_vram", "standard"):
        ours = {p for p in _key_paths(baseline(name)) if not p.startswith("reference")}
        assert ours <= ltx2, f"{name}.yaml has keys the LTX-2 trainer does not: {sorted(ours - ltx2)}"
