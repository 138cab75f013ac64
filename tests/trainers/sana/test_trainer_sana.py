"""The Sana-style flag adapter: argv editing, both baseline forms, tqdm and hook readings,
and a real flag-parsing training script run through the rendered command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError, UsageError
from autotune.execution.launch import LaunchSpec
from autotune.trainers import get_adapter
from autotune.trainers.kit.argv import drop_value_flag, flag_value, set_bool_flag, set_value_flag
from autotune.trainers.kit.readers.tqdmbar import read_tqdm
from autotune.trainers.sana.adapter import SanaAdapter
from tests.helpers import FAKES

REPO = Path(__file__).resolve().parents[3]
HOOK = REPO / "trials" / "hook" / "sitecustomize.py"
FAKE = FAKES / "fake_sana_train.py"


@pytest.mark.parametrize(
    ("args", "flag", "value", "expected"),
    [
        (
            ["--a", "1", "--train_batch_size", "4", "--b"],
            "--train_batch_size",
            "2",
            ["--a", "1", "--train_batch_size", "2", "--b"],
        ),
        (["--train_batch_size=4", "--b"], "--train_batch_size", "2", ["--train_batch_size=2", "--b"]),
        (["--b"], "--train_batch_size", "2", ["--b", "--train_batch_size", "2"]),
        (["--x=1", "--x", "2", "--x=3"], "--x", "9", ["--x=9"]),
        (["--x"], "--x", "9", ["--x", "9"]),  # a value flag left without its value at the end
        (["--xy=1"], "--x", "9", ["--xy=1", "--x", "9"]),  # prefixes are other flags
    ],
)
def test_set_value_flag(args: list[str], flag: str, value: str, expected: list[str]) -> None:
    assert set_value_flag(args, flag, value) == expected


@pytest.mark.parametrize(
    ("args", "flag", "on", "expected"),
    [
        (["--a", "--offload"], "--offload", False, ["--a"]),
        (["--a"], "--offload", True, ["--a", "--offload"]),
        (["--offload", "--a"], "--offload", True, ["--offload", "--a"]),
        (["--offload_dir", "x"], "--offload", False, ["--offload_dir", "x"]),
    ],
)
def test_set_bool_flag(args: list[str], flag: str, on: bool, expected: list[str]) -> None:
    assert set_bool_flag(args, flag, on) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--validation_prompt", "a photo of sks dog", "--seed", "1"], ["--seed", "1"]),
        (["--validation_prompt=a dog", "--seed", "1"], ["--seed", "1"]),
        (["--seed", "1"], ["--seed", "1"]),
    ],
)
def test_drop_value_flag(args: list[str], expected: list[str]) -> None:
    assert drop_value_flag(args, "--validation_prompt") == expected


def test_flag_value_last_wins() -> None:
    assert flag_value(["--x", "1", "--x=2"], "--x") == "2"
    assert flag_value(["--x"], "--x") is None


@pytest.mark.parametrize(
    ("text", "step_time", "losses"),
    [
        (
            "Steps:  40%|████      | 4/10 [00:02<00:03,  1.95it/s, loss=0.123, lr=0.0001]",
            pytest.approx(1 / 1.95),
            [0.123],
        ),
        ("Steps:  40%|████      | 4/10 [00:40<01:00, 10.02s/it, loss=nan, lr=0.0001]", 10.02, "nan"),
        ("Steps:   0%|          | 0/10 [00:00<?, ?it/s]", None, []),
        (
            "Steps: 10%|█ | 1/10 [00:01<00:09, 1.00it/s]\rSteps: 20%|██ | 2/10 [00:01<00:04, 2.00it/s, loss=0.5]",
            0.5,
            [0.5],
        ),
        ("garbage 1/2 [ ,", None, []),
        ("", None, []),
    ],
)
def test_the_training_bar_gives_steady_step_time_and_losses(
    text: str, step_time: object, losses: object
) -> None:
    metrics = read_tqdm(text)
    got_time, got_losses = (metrics.step_time_s, metrics.losses) if metrics is not None else (None, [])
    assert got_time == step_time
    if losses == "nan":
        assert len(got_losses) == 1 and got_losses[0] != got_losses[0]
    else:
        assert got_losses == losses


def test_command_line_baseline(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/usr/bin/env bash\n# my Sana run\ncd /data/diffusers/examples/dreambooth && \\\n"
        "  HF_HOME=/data/hf accelerate launch train_dreambooth_lora_sana.py \\\n"
        "  --pretrained_model_name_or_path=Efficient-Large-Model/Sana_1600M_1024px_diffusers \\\n"
        "  --instance_prompt 'a photo of sks dog' --train_batch_size=1 --gradient_accumulation_steps 4 \\\n"
        "  --use_8bit_adam --offload --mixed_precision=bf16\n"
    )
    adapter = get_adapter("sana")
    baseline = adapter.load_baseline(script)
    assert baseline.data["cwd"] == "/data/diffusers/examples/dreambooth"
    assert baseline.data["launcher"] == ["accelerate", "launch"]
    assert baseline.data["env"] == {"HF_HOME": "/data/hf"}
    assert "a photo of sks dog" in baseline.data["args"]
    assert adapter.baseline_params(baseline) == {
        "offload": True,
        "cache_latents": False,
        "optimizer": "adamw8bit",
        "batch_size": 1,
        "gradient_checkpointing": False,
        "gradient_accumulation_steps": 4,
    }
    text = adapter.final_config(baseline, {"offload": False, "batch_size": 2}, gradient_accumulation_steps=2)
    assert "--offload " not in text and "--offload\n" not in text and "'a photo of sks dog'" in text
    again = adapter.baseline_from_text(text)  # type: ignore[attr-defined]
    assert again.data["args"][:3] == [
        "--pretrained_model_name_or_path=Efficient-Large-Model/Sana_1600M_1024px_diffusers",
        "--instance_prompt",
        "a photo of sks dog",
    ]
    assert adapter.training_command(tmp_path / "best.sh") == f"bash {tmp_path / 'best.sh'}"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("script: 3\n", "script"),
        ("script: t.py\nargs: --a\n", "args"),
        ("echo hello\n", "no training script"),
        ("python 'unclosed.py\n", "cannot read"),
    ],
)
def test_bad_baselines_say_why(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "b").write_text(text)
    with pytest.raises(ConfigError, match=match):
        get_adapter("sana").load_baseline(tmp_path / "b")


def test_no_baseline_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--config"):
        get_adapter("sana").load_baseline(None)


def _baseline_yaml(tmp_path: Path, extra_args: str = "") -> Path:
    path = tmp_path / "sana.yaml"
    path.write_text(
        f"script: {FAKE}\nlauncher: [{sys.executable}]\ncwd: {tmp_path}\n"
        "args:\n  - --pretrained_model_name_or_path=Efficient-Large-Model/Sana\n  - --train_batch_size=1\n"
        "  - --gradient_checkpointing\n  - --use_8bit_adam\n  - --mixed_precision=bf16\n"
        "  - --validation_prompt\n  - a photo of sks dog\n  - --push_to_hub\n  - --checkpointing_steps=100\n"
        "  - --report_to=none\n" + extra_args
    )
    return path


def _run(spec: LaunchSpec) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **spec.env}
    return subprocess.run(
        spec.argv, cwd=spec.cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_render_writes_the_exact_argv(tmp_path: Path) -> None:
    adapter = get_adapter("sana")
    baseline = adapter.load_baseline(_baseline_yaml(tmp_path))
    trial = tmp_path / "trial"
    spec = adapter.render(
        baseline,
        {"offload": True, "optimizer": "adamw", "batch_size": 4, "gradient_checkpointing": False},
        gradient_accumulation_steps=2,
        steps=12,
        trial_dir=trial,
    )
    args = list(spec.argv[2:])
    assert spec.argv[:2] == (sys.executable, str(FAKE))
    assert args == [
        "--pretrained_model_name_or_path=Efficient-Large-Model/Sana",
        "--train_batch_size=4",
        "--mixed_precision=bf16",
        f"--checkpointing_steps={10**9}",
        "--report_to=none",
        "--gradient_accumulation_steps",
        "2",
        "--offload",
        "--max_train_steps",
        "12",
        "--output_dir",
        str(trial.resolve() / "output"),
    ]
    import json

    assert json.loads((trial / "argv.json").read_text()) == list(spec.argv)
    assert spec.env["PYTHONUNBUFFERED"] == "1"
    baseline.num_gpus = 2
    spec2 = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t2")
    assert spec2.argv[:6] == (
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        str(FAKE),
    )


@pytest.mark.process
def test_fake_sana_script_runs_and_its_tqdm_rate_is_read(tmp_path: Path) -> None:
    adapter = get_adapter("sana", hook=False)
    assert isinstance(adapter, SanaAdapter)
    baseline = adapter.load_baseline(_baseline_yaml(tmp_path, "  - --step_sleep=0.05\n"))
    trial = tmp_path / "trial"
    spec = adapter.render(
        baseline,
        {"batch_size": 2, "cache_latents": True},
        gradient_accumulation_steps=2,
        steps=8,
        trial_dir=trial,
    )
    done = _run(spec)
    assert done.returncode == 0, done.stderr
    assert "cache_latents: True" in done.stdout and "8-bit Adam: True" in done.stdout
    assert (trial / "output" / "pytorch_lora_weights.pt").is_file()
    metrics = adapter.read_metrics(trial, done.stdout + done.stderr)
    assert metrics.step_time_s is not None and 0.05 <= metrics.step_time_s < 1.0
    assert metrics.samples_per_s == pytest.approx(4 / metrics.step_time_s)
    assert metrics.losses and not metrics.nan_loss
    assert metrics.measured_peak_vram_gb is None  # no hook, no memory figure


@pytest.mark.process
def test_fake_sana_script_with_the_hook(tmp_path: Path) -> None:
    assert HOOK.is_file()
    adapter = get_adapter("sana")
    baseline = adapter.load_baseline(_baseline_yaml(tmp_path, "  - --step_sleep=0.05\n"))
    trial = tmp_path / "trial"
    spec = adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=10, trial_dir=trial
    )
    assert spec.env["AUTOTUNE_HOOK_FILE"] == str(trial.resolve() / "hook.jsonl")
    done = _run(spec)
    assert done.returncode == 0, done.stderr
    assert (trial / "hook.jsonl").is_file()
    metrics = adapter.read_metrics(trial, "")  # hook only: no output handed over
    assert len(metrics.step_times_s) == 10
    assert metrics.step_time_s is not None and 0.05 <= metrics.step_time_s < 1.0
    assert metrics.samples_per_s == pytest.approx(2 / metrics.step_time_s)
    assert "hook" in metrics.source
