"""The diffusion-pipe adapter: DeepSpeed's step lines, the largest bucket, the trial recipe, the
winner's config, the knobs a config can turn, and the fake trainer run through the rendered command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.config.tomledit import TomlConfig, load_toml_data
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.trainers import get_adapter
from autotune.trainers.base import Baseline, Winner
from autotune.trainers.dpipe.adapter import DiffusionPipeAdapter
from autotune.trainers.dpipe.data import keep_largest_bucket, largest_bucket
from autotune.trainers.kit.bucket import Bucket
from autotune.trainers.kit.readers.dslog import read_deepspeed_steps
from tests.helpers import FAKES

FAKE_DIR = FAKES / "diffusion-pipe"
KNOBS = ["blocks_to_swap", "transformer_dtype", "activation_checkpointing", "optimizer", "batch_size"]

#: Shaped after examples/wan_14b_min_vram.toml and examples/dataset.toml @ 8f83dbf (comments kept).
MAIN = """\
# This configuration trains Wan 14b t2v.

# change this
output_dir = '{tmp}/runs-of-mine'
# and this
dataset = '{dataset}'

# training settings
epochs = 1000
micro_batch_size_per_gpu = 1
pipeline_stages = 1
gradient_accumulation_steps = 1
gradient_clipping = 1
warmup_steps = 10

# eval settings
eval_every_n_epochs = 1
eval_before_first_step = true
eval_micro_batch_size_per_gpu = 1
eval_gradient_accumulation_steps = 1

# misc settings
save_every_n_epochs = 5
checkpoint_every_n_minutes = 120
activation_checkpointing = 'unsloth'   # offloads to RAM
partition_method = 'parameters'
save_dtype = 'bfloat16'
caching_batch_size = 1
steps_per_print = 1
video_clip_mode = 'single_beginning'
blocks_to_swap = 32

[model]
type = 'wan'
ckpt_path = '{tmp}/Wan2.1-T2V-14B'
dtype = 'bfloat16'
transformer_dtype = 'float8'
timestep_sample_method = 'logit_normal'

[adapter]
type = 'lora'
rank = 32
dtype = 'bfloat16'

[optimizer]
type = 'AdamW8bitKahan'
lr = 2e-5
betas = [0.9, 0.99]
weight_decay = 0.01
stabilize = false
"""
DATASET = """\
# Resolutions to train on, given as the side length of a square image.
resolutions = [256, 512]
enable_ar_bucket = true
min_ar = 0.5
max_ar = 2.0
num_ar_buckets = 7
# There will always be a frame bucket of 1 for images.
frame_buckets = [1, 17, 33]

[[directory]]
# Path to directory of images/videos
path = '{tmp}/clips'
num_repeats = 1
"""


def write_dpipe_setup(tmp: Path, *, layers: int = 40, dataset: str = DATASET, main: str = MAIN) -> Path:
    """A Wan checkpoint's config.json, a clip folder, a dataset TOML and the main TOML; returns the main."""
    ckpt = tmp / "Wan2.1-T2V-14B"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps({"model_type": "t2v", "dim": 5120, "num_layers": layers}))
    (tmp / "clips").mkdir(exist_ok=True)
    (tmp / "video.toml").write_text(dataset.format(tmp=tmp))
    path = tmp / "wan.toml"
    path.write_text(main.format(tmp=tmp, dataset=tmp / "video.toml"))
    return path


def _adapter(**options: Any) -> DiffusionPipeAdapter:
    adapter = get_adapter("diffusion-pipe", trainer_dir=FAKE_DIR, launcher=[sys.executable], **options)
    assert isinstance(adapter, DiffusionPipeAdapter)
    return adapter


def _setup(tmp: Path, **kwargs: Any) -> tuple[DiffusionPipeAdapter, Baseline]:
    adapter = _adapter()
    return adapter, adapter.load_baseline(write_dpipe_setup(tmp, **kwargs))


# --- DeepSpeed's step lines -------------------------------------------------------------------------

# deepspeed/runtime/pipe/engine.py:400-406 @ 38327e0:
#   f'steps: {self.global_steps} loss: {self.agg_train_loss:0.4f} '
#   + f'{loss_name}: {loss_value.item():0.4f} ' per additional loss
#   + f'iter time (s): {iter_time:0.3f} samples/sec: {tput:0.3f}'
STEP = "steps: {n} loss: 0.{n:04d} iter time (s): {t:.3f} samples/sec: {r:.3f}"


def _lines(times: list[float], batch: int = 2) -> str:
    return "\n".join(STEP.format(n=i + 1, t=t, r=batch / t) for i, t in enumerate(times))


@pytest.mark.parametrize(
    ("text", "step_time", "samples_per_s", "losses"),
    [
        (_lines([9.0, 2.0, 2.0, 2.0]), 2.0, 1.0, [0.0001, 0.0002, 0.0003, 0.0004]),
        # warm-up steps (the first 20 of a run) are left out once enough steps follow
        (_lines([9.0] * 20 + [4.0] * 20, batch=8), 4.0, 2.0, None),
        # additional losses between the loss and the time (engine.py:402-404)
        (
            "steps: 3 loss: 0.5000 mse: 0.4000 kl: 0.1000 iter time (s): 1.500 samples/sec: 2.667",
            1.5,
            2.667,
            [0.5],
        ),
        # a [rank N] prefix, \r-separated bar noise around it, and a non-finite loss
        (
            "x\r[2026-01-01 00:00:00,000] [INFO] steps: 1 loss: nan iter time (s): 3.000 samples/sec: 0.333\r",
            3.0,
            0.333,
            [math.nan],
        ),
        ("steps: 1 loss: 0.1234 iter time (s): 0.000 samples/sec: inf", None, None, [0.1234]),
        ("Global batch size = 2\nSaving model to directory step5\nTRAINING COMPLETE!", None, None, None),
        ("steps: 12 loss: 0.12", None, None, None),  # cut off mid-line
    ],
)
def test_deepspeed_step_lines(
    text: str, step_time: float | None, samples_per_s: float | None, losses: list[float] | None
) -> None:
    got = read_deepspeed_steps(text)
    if losses is None and step_time is None:
        assert got is None or got.step_time_s is None
        return
    assert got is not None
    assert got.step_time_s == (pytest.approx(step_time) if step_time is not None else None)
    assert got.samples_per_s == (pytest.approx(samples_per_s) if samples_per_s is not None else None)
    if losses is not None:
        assert len(got.losses) == len(losses)
        assert all(
            (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)
            for a, b in zip(got.losses, losses, strict=True)
        )


def test_reader_takes_garbage() -> None:
    assert read_deepspeed_steps(b"steps: 1".decode() + "\x00" * 10) is None
    assert read_deepspeed_steps(None) is None  # type: ignore[arg-type]


# --- the largest bucket -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dataset", "expected"),
    [
        ({"resolutions": [512], "directory": [{"path": "a"}]}, Bucket(512, 512, 1)),
        (
            {"resolutions": [256, 512], "frame_buckets": [1, 33], "directory": [{"path": "a"}]},
            Bucket(512, 512, 33),
        ),
        (
            {"resolutions": [[1280, 720], 512], "frame_buckets": [33], "directory": [{"path": "a"}]},
            Bucket(1280, 720, 33),
        ),
        # a directory's own keys override the top level's (utils/dataset.py:458-508)
        (
            {
                "resolutions": [512],
                "frame_buckets": [1, 17],
                "directory": [
                    {"path": "a"},
                    {"path": "b", "frame_buckets": [1, 65], "resolutions": [[448, 576]]},
                ],
            },
            Bucket(448, 576, 65),
        ),
        # size buckets [w, h, frames] replace resolutions and frame buckets (cosmos_dataset.toml)
        (
            {"size_buckets": [[1024, 1024, 1], [640, 480, 57], [512, 512, 97]], "directory": [{"path": "a"}]},
            Bucket(512, 512, 97),  # 25.4 M pixel-frames against 640x480x57 (17.5 M)
        ),
    ],
)
def test_largest_bucket(dataset: dict[str, Any], expected: Bucket) -> None:
    assert largest_bucket(dataset) == expected


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ({"resolutions": [512]}, "no \\[\\[directory\\]\\]"),
        ({"directory": [{"path": "a"}]}, "no resolutions"),
        ({"resolutions": ["big"], "directory": [{"path": "a"}]}, "side length"),
        ({"resolutions": [512], "frame_buckets": "33", "directory": [{"path": "a"}]}, "frame_buckets"),
        ({"size_buckets": [[512, 512]], "directory": [{"path": "a"}]}, "width, height, frames"),
    ],
)
def test_largest_bucket_refuses_what_the_trainer_would(dataset: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        largest_bucket(dataset, "ds.toml")


def test_keep_largest_bucket_edits_every_scope_and_keeps_comments() -> None:
    text = (
        "# top\nresolutions = [256, 512]  # areas\nframe_buckets = [1, 33]\n\n"
        "[[directory]]\npath = 'a'  # mine\n\n[[directory]]\npath = 'b'\nframe_buckets = [1, 65]\n"
    )
    cfg = TomlConfig(text, "ds.toml")
    assert keep_largest_bucket(cfg) == Bucket(512, 512, 65)
    out = cfg.text
    assert "# top\n" in out and "# areas" in out and "path = 'a'  # mine" in out
    data = load_toml_data(out, "out")
    assert data["resolutions"] == [512] and data["frame_buckets"] == [33]
    assert data["directory"][1]["frame_buckets"] == [65]


# --- rendering, the recipe, the winner's config ---------------------------------------------------


def _changed_lines(before: str, after: str) -> tuple[set[str], set[str]]:
    a, b = set(before.splitlines()), set(after.splitlines())
    return a - b, b - a


def test_render_sets_knobs_and_recipe_and_nothing_else(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path)
    user_files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    trial = tmp_path / "trial-0003"
    spec = adapter.render(
        baseline,
        {"blocks_to_swap": 36, "batch_size": 3, "transformer_dtype": "bfloat16"},
        gradient_accumulation_steps=2,
        steps=9,
        trial_dir=trial,
    )
    assert {p: p.read_bytes() for p in user_files} == user_files  # the user's files untouched
    # README.md:118: deepspeed --num_gpus=1 train.py --deepspeed --config CONFIG, from the checkout
    assert spec.argv == (
        sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus=1", "train.py", "--deepspeed",
        "--config", str(trial.resolve() / "config.toml"),
    )  # fmt: skip
    assert spec.cwd == FAKE_DIR.resolve()
    assert spec.env["AUTOTUNE_METRICS_FILE"] == str(trial.resolve() / "trainer-metrics.json")
    assert spec.env["AUTOTUNE_HOOK_FILE"] == str(trial.resolve() / "hook.jsonl")
    text = (trial / "config.toml").read_text()
    gone, new = _changed_lines(baseline.text, text)
    assert gone == {
        f"output_dir = '{tmp_path}/runs-of-mine'",
        f"dataset = '{tmp_path / 'video.toml'}'",
        "micro_batch_size_per_gpu = 1",
        "gradient_accumulation_steps = 1",
        "eval_every_n_epochs = 1",
        "eval_before_first_step = true",
        "save_every_n_epochs = 5",
        "checkpoint_every_n_minutes = 120",
        "blocks_to_swap = 32",
        "transformer_dtype = 'float8'",
    }
    assert new == {  # each in the quoting the user's file had (literal here)
        f"output_dir = '{trial.resolve()}/output'",
        f"dataset = '{trial.resolve()}/dataset.toml'",
        "micro_batch_size_per_gpu = 3",
        "gradient_accumulation_steps = 2",
        "eval_before_first_step = false",
        "blocks_to_swap = 36",
        "transformer_dtype = 'bfloat16'",
        "max_steps = 9",
        "save_every_n_steps = 9",
    }
    assert "activation_checkpointing = 'unsloth'   # offloads to RAM" in text
    dataset = load_toml_data((trial / "dataset.toml").read_text(), "ds")
    assert dataset["resolutions"] == [512] and dataset["frame_buckets"] == [33]
    # each clip repeated to a global batch (3 x 2): no bucket short of one (dataset.py:392-396)
    assert dataset["directory"][0]["num_repeats"] == 6
    assert "# There will always be a frame bucket of 1 for images." in (trial / "dataset.toml").read_text()
    record = json.loads((trial / "adapter.json").read_text())
    assert record["data_bucket"] == "512x512 px area, 33 frames"
    assert record["effective_batch"] == 6


def test_recipe_keeps_enough_epochs_and_turns_off_wandb(tmp_path: Path) -> None:
    main = MAIN.replace("epochs = 1000", "epochs = 3") + "\n[monitoring]\nenable_wandb = true\n"
    adapter, baseline = _setup(tmp_path, main=main)
    adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=40, trial_dir=tmp_path / "t")
    data = load_toml_data((tmp_path / "t" / "config.toml").read_text(), "t")
    assert data["epochs"] == 40 and data["max_steps"] == 40 and data["monitoring"]["enable_wandb"] is False


def test_relative_dataset_path_is_read_from_the_checkout(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path)
    cfg = TomlConfig(baseline.text)
    cfg.set("dataset", "examples/missing.toml")
    (tmp_path / "rel.toml").write_text(cfg.text)
    with pytest.raises(ConfigError, match="read from the diffusion-pipe checkout"):
        adapter.render(
            adapter.load_baseline(tmp_path / "rel.toml"),
            {},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / "t",
        )


def test_final_config_changes_only_the_knobs(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path)
    params = {"blocks_to_swap": 0, "transformer_dtype": "float8", "activation_checkpointing": True,
              "optimizer": "adamw_optimi", "batch_size": 4}  # fmt: skip
    text = adapter.final_config(baseline, params, gradient_accumulation_steps=2)
    gone, new = _changed_lines(baseline.text, text)
    # blocks_to_swap 0 swaps nothing (train.py:576): the line goes
    assert gone == {"micro_batch_size_per_gpu = 1", "gradient_accumulation_steps = 1", "blocks_to_swap = 32",
                    "activation_checkpointing = 'unsloth'   # offloads to RAM", "type = 'AdamW8bitKahan'"}  # fmt: skip
    assert new == {"micro_batch_size_per_gpu = 4", "gradient_accumulation_steps = 2",
                   "activation_checkpointing = true   # offloads to RAM", "type = 'adamw_optimi'"}  # fmt: skip
    command = adapter.training_command(tmp_path / "best.toml", Winner(baseline=baseline))
    assert command == (
        f"cd {FAKE_DIR.resolve()} && {sys.executable} -m deepspeed.launcher.runner --num_gpus=1 train.py "
        f"--deepspeed --config {(tmp_path / 'best.toml').resolve()}"
    )
    assert (
        get_adapter("diffusion-pipe", trainer_dir=FAKE_DIR)
        .training_command(Path("/x/best.toml"))
        .endswith("&& deepspeed --num_gpus=1 train.py --deepspeed --config /x/best.toml")
    )


def test_optimizer_spelling_matches_case_insensitively(tmp_path: Path) -> None:
    main = MAIN.replace("type = 'AdamW8bitKahan'", "type = 'adamw8bitkahan'")
    adapter, baseline = _setup(tmp_path, main=main)
    assert adapter.baseline_params(baseline)["optimizer"] == "AdamW8bitKahan"
    text = adapter.final_config(baseline, {"optimizer": "AdamW8bitKahan"}, gradient_accumulation_steps=1)
    assert text == baseline.text  # train.py:656 lowercases it: the config's own spelling stays


# --- what a config can turn ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "out"),
    [
        ({}, []),
        ({"model.type": "sdxl"}, ["blocks_to_swap", "transformer_dtype"]),  # neither: models/base.py:438
        ({"adapter": None}, ["blocks_to_swap"]),  # train.py:578: LoRA only
        ({"pipeline_stages": 2}, ["blocks_to_swap"]),  # train.py:577
        ({"optimizer.type": "Prodigy"}, ["optimizer"]),  # not one of the knob's values
        ({"model.transformer_dtype": "float8_e5m2"}, ["transformer_dtype"]),
        ({"model.transformer_dtype": None}, []),  # absent: [model] dtype bfloat16, a listed value
    ],
)
def test_knobs_in_play(tmp_path: Path, edit: dict[str, Any], out: list[str]) -> None:
    adapter, baseline = _setup(tmp_path)
    cfg = TomlConfig(baseline.text)
    for key, value in edit.items():
        cfg.set(key, value)
    (tmp_path / "edited.toml").write_text(cfg.text)
    edited = adapter.load_baseline(tmp_path / "edited.toml")
    assert adapter.knobs_in_play(edited, KNOBS) == [k for k in KNOBS if k not in out]


@pytest.mark.parametrize(
    ("model", "layers", "limit"),
    [
        ("wan", 40, 38),
        ("wan", 30, 28),
        ("flux", 40, 34),
        ("qwen_image", 40, 58),
        ("hunyuan-video", 40, 36),  # 37 asks 18 double and 39 single of 18 and 38 (hunyuan_video.py:505-508)
        ("ltx2", 40, None),
    ],
)
def test_swap_limit_per_model(tmp_path: Path, model: str, layers: int, limit: int | None) -> None:
    adapter, baseline = _setup(
        tmp_path, layers=layers, main=MAIN.replace("type = 'wan'", f"type = '{model}'")
    )
    assert adapter.knob_limits(baseline) == ({} if limit is None else {"blocks_to_swap": limit})


def test_refused_candidates(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path, layers=30)
    assert adapter.baseline_params(baseline)["blocks_to_swap"] == 28  # 32 snapped to the 1.3B's maximum
    with pytest.raises(CandidateRefused, match="at most 28"):
        adapter.render(
            baseline, {"blocks_to_swap": 29}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t"
        )
    cfg = TomlConfig(baseline.text)
    cfg.set("adapter", None)
    (tmp_path / "full.toml").write_text(cfg.text)
    with pytest.raises(CandidateRefused, match="only when training a LoRA"):
        adapter.render(adapter.load_baseline(tmp_path / "full.toml"), {"blocks_to_swap": 8},
                       gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t2")  # fmt: skip
    with pytest.raises(ConfigError, match="DTYPE_MAP"):
        adapter.render(
            baseline,
            {"transformer_dtype": "nf4"},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / "t3",
        )


def test_bad_baselines_are_named(tmp_path: Path) -> None:
    adapter = _adapter()
    (tmp_path / "list.toml").write_text(
        MAIN.replace("micro_batch_size_per_gpu = 1", "micro_batch_size_per_gpu = [[512, 4], [1024, 1]]")
    )
    with pytest.raises(ConfigError, match="per-resolution list"):
        adapter.load_baseline(tmp_path / "list.toml")
    (tmp_path / "nodtype.toml").write_text(
        MAIN.replace("dtype = 'bfloat16'\ntransformer_dtype", "transformer_dtype")
    )
    with pytest.raises(ConfigError, match=r"\[model\] has no dtype"):
        adapter.load_baseline(tmp_path / "nodtype.toml")
    (tmp_path / "bad.toml").write_text("epochs = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        adapter.load_baseline(tmp_path / "bad.toml")
    with pytest.raises(UsageError, match="--config"):
        adapter.load_baseline(None)
    with pytest.raises(UsageError, match=r"no train\.py"):
        get_adapter("diffusion-pipe", trainer_dir=tmp_path).render(
            adapter.load_baseline(write_dpipe_setup(tmp_path)), {}, gradient_accumulation_steps=1, steps=3,
            trial_dir=tmp_path / "t",
        )  # fmt: skip


# --- the fake, run as a trial runs --------------------------------------------------------------------


def _run(spec: Any, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return subprocess.run(
        list(spec.argv), cwd=spec.cwd, env={**env, **spec.env, **(extra_env or {})},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.process
def test_fake_trains_the_trial_and_its_numbers_are_read(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path)
    trial = tmp_path / "t"
    spec = adapter.render(
        baseline, {"batch_size": 2}, gradient_accumulation_steps=2, steps=6, trial_dir=trial
    )
    done = _run(spec)
    assert done.returncode == 0, done.stderr
    assert "Global batch size = 4" in done.stdout and "TRAINING COMPLETE!" in done.stdout
    assert done.stdout.count("Saving model to directory") == 1  # one save, at the end
    assert "Running eval" not in done.stdout
    metrics = adapter.read_metrics(trial, done.stdout + done.stderr)
    assert metrics.step_time_s is not None and metrics.samples_per_s == pytest.approx(
        4 / metrics.step_time_s, rel=1e-3
    )
    assert metrics.measured_peak_vram_gb is not None and metrics.losses
    run_dir = next((trial / "output").iterdir())
    trained = json.loads((run_dir / "fake_trained_on.json").read_text())
    assert trained["bucket"] == [512, 512, 33]
    assert trained["host_bytes"] > 0  # swapped blocks and unsloth's activations held in host RAM
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["global_step6", "step6"]


@pytest.mark.process
def test_fake_dies_like_the_real_one(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path)
    spec = adapter.render(
        baseline, {"blocks_to_swap": 0}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "a"
    )
    oom = _run(spec, {"AUTOTUNE_EMULATED_VRAM_GB": "16"})
    assert oom.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory" in oom.stderr
    assert "steps: 1 " not in oom.stdout
    bad = [*spec.argv, "--no-such-flag"]
    flag = subprocess.run(bad, cwd=spec.cwd, capture_output=True, text=True, timeout=60)
    assert flag.returncode == 2 and "unrecognized arguments: --no-such-flag" in flag.stderr
    spec = adapter.render(
        baseline,
        {"optimizer": "adamw_optimi"},
        gradient_accumulation_steps=1,
        steps=3,
        trial_dir=tmp_path / "b",
    )
    cfg = TomlConfig((tmp_path / "b" / "config.toml").read_text())
    cfg.set("optimizer.type", "NoSuchOptim")
    (tmp_path / "b" / "config.toml").write_text(cfg.text)
    unknown = _run(spec)
    assert (
        unknown.returncode == 1
        and "AttributeError: module 'pytorch_optimizer' has no attribute" in unknown.stderr
    )


def test_the_batch_is_credited_not_the_hooks_loader_count(tmp_path: Path) -> None:
    """DeepSpeed counts micro batch x accumulation x ranks (engine.py:399-400), and diffusion-pipe drops
    what does not fill a global batch (utils/dataset.py:392-396 at 8f83dbf): a step trains the batch it
    was rendered with. The hook's loader count (3 here) is not what a step consumed; its time decides."""
    adapter, baseline = _setup(tmp_path)
    trial = tmp_path / "t"
    adapter.render(baseline, {"batch_size": 2}, gradient_accumulation_steps=1, steps=4, trial_dir=trial)
    hook = [
        {"event": "step", "step": n, "step_time_s": 2.0, "samples": 3, "counted": False, "pid": 7}
        for n in range(1, 5)
    ]
    (trial / "hook.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hook))
    assert adapter.read_metrics(trial, _lines([2.0] * 4)).samples_per_s == pytest.approx(1.0)
    assert adapter.read_metrics(trial, "no step lines").samples_per_s == pytest.approx(1.0)


def test_pipeline_stages_split_the_gpus_for_the_effective_batch(tmp_path: Path) -> None:
    """Two GPUs as two pipeline stages train one model copy: DeepSpeed's global batch is micro
    batch x accumulation x the data-parallel world, GPUs / stages (train.py:605, 632)."""
    from dataclasses import replace

    main = MAIN.replace("pipeline_stages = 1", "pipeline_stages = 2")
    adapter, baseline = _setup(tmp_path, main=main)
    assert baseline.data["pipeline_stages"] == 2
    two = replace(baseline, num_gpus=2)
    assert adapter.data_parallel(two) == 1 and adapter.data_parallel(replace(baseline, num_gpus=4)) == 2
    adapter.render(two, {"batch_size": 3}, gradient_accumulation_steps=2, steps=4, trial_dir=tmp_path / "t")
    record = json.loads((tmp_path / "t" / "adapter.json").read_text())
    assert (record["num_gpus"], record["effective_batch"]) == (2, 6)


def test_hunyuan_video_swaps_at_most_36_blocks(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path, main=MAIN.replace("type = 'wan'", "type = 'hunyuan-video'"))
    adapter.render(
        baseline, {"blocks_to_swap": 36}, gradient_accumulation_steps=1, steps=4, trial_dir=tmp_path / "a"
    )
    with pytest.raises(CandidateRefused, match="36"):  # 37: 18 double and 39 single of 18 and 38 allowed
        adapter.render(
            baseline, {"blocks_to_swap": 37}, gradient_accumulation_steps=1, steps=4, trial_dir=tmp_path / "b"
        )


@pytest.mark.parametrize(
    ("own", "swept", "held_back"),
    [
        ("adamw8bit", ("adamw8bit", "adamw"), ()),  # bitsandbytes.optim.AdamW8bit -> torch's AdamW
        ("adamw", ("adamw",), ("adamw8bit",)),  # the 8-bit saver held back, no trial of optimi's
        ("AdamW8bitKahan", ("AdamW8bitKahan", "adamw_optimi"), ()),
        ("adamw_optimi", ("adamw_optimi",), ("AdamW8bitKahan",)),
        ("sgd", None, ()),  # in no family: left as the config has it
    ],
)
def test_the_optimizer_knob_turns_within_the_family_of_the_configs_own(
    tmp_path: Path, own: str, swept: tuple[str, ...] | None, held_back: tuple[str, ...]
) -> None:
    """train.py:668-687 at 8f83dbf: 'adamw' is torch.optim.AdamW, 'adamw8bit' bitsandbytes'
    AdamW8bit, 'adamw_optimi' optimi.AdamW, 'AdamW8bitKahan' optimizers/adamw_8bit.py. A baseline
    relaxes its 8-bit states to its own family's AdamW and never costs a trial of the other's."""
    from autotune.sweep.options import SweepOptions
    from autotune.sweep.setup import plan_sweep

    config = write_dpipe_setup(tmp_path, main=MAIN.replace("type = 'AdamW8bitKahan'", f"type = '{own}'"))
    opts = SweepOptions(
        trainer="diffusion-pipe", config=config, vram_gb=24.0, workdir=tmp_path / "runs",
        trainer_options={"trainer_dir": FAKES / "diffusion-pipe", "launcher": [sys.executable]},
    )  # fmt: skip
    plan = plan_sweep(opts, None)
    if swept is None:
        assert "optimizer" not in plan.space.names and "optimizer" in plan.knobs_left_out
        return
    assert plan.space.knob("optimizer").values == swept
    assert tuple(plan.settings.get("held_back", {}).get("optimizer", ())) == held_back
    assert plan.space.fidelity.get("optimizer") in (swept[-1], None)
