"""The LTX-2 adapter: real configs render with only the knobs and the short-run recipe changed,
the launch line is the documented one, and a fake trainer's real output is read right."""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.config.yamlconf import dotted_items
from autotune.core.yamltext import load_yaml
from autotune.errors import CandidateRefused, UsageError
from autotune.execution.launch import LaunchSpec
from autotune.trainers import get_adapter
from autotune.trainers.ltx2.adapter import GRAD_ACCUM_KEY, KNOB_KEYS, Ltx2Adapter, trial_recipe
from tests.helpers import FAKES

FAKE_TRAINER = FAKES / "ltx2-trainer"
CANDIDATES = [
    ({"quantization": "none", "optimizer": "adamw", "batch_size": 4, "gradient_checkpointing": False}, 1),
    (
        {
            "quantization": "int4-quanto",
            "optimizer": "adamw8bit",
            "batch_size": 2,
            "gradient_checkpointing": True,
        },
        8,
    ),
]
KNOB_LINE_KEYS = (
    "quantization:",
    "optimizer_type:",
    "batch_size:",
    "gradient_accumulation_steps:",
    "enable_gradient_checkpointing:",
)


def _adapter(**options: object) -> Ltx2Adapter:
    options.setdefault("trainer_dir", FAKE_TRAINER)
    adapter = get_adapter("ltx2", **options)
    assert isinstance(adapter, Ltx2Adapter)
    return adapter


def _run(spec: LaunchSpec, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **spec.env, **env}
    for name, value in env.items():
        if value == "":
            full_env.pop(name, None)
    return subprocess.run(
        spec.argv, cwd=spec.cwd, env=full_env, capture_output=True, text=True, timeout=60, check=False
    )


def test_real_configs_render_with_only_knobs_and_recipe_changed(ltx2_fixtures: Path, tmp_path: Path) -> None:
    adapter = _adapter()
    configs = sorted(ltx2_fixtures.glob("*.yaml"))
    assert len(configs) >= 3
    for config in configs:
        baseline = adapter.load_baseline(config)
        before = dict(dotted_items(baseline.data))
        params, accum = CANDIDATES[len(config.name) % 2]
        trial_dir = tmp_path / config.stem
        adapter.render(baseline, params, gradient_accumulation_steps=accum, steps=60, trial_dir=trial_dir)
        rendered = load_yaml((trial_dir / "config.yaml").read_text())
        after = dict(dotted_items(rendered))
        expected = {
            KNOB_KEYS["quantization"]: None if params["quantization"] == "none" else params["quantization"],
            KNOB_KEYS["optimizer"]: params["optimizer"],
            KNOB_KEYS["batch_size"]: params["batch_size"],
            KNOB_KEYS["gradient_checkpointing"]: params["gradient_checkpointing"],
            GRAD_ACCUM_KEY: accum,
            **dict(trial_recipe(baseline.data, 60, trial_dir.resolve())),
        }
        for key, value in expected.items():
            assert after[key] == value, (config.name, key)
        changed = {
            k for k in before.keys() | after.keys() if before.get(k, "<absent>") != after.get(k, "<absent>")
        }
        # validation.samples' entries are leaves inside a list: replaced by [] when the run does not validate.
        assert changed <= set(expected), (config.name, changed - set(expected))
        # Comments outside the edited lines survive.
        assert "# Model Configuration" in (trial_dir / "config.yaml").read_text()


def test_real_configs_final_config_changes_only_knob_lines(ltx2_fixtures: Path) -> None:
    adapter = _adapter()
    for config in sorted(ltx2_fixtures.glob("*.yaml")):
        baseline = adapter.load_baseline(config)
        params, accum = CANDIDATES[0]
        text = adapter.final_config(baseline, params, gradient_accumulation_steps=accum + 1)
        diff = [
            line
            for line in difflib.unified_diff(baseline.text.splitlines(), text.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        assert diff, config.name
        assert all(any(k in line for k in KNOB_LINE_KEYS) for line in diff), (config.name, diff)
        data = load_yaml(text)
        assert (
            data["optimization"]["steps"] == baseline.data["optimization"]["steps"]
        )  # no short-run overrides
        assert data["output_dir"] == baseline.data["output_dir"]
        assert adapter.baseline_params(adapter.baseline_from_text(text)) == {
            **params,
            "gradient_accumulation_steps": accum + 1,
        }


def test_baseline_params_of_the_low_vram_config(ltx2_fixtures: Path) -> None:
    baseline = _adapter().load_baseline(ltx2_fixtures / "t2v_lora_low_vram.yaml")
    assert _adapter().baseline_params(baseline) == {
        "quantization": "int8-quanto",
        "optimizer": "adamw8bit",
        "batch_size": 1,
        "gradient_checkpointing": True,
        "gradient_accumulation_steps": 1,
    }


def test_omitted_knobs_take_the_trainers_code_defaults() -> None:
    baseline = _adapter().baseline_from_text("model:\n  training_mode: lora\n")
    assert _adapter().baseline_params(baseline) == {
        "quantization": "none",
        "optimizer": "adamw",
        "batch_size": 2,
        "gradient_checkpointing": False,
        "gradient_accumulation_steps": 1,
    }


def test_launch_line_single_gpu(tmp_path: Path) -> None:
    adapter = _adapter()
    baseline = adapter.baseline_from_text("optimization:\n  batch_size: 1\n")
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=40, trial_dir=tmp_path / "t")
    config = str((tmp_path / "t" / "config.yaml").resolve())
    assert spec.argv == ("uv", "run", "python", "scripts/train.py", config, "--disable-progress-bars")
    assert spec.cwd == FAKE_TRAINER.resolve()
    assert {k: spec.env[k] for k in ("COLUMNS", "PYTHONUNBUFFERED", "WANDB_MODE")} == {
        "COLUMNS": "250",
        "PYTHONUNBUFFERED": "1",
        "WANDB_MODE": "disabled",
    }
    assert spec.env["PYTHONPATH"].split(os.pathsep)[0].endswith("hook")  # the hook: on by default
    off = _adapter(hook=False).render(
        baseline, {}, gradient_accumulation_steps=1, steps=40, trial_dir=tmp_path / "t2"
    )
    assert "PYTHONPATH" not in off.env and "AUTOTUNE_HOOK_FILE" not in off.env  # --no-hook


def _checkout(tmp_path: Path) -> Path:
    """A fake LTX-2 checkout: packages/ltx-trainer with the script and accelerate configs."""
    pkg = tmp_path / "LTX-2" / "packages" / "ltx-trainer"
    (pkg / "scripts").mkdir(parents=True)
    (pkg / "scripts" / "train.py").write_text("")
    (pkg / "configs" / "accelerate").mkdir(parents=True)
    for name in ("ddp.yaml", "fsdp.yaml"):
        (pkg / "configs" / "accelerate" / name).write_text("num_processes: 4\n")
    return pkg


UV_ACCELERATE = ["uv", "run", "accelerate", "launch"]
PY_ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
DDP = ["--config_file", "configs/accelerate/ddp.yaml"]
FSDP = ["--config_file", "configs/accelerate/fsdp.yaml"]
TWO = ["--num_processes", "2"]


@pytest.mark.parametrize(
    ("mode", "options", "expected_head"),
    [
        ("lora", {}, [*UV_ACCELERATE, *DDP, *TWO]),
        ("full", {}, [*UV_ACCELERATE, *FSDP, *TWO]),
        ("lora", {"accelerate_config": "none"}, [*UV_ACCELERATE, "--multi_gpu", *TWO]),
        ("lora", {"accelerate_config": "fsdp"}, [*UV_ACCELERATE, *FSDP, *TWO]),
        ("lora", {"launcher": [sys.executable]}, [*PY_ACCELERATE, *DDP, *TWO]),
    ],
)
def test_launch_line_several_gpus(
    tmp_path: Path, mode: str, options: dict[str, object], expected_head: list[str]
) -> None:
    pkg = _checkout(tmp_path)
    adapter = get_adapter("ltx2", trainer_dir=pkg.parent.parent, **options)
    baseline = adapter.baseline_from_text(
        f"model:\n  training_mode: {mode}\noptimization:\n  batch_size: 1\n"
    )
    baseline.num_gpus = 2
    spec = adapter.render(
        baseline, {"quantization": "none"}, gradient_accumulation_steps=1, steps=40, trial_dir=tmp_path / "t"
    )
    assert list(spec.argv[: len(expected_head)]) == expected_head
    assert list(spec.argv[len(expected_head) :]) == [
        "scripts/train.py",
        str((tmp_path / "t" / "config.yaml").resolve()),
        "--disable-progress-bars",
    ]
    assert spec.cwd == pkg.resolve()
    assert (tmp_path / "t" / "adapter.json").read_text().count('"effective_batch": 2') == 1


def test_trainer_dir_is_found_from_the_config_inside_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = _checkout(tmp_path)
    (pkg / "configs" / "mine.yaml").write_text("optimization:\n  batch_size: 1\n")
    monkeypatch.chdir(tmp_path)
    adapter = get_adapter("ltx2")
    baseline = adapter.load_baseline(pkg / "configs" / "mine.yaml")
    assert adapter.cwd(baseline) == pkg.resolve()
    lost = adapter.baseline_from_text("optimization:\n  batch_size: 1\n")
    with pytest.raises(UsageError, match="--trainer-dir"):
        adapter.cwd(lost)
    with pytest.raises(UsageError, match="no LTX-2 trainer at"):
        get_adapter("ltx2", trainer_dir=tmp_path / "nowhere").cwd(lost)


def test_batch_larger_than_the_dataset_is_refused_with_the_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "latents").mkdir(parents=True)
    (data / "conditions").mkdir(parents=True)  # the trainer reads both (text_to_video, its default)
    for i in range(3):
        (data / "latents" / f"latent_{i:04d}.pt").write_bytes(b"x")
        (data / "conditions" / f"condition_{i:04d}.pt").write_bytes(b"x")
    (data / "latents" / ".DS_Store").write_bytes(b"x")
    (data / "latents" / "latent_0009.pt").write_bytes(b"x")  # no condition: not a sample
    adapter = _adapter()
    baseline = adapter.baseline_from_text(f"data:\n  preprocessed_data_root: {data}\n")
    assert adapter.max_batch_size(baseline) == 3
    adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=20, trial_dir=tmp_path / "ok"
    )
    with pytest.raises(CandidateRefused, match=r"batch_size 4 .* holds 3.*StopIteration"):
        adapter.render(
            baseline, {"batch_size": 4}, gradient_accumulation_steps=1, steps=20, trial_dir=tmp_path / "no"
        )
    assert not (tmp_path / "no").exists()
    baseline.num_gpus = 2
    assert adapter.max_batch_size(baseline) == 1


def test_quantization_with_full_fine_tuning_is_refused(tmp_path: Path) -> None:
    adapter = _adapter()
    baseline = adapter.baseline_from_text("model:\n  training_mode: full\n")
    with pytest.raises(CandidateRefused, match="full"):
        adapter.render(
            baseline,
            {"quantization": "int8-quanto"},
            gradient_accumulation_steps=1,
            steps=20,
            trial_dir=tmp_path / "t",
        )


def test_no_config_is_a_usage_error_that_says_what_to_do() -> None:
    with pytest.raises(UsageError, match="autotune plan"):
        _adapter().load_baseline(None)


def test_training_command_is_the_full_run(tmp_path: Path) -> None:
    adapter = _adapter()
    command = adapter.training_command(tmp_path / "best.yaml")
    assert (
        command
        == f"cd {FAKE_TRAINER.resolve()} && uv run python scripts/train.py {(tmp_path / 'best.yaml').resolve()}"
    )


def test_hook_option_puts_the_hook_on_pythonpath(tmp_path: Path) -> None:
    adapter = _adapter(hook=True)
    baseline = adapter.baseline_from_text("optimization:\n  batch_size: 1\n")
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=20, trial_dir=tmp_path / "t")
    hook_dir = Path(__file__).resolve().parents[3] / "trials" / "hook"
    if hook_dir.is_dir():
        assert spec.env["PYTHONPATH"].split(os.pathsep)[0] == str(hook_dir)
        assert spec.env["AUTOTUNE_HOOK_FILE"] == str((tmp_path / "t" / "hook.jsonl").resolve())
    else:
        assert "PYTHONPATH" not in spec.env


LTX2_CONFIG = """\
model:
  model_path: m.safetensors
  training_mode: lora
optimization:
  steps: 2000
  batch_size: 1
  gradient_accumulation_steps: 1
  optimizer_type: adamw8bit
  enable_gradient_checkpointing: true
acceleration:
  quantization: int8-quanto
validation:
  samples:
    - prompt: a cat
  interval: 100
  skip_initial_validation: false
checkpoints:
  interval: 250
output_dir: outputs/x
"""


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        pytest.param({}, None, id="columns-honoured"),
        pytest.param({"FAKE_LTX2_WRAP": "1"}, None, id="rich-wrapped-at-80"),
        pytest.param({"COLUMNS": ""}, None, id="columns-unset"),
        pytest.param(
            {"FAKE_LTX2_RANK": "0", "FAKE_LTX2_WRAP": "1", "FAKE_LTX2_PROCESSES": "2"},
            0,
            id="rank-prefix-wrapped",
        ),
        pytest.param({"FAKE_LTX2_PLAIN": "1"}, None, id="plain"),
    ],
)
def test_fake_trainer_output_is_read_right(tmp_path: Path, env: dict[str, str], rank: int | None) -> None:
    adapter = _adapter(launcher=[sys.executable])
    baseline = adapter.baseline_from_text(LTX2_CONFIG)
    trial_dir = tmp_path / "trial"
    spec = adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=2, steps=80, trial_dir=trial_dir
    )
    done = _run(spec, FAKE_LTX2_STEP_TIMES="3.0,1.0,1.5,1.0", FAKE_LTX2_PEAK_GB="31.25", **env)
    assert done.returncode == 0, done.stderr
    if env.get("FAKE_LTX2_WRAP") or "COLUMNS" in env:
        assert "Time/Step:      " in done.stdout  # really wrapped
    metrics = adapter.read_metrics(trial_dir, done.stdout + done.stderr)
    # The trainer's own figure: the mean of its Step lines after the first window (1.0, 1.5, 1.0).
    assert metrics.trainer_step_time_s == pytest.approx(3.5 / 3)
    assert metrics.trainer_samples_per_s == pytest.approx(4.0 / (3.5 / 3))  # batch 2 x accumulation 2
    # The verdict's: the hook's every optimizer step (the fake writes them), steps 21..79 (step 80
    # timed the validation pass): 20 of 1.0 s, 20 of 1.5 s, 19 of 1.0 s.
    assert metrics.timed_by == "hook" and len(metrics.step_times_s) == 79
    assert metrics.step_time_s == pytest.approx(69 / 59)
    assert metrics.samples_per_s == pytest.approx(4.0 / (69 / 59))
    # The trial's validation pass peaks 15 % above training; the card's cache keeps it.
    assert metrics.trainer_peak_vram_gb == round(31.25 * 1.15, 2)
    assert metrics.steps_per_s == pytest.approx(round(80 / (20 * 6.5), 2))
    assert metrics.losses == [0.1234] * 4 and not metrics.nan_loss
    # The real trainer's path (trainer.py:941-945), and no training state (the recipe turns it off).
    assert (trial_dir / "output" / "checkpoints" / "lora_weights_step_00080.safetensors").is_file()
    assert not list((trial_dir / "output" / "checkpoints").glob("training_state_*"))
    # Read back from the runner's log files when no output is handed over.
    (trial_dir / "stdout.log").write_text(done.stdout)
    assert adapter.read_metrics(trial_dir, "").trainer_step_time_s == pytest.approx(3.5 / 3)


def test_fake_trainer_nan_and_truncated_run(tmp_path: Path) -> None:
    adapter = _adapter(launcher=[sys.executable])
    baseline = adapter.baseline_from_text(LTX2_CONFIG)
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=100, trial_dir=tmp_path / "t")
    done = _run(spec, FAKE_LTX2_LOSS="nan", FAKE_LTX2_STOP_AFTER="3", FAKE_LTX2_WRAP="1")
    assert done.returncode == 1
    metrics = adapter.read_metrics(tmp_path / "t", done.stdout + done.stderr)
    # The hook's every optimizer step up to the stop (3 Step lines, 20 steps each); the log's NaN counts.
    assert metrics.nan_loss and len(metrics.step_times_s) == 60
    assert metrics.trainer_peak_vram_gb is None  # no statistics block


def test_a_plans_baseline_names_the_package_and_launch_mode(tmp_path: Path) -> None:
    pkg = _checkout(tmp_path)
    adapter = get_adapter("ltx2")
    baseline = adapter.baseline_from_text("optimization:\n  batch_size: 1\n")
    baseline.extra.update(package_dir=str(pkg), launch_mode="fsdp")
    baseline.num_gpus = 4
    spec = adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=20, trial_dir=tmp_path / "t")
    assert spec.cwd == pkg.resolve()
    assert list(spec.argv[:8]) == [*UV_ACCELERATE, *FSDP, "--num_processes", "4"]


def test_through_the_runner_the_logs_are_read_back(tmp_path: Path) -> None:
    """The adapter and the trial runner agree: render, run_trial, read_metrics from its log files."""
    from autotune.execution.runner import RunLimits, run_trial

    adapter = _adapter(launcher=[sys.executable])
    baseline = adapter.baseline_from_text(LTX2_CONFIG)
    trial_dir = tmp_path / "trial-0001"
    spec = adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=60, trial_dir=trial_dir
    )
    result = run_trial(spec, trial_dir, RunLimits(wall_timeout_s=60, stall_timeout_s=30))
    assert result.returncode == 0
    metrics = adapter.read_metrics(trial_dir, "")  # from stdout.log / stderr.log
    # The hook's 60 steps less the one after the validation pass; the log's lines at 20, 40, 60.
    assert len(metrics.step_times_s) == 59 and metrics.step_time_s == 1.0
    assert metrics.trainer_step_time_s == 1.0 and metrics.timed_by == "hook"
    assert metrics.trainer_peak_vram_gb == round(45.68 * 1.15, 2)  # the trial's validation pass
    assert adapter.read_metrics(trial_dir, result.output_tail).trainer_step_time_s == 1.0


FLOW_BASELINE = """\
# An LTX-2 config written in flow style (valid YAML; our line editor used to break it).
model: {model_path: /models/ltx-2.safetensors, training_mode: lora}  # the weights
optimization: {batch_size: 1, steps: 40, gradient_accumulation_steps: 1,
  optimizer_type: "adamw8bit", enable_gradient_checkpointing: True}
acceleration: {quantization: none, mixed_precision_mode: bf16}
validation: {interval: 100, prompts: ["a cat", "a dog"]}
defaults: &ckpt {interval: 500, keep_last_n: 2}
checkpoints: {<<: *ckpt}
output_dir: outputs/flow
"""


@pytest.mark.parametrize(("params", "accum"), CANDIDATES)
def test_flow_style_baseline_renders_trials_that_parse_to_the_intended_values(
    tmp_path: Path, params: dict[str, object], accum: int
) -> None:
    adapter = _adapter()
    path = tmp_path / "base.yaml"
    path.write_text(FLOW_BASELINE)
    baseline = adapter.load_baseline(path)
    trial_dir = tmp_path / "trial"
    adapter.render(baseline, params, gradient_accumulation_steps=accum, steps=60, trial_dir=trial_dir)
    text = (trial_dir / "config.yaml").read_text()
    after = dict(dotted_items(load_yaml(text)))
    expected = {
        KNOB_KEYS["optimizer"]: params["optimizer"],
        KNOB_KEYS["batch_size"]: params["batch_size"],
        KNOB_KEYS["gradient_checkpointing"]: params["gradient_checkpointing"],
        GRAD_ACCUM_KEY: accum,
        **dict(trial_recipe(baseline.data, 60, trial_dir.resolve())),
    }
    for key, value in expected.items():
        assert after[key] == value, key
    quant = after[KNOB_KEYS["quantization"]]
    assert quant == ("none" if params["quantization"] == "none" else params["quantization"])
    assert "# the weights" in text and text.startswith("# An LTX-2 config")
    assert after["model.model_path"] == "/models/ltx-2.safetensors"
    # A key merged in from an anchor is overridden in its own mapping; the anchor keeps its value.
    assert (after["checkpoints.interval"], after["checkpoints.keep_last_n"]) == (None, 2)
    assert after["defaults.interval"] == 500
    assert adapter.baseline_params(adapter.baseline_from_text(text))["batch_size"] == params["batch_size"]


def test_write_config_keeps_the_users_spelling(tmp_path: Path) -> None:
    adapter = _adapter()
    path = tmp_path / "base.yaml"
    path.write_text(FLOW_BASELINE)
    baseline = adapter.load_baseline(path)
    params = {
        "quantization": "none",
        "optimizer": "adamw8bit",
        "batch_size": 4,
        "gradient_checkpointing": True,
    }
    text = adapter.final_config(baseline, params, gradient_accumulation_steps=1)
    assert text == FLOW_BASELINE.replace("batch_size: 1,", "batch_size: 4,")  # `none`, `True`, quotes kept


# sha256 prefixes of each real config and of what main rendered from it before flow-style support
# (trial configs of two candidates and their final configs): block-style files stay byte-identical.
BLOCK_STYLE_RENDERS = {
    "i2v_lora.yaml": ("877d76897236d98f", "d58e81277b13b934"),
    "t2v_lora.yaml": ("79aef1d26bd0d76a", "3fb7ace87e35adf3"),
    "t2v_lora_low_vram.yaml": ("f64254f21429d51e", "9aef661ca41e78b5"),
    "v2v_ic_lora.yaml": ("76e8ce1bf6589fbd", "ade6a9fe806877b8"),
}


NO_RESUME_LINE = "  no_resume: true\n"


def test_real_block_style_configs_render_byte_identical_to_before(
    ltx2_fixtures: Path, tmp_path: Path
) -> None:
    # Recorded before trials kept the baseline's validation pass: the opt-out renders as then.
    adapter = _adapter(trial_validation=False)
    checked = 0
    for name, (config_sha, render_sha) in BLOCK_STYLE_RENDERS.items():
        config = ltx2_fixtures / name
        if not config.is_file() or hashlib.sha256(config.read_bytes()).hexdigest()[:16] != config_sha:
            continue  # a different copy of the fixtures: nothing recorded to compare with
        baseline = adapter.load_baseline(config)
        digest = hashlib.sha256()
        for i, (params, accum) in enumerate(CANDIDATES):
            trial_dir = tmp_path / config.stem / f"t{i}"
            adapter.render(baseline, params, gradient_accumulation_steps=accum, steps=60, trial_dir=trial_dir)
            rendered = (trial_dir / "config.yaml").read_text()
            # The recipe gained checkpoints.no_resume after the hashes were recorded:
            # the one line it adds is taken out, everything else must be as before.
            assert rendered.count(NO_RESUME_LINE) == 1, name
            rendered = rendered.replace(NO_RESUME_LINE, "")
            digest.update(rendered.replace(str(trial_dir.resolve()), "<TRIAL>").encode())
            digest.update(adapter.final_config(baseline, params, gradient_accumulation_steps=accum).encode())
        assert digest.hexdigest()[:16] == render_sha, name
        checked += 1
    if not checked:
        pytest.skip("the LTX-2 fixture configs differ from the recorded ones")


@pytest.mark.parametrize("validation", [True, False])
def test_without_cuda_the_validation_pass_loads_the_text_encoder_without_8bit(
    ltx2_fixtures: Path, tmp_path: Path, validation: bool
) -> None:
    """The real low-VRAM config validates with ``load_text_encoder_in_8bit: true``, which the real
    trainer refuses without CUDA (gemma_8bit.py:81-86): a trial on such a host turns it off and the
    adapter says so; with CUDA, or without the validation pass, the line stays as written."""
    adapter = _adapter(trial_validation=validation)
    baseline = adapter.load_baseline(ltx2_fixtures / "t2v_lora_low_vram.yaml")
    assert baseline.data["acceleration"]["load_text_encoder_in_8bit"] is True
    host, changes = adapter.without_cuda(baseline)
    assert bool(changes) is validation
    if validation:
        assert "load_text_encoder_in_8bit: false" in changes[0] and "gemma_8bit.py:81-86" in changes[0]
    for name, base in (("cpu", host), ("cuda", baseline)):
        adapter.render(base, {}, gradient_accumulation_steps=1, steps=10, trial_dir=tmp_path / name)
        rendered = load_yaml((tmp_path / name / "config.yaml").read_text())
        eight_bit = rendered["acceleration"]["load_text_encoder_in_8bit"]
        assert eight_bit is not (name == "cpu" and validation), name
        assert (rendered["validation"]["interval"] == 9) is validation
    # The standard config loads no 8-bit text encoder: nothing to change.
    assert adapter.without_cuda(adapter.load_baseline(ltx2_fixtures / "t2v_lora.yaml"))[1] == []


@pytest.mark.torch
def test_a_small_bucket_is_linked_for_every_step_of_the_trial(tmp_path: Path) -> None:
    """6 samples at batch 4: a view of one batch would restart the trainer's loader (drop_last,
    trainer.py:218-222, 685-693) on every step and time the restart; the view serves the whole
    trial in one pass."""
    import torch

    root = tmp_path / "data"
    for i in range(6):
        for source in ("latents", "conditions"):
            (root / source).mkdir(parents=True, exist_ok=True)
        lat = torch.zeros(128, 3, 4, 4, dtype=torch.bfloat16)
        torch.save(
            {"latents": lat, "num_frames": 3, "height": 4, "width": 4, "fps": 24.0},
            root / "latents" / f"s{i}.pt",
        )
        torch.save({"prompt_embeds": torch.zeros(2, 4)}, root / "conditions" / f"s{i}.pt")
    adapter = _adapter(trial_validation=False)
    baseline = adapter.baseline_from_text(
        f"optimization: {{steps: 2000, batch_size: 1}}\ndata: {{preprocessed_data_root: {root}}}\n"
        "model: {training_mode: lora}\ntraining_strategy: {name: text_to_video, with_audio: false}\n"
    )
    steps, ga, batch = 10, 2, 4
    adapter.render(
        baseline, {"batch_size": batch}, gradient_accumulation_steps=ga, steps=steps, trial_dir=tmp_path / "t"
    )
    linked = sorted((tmp_path / "t" / "data-view" / "latents").iterdir())
    assert all(p.is_symlink() for p in linked)
    batches_per_pass = len(linked) // batch  # the loader's len with drop_last
    assert batches_per_pass >= steps * ga + 1  # every micro-step, and accelerate's prefetch
    assert len({p.resolve() for p in linked}) == 6
