"""The command-template adapter: placeholders checked before anything runs, argv filled
per element (never a shell), metrics from AUTOTUNE_METRICS_FILE or the LTX-2 block."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.yamltext import load_yaml
from autotune.errors import UsageError
from autotune.trainers import Winner, get_adapter

PARAMS = {"quantization": "none", "optimizer": "adamw", "batch_size": 4, "gradient_checkpointing": False}


@pytest.mark.parametrize(
    ("template", "match"),
    [
        ("python train.py --lr {learning_rate}", r"\{learning_rate\}.*known ones: \{quantization\}"),
        ("python train.py --x {batch_size} {oops} {nope}", r"\{nope\}, \{oops\}"),
        ("python train.py {0}", "not a placeholder name"),
        ("python train.py --x {batch_size", "literal braces"),
        ("python 'unclosed", "cannot split"),
        ("", "needs a command template"),
    ],
)
def test_bad_templates_fail_before_anything_runs(template: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        get_adapter("command", template=template)


def test_placeholders_fill_argv_elements_never_a_shell(tmp_path: Path) -> None:
    adapter = get_adapter(
        "command",
        template="python train.py --config={config} --bs {batch_size} --q {quantization} "
        "--ckpt {gradient_checkpointing} --ga {gradient_accumulation_steps} --steps {steps} "
        "--name 'run {batch_size}; rm -rf ~' x;y {{literal}}",
        cwd=tmp_path,
    )
    baseline = adapter.load_baseline(None)
    trial = tmp_path / "t"
    spec = adapter.render(baseline, PARAMS, gradient_accumulation_steps=2, steps=30, trial_dir=trial)
    assert spec.argv == (
        "python",
        "train.py",
        f"--config={trial.resolve() / 'config.yaml'}",
        "--bs",
        "4",
        "--q",
        "none",
        "--ckpt",
        "false",
        "--ga",
        "2",
        "--steps",
        "30",
        "--name",
        "run 4; rm -rf ~",
        "x;y",
        "{literal}",
    )
    assert spec.cwd == tmp_path.resolve()
    assert load_yaml((trial / "config.yaml").read_text()) == {
        **PARAMS,
        "gradient_accumulation_steps": 2,
        "steps": 30,
    }


def test_ltx2_shaped_baseline_gets_the_knobs_in_its_keys(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "optimization:\n  steps: 2000\n  batch_size: 1\n  gradient_accumulation_steps: 1\n"
        "  optimizer_type: adamw8bit\n  enable_gradient_checkpointing: true\nacceleration:\n  quantization: int8-quanto\n"
    )
    adapter = get_adapter("command", template="train {config}")
    baseline = adapter.load_baseline(tmp_path / "c.yaml")
    adapter.render(baseline, PARAMS, gradient_accumulation_steps=2, steps=30, trial_dir=tmp_path / "t")
    data = load_yaml((tmp_path / "t" / "config.yaml").read_text())
    assert data == {
        "optimization": {
            "steps": 30,
            "batch_size": 4,
            "gradient_accumulation_steps": 2,
            "optimizer_type": "adamw",
            "enable_gradient_checkpointing": False,
        },
        "acceleration": {"quantization": None},
    }


FAKE_TRAINER = """\
import json, os, sys
cfg = sys.argv[1]
if sys.argv[2] == "json":
    json.dump({"step_time_s": 0.25, "peak_vram_gb": 11.5, "samples_per_s": 15.0, "loss": 0.3},
              open(os.environ["AUTOTUNE_METRICS_FILE"], "w"))
else:
    print("📊 Training Statistics:\\n - Total time: 0.5 minutes\\n - Training speed: 2.00 steps/second\\n"
          " - Samples/second: 8.00\\n - Peak GPU memory: 20.50 GB")
"""


@pytest.mark.parametrize(
    ("mode", "step_time", "samples", "peak"),
    [("json", 0.25, 15.0, 11.5), ("stats", None, 8.0, 20.5)],
)
def test_metrics_from_the_file_or_the_statistics_block(
    tmp_path: Path, mode: str, step_time: float | None, samples: float, peak: float
) -> None:
    (tmp_path / "train.py").write_text(FAKE_TRAINER)
    adapter = get_adapter("command", template=f"{sys.executable} train.py {{config}} {mode}", cwd=tmp_path)
    trial = tmp_path / "t"
    spec = adapter.render(
        adapter.load_baseline(None), PARAMS, gradient_accumulation_steps=1, steps=5, trial_dir=trial
    )
    done = subprocess.run(
        spec.argv,
        cwd=spec.cwd,
        env={**os.environ, **spec.env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    metrics = adapter.read_metrics(trial, done.stdout)
    assert (metrics.step_time_s, metrics.samples_per_s, metrics.trainer_peak_vram_gb) == (
        step_time,
        samples,
        peak,
    )


def test_training_command_fills_what_it_knows(tmp_path: Path) -> None:
    adapter = get_adapter(
        "command", template="python train.py {config} --bs {batch_size} --steps {steps}", cwd=tmp_path
    )
    command = adapter.training_command(
        tmp_path / "best.yaml", Winner(params=PARAMS, gradient_accumulation_steps=1)
    )
    assert (
        command
        == f"cd {tmp_path.resolve()} && python train.py {(tmp_path / 'best.yaml').resolve()} --bs 4 --steps '{{steps}}'"
    )
