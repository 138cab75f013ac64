"""The reference adapter: the LTX-2 code path with ``python -m trials.reference`` as the launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from autotune.core.yamltext import load_yaml
from autotune.trainers import get_adapter

REPO = Path(__file__).resolve().parents[3]
STAND_IN = """\
model:
  training_mode: lora
optimization:
  steps: 100
  batch_size: 1
  gradient_accumulation_steps: 1
  optimizer_type: adamw8bit
  enable_gradient_checkpointing: true
acceleration:
  quantization: int8-quanto
output_dir: out
reference:
  device: cpu
"""


def test_launch_is_this_python_running_the_module(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(STAND_IN)
    adapter = get_adapter("reference")
    baseline = adapter.load_baseline(tmp_path / "r.yaml")
    spec = adapter.render(
        baseline, {"quantization": "none"}, gradient_accumulation_steps=1, steps=10, trial_dir=tmp_path / "t"
    )
    config = str((tmp_path / "t" / "config.yaml").resolve())
    assert spec.argv == (sys.executable, "-m", "trials.reference", config, "--disable-progress-bars")
    assert spec.cwd == REPO
    data = load_yaml((tmp_path / "t" / "config.yaml").read_text())
    # Sections the stand-in lacks are not invented (the reference reads a subset of the schema).
    assert "validation" not in data and "wandb" not in data and "hub" not in data
    assert data["optimization"]["steps"] == 10 and data["output_dir"] == str(
        (tmp_path / "t" / "output").resolve()
    )
    assert data["reference"] == {"device": "cpu"}
    baseline.num_gpus = 2
    spec2 = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=10, trial_dir=tmp_path / "t2")
    assert spec2.argv[:6] == (
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
    )


def test_per_step_times_from_the_metrics_file_beat_the_step_lines(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(STAND_IN)
    adapter = get_adapter("reference")
    trial = tmp_path / "t"
    adapter.render(
        adapter.load_baseline(tmp_path / "r.yaml"),
        {"batch_size": 2},
        gradient_accumulation_steps=1,
        steps=40,
        trial_dir=trial,
    )
    times = [4.0] + [0.5] * 19 + [0.4] * 20
    (trial / "trainer-metrics.json").write_text(
        json.dumps({"step_times_s": times, "losses": [0.2] * 40, "peak_vram_gb": 3.5})
    )
    output = "Step 20/40 - Loss: 0.2, LR: 1.00e-04, Time/Step: 0.90s, Total Time: 0h 0m\n" * 1
    metrics = adapter.read_metrics(trial, output)
    assert metrics.step_time_s == 0.4  # the second window, from every step
    assert metrics.samples_per_s == pytest.approx(2 / 0.4)
    assert metrics.trainer_peak_vram_gb == 3.5 and len(metrics.losses) == 40


def test_default_baseline_is_the_shipped_low_vram_config() -> None:
    shipped = REPO / "configs" / "reference" / "low_vram.yaml"
    assert shipped.is_file()
    adapter = get_adapter("reference")
    baseline = adapter.load_baseline(None)
    assert adapter.baseline_params(baseline) == {
        "quantization": "int8-quanto",
        "optimizer": "adamw8bit",
        "batch_size": 1,
        "gradient_checkpointing": True,
        "gradient_accumulation_steps": 1,
    }


FLOW_STAND_IN = """\
model: {training_mode: lora}
optimization: {steps: 100, batch_size: 1, gradient_accumulation_steps: 1,
  optimizer_type: adamw8bit, enable_gradient_checkpointing: true}  # flow style, over two lines
acceleration: {quantization: none}
output_dir: out
reference: {device: cpu, emulated_vram_gb: 4}
"""


def test_a_flow_style_config_renders_to_the_intended_values(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(FLOW_STAND_IN)
    adapter = get_adapter("reference")
    baseline = adapter.with_emulated_vram(adapter.load_baseline(tmp_path / "r.yaml"), 2.5)
    params = {
        "quantization": "int8-quanto",
        "optimizer": "adamw",
        "batch_size": 3,
        "gradient_checkpointing": False,
    }
    adapter.render(baseline, params, gradient_accumulation_steps=2, steps=10, trial_dir=tmp_path / "t")
    text = (tmp_path / "t" / "config.yaml").read_text()
    assert load_yaml(text) == {
        "model": {"training_mode": "lora"},
        "optimization": {
            "steps": 10,
            "batch_size": 3,
            "gradient_accumulation_steps": 2,
            "optimizer_type": "adamw",
            "enable_gradient_checkpointing": False,
        },
        "acceleration": {"quantization": "int8-quanto"},
        "output_dir": str((tmp_path / "t" / "output").resolve()),
        "reference": {"device": "cpu", "emulated_vram_gb": 2.5},
    }
    assert "# flow style, over two lines" in text
    final = adapter.final_config(baseline, {**params, "quantization": "none"}, gradient_accumulation_steps=1)
    assert "acceleration: {quantization: none}\n" in final  # the user's spelling, not `null`
