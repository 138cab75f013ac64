"""The musubi-tuner adapter: its launch command and dataset TOML, the short-run recipe, the largest
bucket, the winner's script, the bar it prints, and the fake of ``wan_train_network.py``.

Real formats are quoted from kohya-ss/musubi-tuner @ 30c658c (``path:line`` beside each)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autotune.core.outcome import Outcome, explain
from autotune.errors import CandidateRefused, ConfigError
from autotune.trainers import get_adapter
from autotune.trainers.kit.readers.tqdmbar import parse_bars, read_tqdm_cumulative
from autotune.trainers.musubi.adapter import MusubiAdapter
from autotune.trainers.musubi.data import bucket_size, parse_cache_name
from tests.musubi_setup import FAKE_MUSUBI, make_setup

FAKE_SCRIPT = FAKE_MUSUBI / "src" / "musubi_tuner" / "wan_train_network.py"


def _adapter(**options: Any) -> MusubiAdapter:
    adapter = get_adapter("musubi", launcher=[sys.executable], **options)
    assert isinstance(adapter, MusubiAdapter)
    return adapter


def _fake_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fake_musubi", FAKE_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the training bar (trainer_base.py:1920, 2085-2087, 2116-2118) ---------------------------------

#: tqdm(range(6), smoothing=0, desc="steps") as musubi-tuner draws it: reset after step 1 (its rate is
#: the tail of that step alone), then each rate the mean since the reset; postfix avr_loss.
MUSUBI_BAR = (
    "steps:   0%|          | 0/6 [00:00<?, ?it/s]\r"
    "steps:  17%|█▋        | 1/6 [00:00<00:00, 20.00it/s, avr_loss=0.25]\r"
    "steps:  33%|███▎      | 2/6 [00:03<00:06,  1.50s/it, avr_loss=0.2]\r"
    "steps:  50%|█████     | 3/6 [00:05<00:05,  1.67s/it, avr_loss=0.175]\r"
    "steps:  67%|██████▋   | 4/6 [00:07<00:03,  1.75s/it, avr_loss=0.16]\r"
    "steps:  83%|████████▎ | 5/6 [00:09<00:01,  1.80s/it, avr_loss=0.152]\r"
    "steps: 100%|██████████| 6/6 [00:10<00:00,  1.83s/it, avr_loss=0.148]\r"
    "steps: 100%|██████████| 6/6 [00:11<00:00,  1.83s/it, avr_loss=0.148]\n"
)


def test_the_musubi_bar_reads_as_per_step_times_and_avr_losses() -> None:
    metrics = read_tqdm_cumulative(MUSUBI_BAR)
    assert metrics is not None and metrics.step_time_s is not None
    assert metrics.step_time_s == pytest.approx(2.0, abs=0.03)  # elapsed n * s/it, differenced
    assert metrics.losses == [0.25, 0.2, 0.175, 0.16, 0.152, 0.148]


@pytest.mark.parametrize(
    ("postfix", "loss"),
    [
        (", avr_loss=0.123", 0.123),  # musubi-tuner (trainer_base.py:2117)
        (", avr_loss=1.5e-05", 1.5e-05),
        (", avr_loss=nan", "nan"),
        (", loss=0.5, lr=0.0001", 0.5),  # diffusers
        (", train_loss=0.4, v_num=0", 0.4),  # Lightning
        (", loss_step=0.3", 0.3),
        (", val_loss=0.9", None),  # not a training loss
        (", my_avr_loss=0.7", None),
        (", Keys Scaled=3, Average key norm=0.1, avr_loss=0.2", 0.2),  # with --scale_weight_norms (:2121)
    ],
)
def test_loss_postfixes(postfix: str, loss: object) -> None:
    bars = parse_bars(f"steps:  50%|█████     | 1/2 [00:01<00:01,  1.00s/it{postfix}]\r")
    assert len(bars) == 1
    got = bars[0].step_losses.get(1)
    if loss == "nan":
        assert got is not None and got != got
    else:
        assert got == loss


# --- caches and buckets (image_video_dataset.py:166, 776, 857-895; bucket.py:74-121) ---------------


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("walk_00000-045_0832x0480_wan.safetensors", ("walk", (832, 480), 45)),
        ("my_clip_00012-081_1280x0720_wan.safetensors", ("my_clip", (1280, 720), 81)),
        ("walk_00000-045-01_0832x0480_wan.safetensors", ("walk", (832, 480), 45)),  # section index
        ("cat_1024x1024_wan.safetensors", ("cat", (1024, 1024), 1)),  # an image
        ("walk_wan_te.safetensors", None),  # the text encoder's cache
        ("walk_00000-045_0832x0480_hv.safetensors", None),  # another architecture
        ("notes.txt", None),
    ],
)
def test_cache_names(name: str, parsed: object) -> None:
    assert parse_cache_name(name, "wan") == parsed


@pytest.mark.parametrize(
    ("size", "resolution", "enable", "no_upscale", "bucket"),
    [
        ((1920, 1080), (960, 544), False, False, (960, 544)),  # one bucket: the resolution
        ((832, 480), (832, 480), True, False, (832, 480)),
        ((480, 832), (832, 480), True, False, (480, 832)),
        ((1024, 1024), (832, 480), True, False, (624, 640)),  # nearest aspect among 399360-pixel buckets
        ((500, 300), (832, 480), True, True, (496, 288)),  # smaller and no upscale: to multiples of 16
    ],
)
def test_buckets(
    size: tuple[int, int],
    resolution: tuple[int, int],
    enable: bool,
    no_upscale: bool,
    bucket: tuple[int, int],
) -> None:
    assert bucket_size(size, resolution, enable_bucket=enable, no_upscale=no_upscale) == bucket
    fake = _fake_model()
    assert fake.bucket_of(size, resolution, enable, no_upscale) == bucket  # the fake agrees


# --- the baseline ---------------------------------------------------------------------------------


def test_the_docs_command_is_the_baseline(tmp_path: Path) -> None:
    adapter = get_adapter("musubi")  # no --trainer-python: the command's own accelerate launch
    baseline = adapter.load_baseline(make_setup(tmp_path))
    assert baseline.data["launcher"][:2] == ["accelerate", "launch"]
    assert baseline.data["script"] == "src/musubi_tuner/wan_train_network.py"
    assert baseline.data["cwd"] == str(FAKE_MUSUBI)
    assert adapter.baseline_params(baseline) == {
        "blocks_to_swap": 0,
        "precision": "fp8",
        "gradient_checkpointing": True,
        "gradient_checkpointing_cpu_offload": 0,
        "optimizer": "adamw8bit",
        "split_attn": False,
        "batch_size": 1,
        "gradient_accumulation_steps": 1,
    }
    assert adapter.knob_limits(baseline) == {"blocks_to_swap": 39}
    small = adapter.load_baseline(make_setup(tmp_path / "small", task="t2v-1.3B"))
    assert adapter.knob_limits(small) == {"blocks_to_swap": 29}


def test_hunyuan_video_has_its_own_limit_and_no_fp8_scaled(tmp_path: Path) -> None:
    script = make_setup(tmp_path)
    text = (
        script.read_text()
        .replace("wan_train_network.py", "hv_train_network.py")
        .replace("--task t2v-14B ", "")
    )
    text = text.replace("_wan.safetensors", "_hv.safetensors")
    script.write_text(text)
    for cache in tmp_path.rglob("*_wan*.safetensors"):
        cache.rename(cache.with_name(cache.name.replace("_wan", "_hv")))
    adapter = _adapter()
    baseline = adapter.load_baseline(script)
    # 20 double + 40 single blocks, n // 2 and (n - n // 2) * 2 + 1 of them swapped, at most 19 and
    # 39 (hunyuan_model/models.py:518-519, 680-685): 38 (docs/hunyuan_video.md:409), not the 36 of :238
    assert adapter.knob_limits(baseline) == {"blocks_to_swap": 38}
    with pytest.raises(CandidateRefused, match="swaps at most 38"):
        adapter.render(
            baseline,
            {"blocks_to_swap": 39},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / "t39",
        )
    with pytest.raises(CandidateRefused, match="no --fp8_scaled"):
        adapter.render(
            baseline,
            {"precision": "fp8_scaled"},
            gradient_accumulation_steps=1,
            steps=3,
            trial_dir=tmp_path / "t",
        )


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: t.replace("--dataset_config", "--config_file x.toml --dataset_config"), "--config_file"),
        (lambda t: t.replace("--dataset_config", "--dataset_config_missing"), "no --dataset_config"),
        (lambda t: t.replace("wan_train_network.py", "flux_train.py"), "not a training script"),
        (lambda t: t.replace("dataset.toml", "nowhere.toml"), "cannot read"),
    ],
)
def test_bad_commands_say_why(tmp_path: Path, edit: Any, match: str) -> None:
    script = make_setup(tmp_path)
    script.write_text(edit(script.read_text()))
    with pytest.raises(ConfigError, match=match):
        _adapter().load_baseline(script)


# --- a trial --------------------------------------------------------------------------------------


def test_a_trial_is_the_short_run_recipe_on_the_largest_bucket(tmp_path: Path) -> None:
    script = make_setup(tmp_path / "user")
    before = {p: p.read_bytes() for p in (tmp_path / "user").rglob("*") if p.is_file()}
    adapter = _adapter()
    baseline = adapter.load_baseline(script)
    trial = tmp_path / "trial"
    params = {
        "blocks_to_swap": 36,
        "precision": "bf16",
        "gradient_checkpointing": True,
        "gradient_checkpointing_cpu_offload": 1,
        "batch_size": 2,
    }
    spec = adapter.render(baseline, params, gradient_accumulation_steps=2, steps=7, trial_dir=trial)
    argv = list(spec.argv)
    assert argv[:2] == [sys.executable, "src/musubi_tuner/wan_train_network.py"] and spec.cwd == FAKE_MUSUBI
    for gone in (
        "--max_train_epochs",
        "--save_every_n_epochs",
        "--sample_prompts",
        "--sample_every_n_epochs",
        "--sample_at_first",
        "--fp8_base",
    ):
        assert gone not in argv, gone
    flag = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert flag["--max_train_steps"] == "7" and flag["--output_dir"] == str(trial.resolve() / "output")
    assert flag["--blocks_to_swap"] == "36" and flag["--gradient_accumulation_steps"] == "2"
    assert "--gradient_checkpointing" in argv and "--gradient_checkpointing_cpu_offload" in argv
    assert flag["--dataset_config"] == str(trial.resolve() / "dataset.toml")
    assert flag["--optimizer_type"] == "adamw8bit" and flag["--seed"] == "42"  # the rest as the user has it
    toml = (trial / "dataset.toml").read_text()
    assert "# general configurations (my notes)" in toml and "# recommended to set cache directory" in toml
    assert "batch_size = 2" in toml and "image_directory" not in toml  # the images' dataset left out
    links = sorted(p.name for p in (trial / "cache").iterdir())
    assert links == [  # the one 45-frame clip, linked twice for a full batch of 2
        "autotune1-walk_00000-045_0832x0480_wan.safetensors",
        "autotune1-walk_wan_te.safetensors",
        "walk_00000-045_0832x0480_wan.safetensors",
        "walk_wan_te.safetensors",
    ]
    record = json.loads((trial / "adapter.json").read_text())
    assert record["data_bucket"].startswith("bucket 832x480, 45 frame(s) (the largest of ")
    assert record["effective_batch"] == 4
    assert spec.env["AUTOTUNE_METRICS_FILE"] == str(trial.resolve() / "trainer-metrics.json")
    after = {p: p.read_bytes() for p in (tmp_path / "user").rglob("*") if p.is_file()}
    assert after == before  # the user's command, TOML and caches untouched


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"blocks_to_swap": 40}, "swaps at most 39"),
        ({"precision": "fp4"}, "precision"),
        ({"gradient_checkpointing": "sometimes"}, "gradient_checkpointing"),
        ({"gradient_checkpointing_cpu_offload": 2}, "gradient_checkpointing_cpu_offload"),
        ({"optimizer": "lion"}, "optimizer"),
    ],
)
def test_candidates_it_cannot_run(tmp_path: Path, params: dict[str, Any], match: str) -> None:
    adapter = _adapter()
    baseline = adapter.load_baseline(make_setup(tmp_path))
    with pytest.raises((CandidateRefused, ConfigError), match=match):
        adapter.render(baseline, params, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t")


def test_activation_offload_needs_checkpointing(tmp_path: Path) -> None:
    """trainer_base.py:1608-1609: without --gradient_checkpointing the offload flag does nothing, so
    it is left out and the candidate is the same command as offload 0 (the sweep runs it once)."""
    adapter = _adapter()
    baseline = adapter.load_baseline(make_setup(tmp_path))
    argv = [
        list(adapter.render(baseline, {"gradient_checkpointing": False, "gradient_checkpointing_cpu_offload": n},
                            gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / f"t{n}").argv)
        for n in (0, 1)
    ]  # fmt: skip
    t0, t1 = str((tmp_path / "t0").resolve()), str((tmp_path / "t1").resolve())
    assert [a.replace(t1, t0) for a in argv[1]] == argv[0]
    assert "--gradient_checkpointing_cpu_offload" not in argv[1] and "--gradient_checkpointing" not in argv[1]


def test_no_caches_is_a_config_error_naming_the_cache_scripts(tmp_path: Path) -> None:
    adapter = _adapter()
    baseline = adapter.load_baseline(make_setup(tmp_path))
    for cache in tmp_path.rglob("*.safetensors"):
        if "cache_" in str(cache.parent):
            cache.unlink()
    with pytest.raises(ConfigError, match=r"wan_cache_latents\.py"):
        adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t")


def test_several_gpus(tmp_path: Path) -> None:
    from dataclasses import replace

    script = make_setup(tmp_path)
    own = get_adapter("musubi")
    baseline = replace(own.load_baseline(script), num_gpus=2)
    argv = list(
        own.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "a").argv
    )
    assert argv[:4] == ["accelerate", "launch", "--num_cpu_threads_per_process", "1"]
    assert argv[argv.index("--num_processes") + 1] == "2"
    assert argv.index("--num_processes") < argv.index("src/musubi_tuner/wan_train_network.py")
    python = list(
        _adapter().render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "b").argv
    )
    assert python[:5] == [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2"]
    assert json.loads((tmp_path / "b" / "adapter.json").read_text())["effective_batch"] == 2


# --- the winner -----------------------------------------------------------------------------------


def test_the_winning_script_writes_its_dataset_toml_and_reads_back(tmp_path: Path) -> None:
    adapter = _adapter()
    baseline = adapter.load_baseline(make_setup(tmp_path / "user"))
    params = {
        "blocks_to_swap": 36,
        "precision": "fp8_scaled",
        "gradient_checkpointing": True,
        "gradient_checkpointing_cpu_offload": 1,
        "batch_size": 4,
    }
    text = adapter.final_config(baseline, params, gradient_accumulation_steps=1)
    assert "--max_train_epochs 16" in text and "--sample_at_first" in text  # the full run's own settings
    assert (
        "--blocks_to_swap 36" in text
        and "--fp8_scaled" in text
        and "--gradient_checkpointing_cpu_offload" in text
    )
    toml = tmp_path / "user" / "dataset.autotune.toml"
    assert f"cat > {toml} <<'AUTOTUNE_DATASET_TOML'" in text and f"--dataset_config {toml}" in text
    assert "# general configurations (my notes)" in text and "batch_size = 4" in text
    assert "num_repeats = 2 # images twice" in text  # every other line as it was
    written = tmp_path / "best-config.sh"
    written.write_text(text)
    assert adapter.baseline_params(adapter.load_baseline(written)) == {
        **params,
        "optimizer": "adamw8bit",
        "split_attn": False,
        "gradient_accumulation_steps": 1,
    }
    done = subprocess.run(["bash", "-n", str(written)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    same = adapter.final_config(baseline, {"batch_size": 1}, gradient_accumulation_steps=1)
    assert (
        "AUTOTUNE_DATASET_TOML" not in same
        and f"--dataset_config {tmp_path / 'user' / 'dataset.toml'}" in same
    )


def test_the_optimizer_is_always_spelled_out(tmp_path: Path) -> None:
    """parser_common.py:303-307 defaults --optimizer_type to "", which get_optimizer cannot build
    (trainer_base.py:166,231-243): a trial names AdamW rather than leave the flag out."""
    script = make_setup(tmp_path)
    script.write_text(script.read_text().replace("--optimizer_type adamw8bit ", ""))
    adapter = _adapter()
    baseline = adapter.load_baseline(script)
    assert adapter.baseline_params(baseline)["optimizer"] == "adamw"
    argv = list(
        adapter.render(baseline, {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t").argv
    )
    assert argv[argv.index("--optimizer_type") + 1] == "adamw"


def test_another_optimizer_is_left_alone(tmp_path: Path) -> None:
    script = make_setup(tmp_path)
    script.write_text(script.read_text().replace("--optimizer_type adamw8bit", "--optimizer_type AdaFactor"))
    adapter = _adapter()
    baseline = adapter.load_baseline(script)
    assert "optimizer" not in adapter.knobs_in_play(baseline, ["optimizer", "batch_size"])
    text = adapter.final_config(baseline, {"optimizer": "adamw8bit"}, gradient_accumulation_steps=1)
    assert "--optimizer_type AdaFactor" in text


# --- the fake (tests/fakes/musubi-tuner) -------------------------------------------------------------


def _run_fake(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = [
        "--task",
        "t2v-14B",
        "--dit",
        str(tmp / "dit.safetensors"),
        "--dataset_config",
        str(tmp / "dataset.toml"),
        "--optimizer_type",
        "adamw8bit",
        "--output_dir",
        str(tmp / "output"),
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "FAKE_MUSUBI_"))}
    return subprocess.run(
        [sys.executable, str(FAKE_SCRIPT), *base, *args],
        cwd=FAKE_MUSUBI,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _peak_rss_kib(tmp: Path, *args: str) -> int:
    """The fake's own peak RSS, measured by a fresh parent that has no other children."""
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    base = [
        "--task",
        "t2v-14B",
        "--dit",
        str(tmp / "dit.safetensors"),
        "--dataset_config",
        str(tmp / "dataset.toml"),
        "--optimizer_type",
        "adamw8bit",
        "--output_dir",
        str(tmp / "output"),
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "FAKE_MUSUBI_"))}
    env = {**clean, "FAKE_MUSUBI_HOST_MB_PER_GB": "8"}
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, str(FAKE_SCRIPT), *base, *args],
        cwd=FAKE_MUSUBI, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout.strip())


@pytest.mark.process
def test_the_fake_refuses_what_the_real_one_refuses(tmp_path: Path) -> None:
    make_setup(tmp_path)
    done = _run_fake(tmp_path, "--no_such_flag")
    assert done.returncode == 2 and "unrecognized arguments: --no_such_flag" in done.stderr  # argparse
    done = _run_fake(tmp_path, "--optimizer_type", "")  # the flag's default (parser_common.py:305)
    assert done.returncode == 1 and "has no attribute ''" in done.stderr  # trainer_base.py:231-243
    done = _run_fake(tmp_path, "--fp8_scaled")
    assert done.returncode == 1 and "fp8_scaled requires fp8_base" in done.stderr  # trainer_base.py:1398
    done = _run_fake(tmp_path, "--blocks_to_swap", "40")
    assert done.returncode == 1 and "Cannot swap more than 39 blocks" in done.stderr  # model.py:753-754
    (tmp_path / "dataset.toml").write_text((tmp_path / "dataset.toml").read_text() + "colour = 'red'\n")
    done = _run_fake(tmp_path)
    assert done.returncode == 1 and "extra keys not allowed" in done.stderr  # config_utils.py:184-190


@pytest.mark.process
def test_the_fake_runs_out_of_memory_as_torch_does_and_holds_host_memory(tmp_path: Path) -> None:
    make_setup(tmp_path)
    done = _run_fake(tmp_path, "--max_train_steps", "3", env={"AUTOTUNE_EMULATED_VRAM_GB": "16"})
    assert done.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory" in done.stderr
    outcome = explain(
        1, None, timed_out=False, stalled=False, interrupted=False, output=done.stderr, metrics=None
    ).outcome
    assert outcome == Outcome.OOM
    swap = ("--fp8_base", "--blocks_to_swap", "36", "--max_train_steps", "3")
    fake = _fake_model()
    modelled = fake.host_gb(
        {"task": "t2v-14B", "precision": "fp8", "swap": 36, "gc": False, "batch": 1, "bucket": (832, 480, 45)}
    )
    held = _peak_rss_kib(tmp_path, *swap) - _peak_rss_kib(tmp_path, "--fp8_base", "--max_train_steps", "3")
    assert held >= 0.8 * modelled * 8 * 1024  # 36 swapped blocks really held in RAM (8 MB per modelled GB)
    done = _run_fake(tmp_path, *swap, env={"FAKE_MUSUBI_HOST_RAM_GB": "8"})
    assert done.returncode == 1 and "DefaultCPUAllocator" in done.stderr
    outcome = explain(
        1, None, timed_out=False, stalled=False, interrupted=False, output=done.stderr, metrics=None
    ).outcome
    assert outcome == Outcome.HOST_OOM


@pytest.mark.process
def test_a_fake_trial_reads_the_same_from_the_bar_and_from_the_hook(tmp_path: Path) -> None:
    fake = _fake_model()
    script = make_setup(tmp_path / "user")
    params = {
        "blocks_to_swap": 36,
        "precision": "fp8",
        "gradient_checkpointing": True,
        "gradient_checkpointing_cpu_offload": 1,
        "batch_size": 3,
    }
    expected = fake.step_time_s(
        {
            "task": "t2v-14B",
            "precision": "fp8",
            "swap": 36,
            "gc": "cpu_offload",
            "optimizer": "adamw8bit",
            "split_attn": False,
            "batch": 3,
            "bucket": (832, 480, 45),
        }
    )
    for hook in (True, False):
        adapter = _adapter(hook=hook)
        trial = tmp_path / f"hook-{hook}"
        spec = adapter.render(
            adapter.load_baseline(script), params, gradient_accumulation_steps=1, steps=8, trial_dir=trial
        )
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "FAKE_MUSUBI_"))}
        done = subprocess.run(
            spec.argv, cwd=spec.cwd, env={**clean, **spec.env}, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert (trial / "output" / "my-lora.safetensors").is_file()  # the one save, in the trial
        assert list((trial / "output").iterdir()) == [trial / "output" / "my-lora.safetensors"]
        metrics = adapter.read_metrics(trial, done.stdout + done.stderr)
        assert metrics.step_time_s == pytest.approx(expected, rel=0.02), hook
        assert metrics.samples_per_s == pytest.approx(3 / metrics.step_time_s)
        assert metrics.losses and metrics.losses[-1] == 0.1234
        assert (metrics.measured_peak_vram_gb is not None) == hook


def test_trainer_dir_is_where_it_runs(tmp_path: Path) -> None:
    from autotune.errors import UsageError

    script = make_setup(tmp_path / "user", trainer=tmp_path / "elsewhere")
    adapter = _adapter(trainer_dir=FAKE_MUSUBI)  # --trainer-dir wins over the script's cd
    spec = adapter.render(
        adapter.load_baseline(script), {}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t"
    )
    assert spec.cwd == FAKE_MUSUBI
    with pytest.raises(UsageError, match="no such folder"):
        _adapter(trainer_dir=tmp_path / "missing")


def test_wan22_offloading_its_inactive_expert_sweeps_no_block_swap(tmp_path: Path) -> None:
    """Wan 2.2 with both experts and ``--offload_inactive_dit`` (docs/wan.md:192): the trainer
    asserts that no block is swapped (wan_train_network.py:82-86), so the knob stays at 0 and a
    swap candidate is refused before it runs, with the trainer's reason."""
    (tmp_path / "high.safetensors").write_bytes(b"weights")
    extra = f"--dit_high_noise {tmp_path / 'high.safetensors'} --offload_inactive_dit"
    adapter = _adapter()
    baseline = adapter.load_baseline(make_setup(tmp_path / "u", task="t2v-A14B", extra=extra))
    assert adapter.knob_limits(baseline) == {"blocks_to_swap": 0}
    assert adapter.baseline_params(baseline)["blocks_to_swap"] == 0
    with pytest.raises(CandidateRefused, match=r"offload_inactive_dit.*wan_train_network\.py:82-86"):
        adapter.render(
            baseline, {"blocks_to_swap": 1}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t"
        )
    spec = adapter.render(
        baseline, {"blocks_to_swap": 0}, gradient_accumulation_steps=1, steps=3, trial_dir=tmp_path / "t0"
    )
    assert "--offload_inactive_dit" in spec.argv and "--blocks_to_swap" not in spec.argv
    # Without --offload_inactive_dit both experts stay on the card and block swap is the trainer's to take.
    plain = adapter.load_baseline(make_setup(tmp_path / "p", task="t2v-A14B", extra=extra.rsplit(" ", 1)[0]))
    assert adapter.knob_limits(plain) == {"blocks_to_swap": 39}
