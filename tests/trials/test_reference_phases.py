"""The reference trainer's validation-like pass and final save: behind config keys,
timed apart from the training loop so a trial's overhead for them can be measured
(``scripts/bench_phases.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.trials.test_reference_trainer import tiny
from trials.reference.config import parse_config

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trials.reference.train import run  # noqa: E402


def test_the_pass_runs_its_forwards_and_the_save_writes_the_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = run(dataclasses.replace(tiny(), validation_steps=3, output_dir=tmp_path), progress_bars=False)
    out = capsys.readouterr().out
    assert "Validation pass: 3 forwards in " in out
    assert metrics["validation_s"] > 0 and metrics["save_s"] > 0 and metrics["train_s"] > 0
    saved = torch.load(tmp_path / "checkpoints" / "lora_weights_step_00003.pt", weights_only=True)
    assert saved and all("lora" in name for name in saved)


def test_without_the_keys_there_is_no_pass_and_no_save(capsys: pytest.CaptureFixture[str]) -> None:
    metrics = run(tiny(), progress_bars=False)
    assert metrics["validation_s"] == 0.0 and metrics["save_s"] is None
    assert "Validation pass" not in capsys.readouterr().out


def test_validation_steps_is_checked() -> None:
    from trials.reference.config import ConfigError

    base = {
        "model": {"training_mode": "full"},
        "optimization": {
            "learning_rate": 1e-4,
            "steps": 2,
            "batch_size": 1,
            "gradient_accumulation_steps": 1,
            "optimizer_type": "adamw",
            "enable_gradient_checkpointing": False,
        },
        "acceleration": {"mixed_precision_mode": "no", "quantization": None},
    }
    assert parse_config({**base, "reference": {"validation_steps": 2}}).validation_steps == 2
    with pytest.raises(ConfigError, match=r"reference\.validation_steps: must be >= 0"):
        parse_config({**base, "reference": {"validation_steps": -1}})
