"""The real tier, parsers: what autotune renders for musubi-tuner, diffusion-pipe and ai-toolkit
is read by the trainers' OWN argument parsers and config loaders, from checkouts named by
``AUTOTUNE_MUSUBI_SRC`` (kohya-ss/musubi-tuner, tested at 30c658c), ``AUTOTUNE_DPIPE_SRC``
(tdrussell/diffusion-pipe, 8f83dbf) and ``AUTOTUNE_AITK_SRC`` (ostris/ai-toolkit, 27a03a9); each
test skips, saying why, without its checkout. The parsers run in ``AUTOTUNE_<NAME>_PYTHON`` (default:
this Python) by the scripts in ``tests/real/realchecks/``; what each needs: musubi torch, toml, accelerate,
easydict; diffusion-pipe torch, toml (its bucketing and drop rules, run against ``dpipe.buckets``:
numpy alone); ai-toolkit torch, oyaml."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import CandidateRefused
from autotune.trainers import get_adapter
from tests.musubi_setup import make_setup

pytestmark = [pytest.mark.real, pytest.mark.timeout(600)]

CHECKS = Path(__file__).resolve().parent / "realchecks"
STEPS = 50


def _checkout(name: str, var: str, probe: str, commit: str) -> Path:
    src = os.environ.get(var)
    if not src:
        pytest.skip(
            f"{var} is not set: point it at a checkout of {name} (tested at {commit}) to run its parsers"
        )
    if not (Path(src) / probe).is_file():
        pytest.skip(f"{var}={src} holds no {probe}: not a checkout of {name}")
    return Path(src)


def _parse(
    script: str, src: Path, rows: list[dict[str, Any]], tmp: Path, var: str, modules: str
) -> list[Any]:
    python = os.environ.get(var, sys.executable)
    probe = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import {modules} ({probe.stderr.strip().splitlines()[-1:]}): set {var}")
    (tmp / "rows.json").write_text(json.dumps(rows))
    done = subprocess.run(
        [python, str(CHECKS / script), str(src), str(tmp / "rows.json")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


# --- musubi-tuner ---------------------------------------------------------------------------------


def _musubi_baselines(tmp: Path, src: Path) -> dict[str, Path]:
    (tmp / "high.safetensors").write_bytes(b"weights")
    wan22 = f"--dit_high_noise {tmp / 'high.safetensors'} --offload_inactive_dit --fp8_scaled"
    out = {
        "wan-14B": make_setup(tmp / "wan", trainer=src),
        "wan-1.3B-swap": make_setup(tmp / "wan13", task="t2v-1.3B", trainer=src, extra="--blocks_to_swap 8"),
        "wan22-offload-inactive": make_setup(tmp / "wan22", task="t2v-A14B", trainer=src, extra=wan22),
    }
    hv = make_setup(tmp / "hv", trainer=src)  # docs/hunyuan_video.md's command: the HV script, no --task
    hv.write_text(
        hv.read_text()
        .replace("wan_train_network.py", "hv_train_network.py")
        .replace("--task t2v-14B ", "")
        .replace("_wan.safetensors", "_hv.safetensors")
    )
    for cache in (tmp / "hv").rglob("*_wan*.safetensors"):
        cache.rename(cache.with_name(cache.name.replace("_wan", "_hv")))
    out["hv"] = hv
    return out


def test_musubi_parses_every_rendered_trial_as_its_knobs_say(tmp_path: Path) -> None:
    src = _checkout(
        "kohya-ss/musubi-tuner", "AUTOTUNE_MUSUBI_SRC", "src/musubi_tuner/wan_train_network.py", "30c658c"
    )
    adapter = get_adapter("musubi", trainer_dir=str(src), hook=False)
    rows, refused = [], 0
    for name, script in _musubi_baselines(tmp_path, src).items():
        baseline = adapter.load_baseline(script)
        limit = adapter.knob_limits(baseline)["blocks_to_swap"]
        # every value of every knob, each pair of swap, precision, checkpointing and optimizer;
        # split attention and the batch alternate
        grid = itertools.product(
            sorted({0, 1, limit, limit + 1}), ("fp8", "fp8_scaled", "bf16"), ((True, 1), (True, 0), (False, 0)),
            ("adamw8bit", "adamw"),
        )  # fmt: skip
        for n, (swap, precision, (gc, off), opt) in enumerate(grid):
            split, batch = n % 2 == 0, 1 + 2 * ((n // 2) % 2)
            params = {"blocks_to_swap": swap, "precision": precision, "gradient_checkpointing": gc,
                      "gradient_checkpointing_cpu_offload": off, "optimizer": opt, "split_attn": split,
                      "batch_size": batch}  # fmt: skip
            trial = tmp_path / "trials" / name / f"t{n:04d}"
            ga = 2 if batch == 1 else 1
            try:
                spec = adapter.render(
                    baseline, params, gradient_accumulation_steps=ga, steps=STEPS, trial_dir=trial
                )
            except CandidateRefused:
                refused += 1
                assert swap > limit or precision == "fp8_scaled", (name, params)
                continue
            rows.append({"argv": list(spec.argv), "params": params, "ga": ga, "dataset": str(trial / "dataset.toml"),
                         "baseline": name})  # fmt: skip
    results = _parse(
        "musubi_parse.py", src, rows, tmp_path, "AUTOTUNE_MUSUBI_PYTHON", "torch, toml, accelerate, easydict"
    )
    for row, result in zip(rows, results, strict=True):
        assert result["errors"] == [], (row["baseline"], row["params"], result["errors"])
        seen, want = result["seen"], dict(row["params"])
        want.pop("batch_size")
        if not want["gradient_checkpointing"]:
            want["gradient_checkpointing_cpu_offload"] = 0
        assert {k: seen[k] for k in want} == want, row["baseline"]
        assert (seen["max_train_steps"], seen["max_train_epochs"]) == (STEPS, None)
        assert not seen["sampling"] and not seen["saving"]
        assert seen["gradient_accumulation_steps"] == row["ga"] and seen["dataset_config"] == row["dataset"]
    print(f"musubi: {len(rows)} rendered trials parsed and accepted, {refused} refused before rendering")


# --- diffusion-pipe -------------------------------------------------------------------------------


def _dpipe_baselines(tmp: Path, src: Path) -> dict[str, Path]:
    (tmp / "Wan2.1-T2V-14B").mkdir(parents=True)
    (tmp / "Wan2.1-T2V-14B" / "config.json").write_text(json.dumps({"num_layers": 40}))
    (tmp / "images").mkdir()
    (tmp / "videos").mkdir()
    dataset = (
        (src / "examples" / "dataset.toml")
        .read_text()
        .replace("/home/anon/data/images/grayscale", str(tmp / "images"))
    )
    (tmp / "dataset.toml").write_text(
        dataset + f"\n[[directory]]\npath = '{tmp / 'videos'}'\nnum_repeats = 5\n"
    )
    wan = (
        (src / "examples" / "wan_14b_min_vram.toml").read_text()
        .replace("/data/diffusion_pipe_training_runs/tmp", str(tmp / "runs"))
        .replace("/home/anon/code/diffusion-pipe-configs/datasets/wan/video.toml", str(tmp / "dataset.toml"))
        .replace("/data2/imagegen_models/Wan2.1-T2V-14B", str(tmp / "Wan2.1-T2V-14B"))
    )  # fmt: skip
    main = (src / "examples" / "main_example.toml").read_text()
    lines = []
    for line in main.splitlines():  # the HunyuanVideo example: only its output and dataset pointed here
        if line.startswith("output_dir = "):
            line = f"output_dir = '{tmp / 'runs'}'"
        elif line.startswith("dataset = ") and not any(x.startswith("dataset = ") for x in lines):
            line = f"dataset = '{tmp / 'dataset.toml'}'"
        lines.append(line)
    out = {"wan": wan, "hunyuan-video": "\n".join(lines) + "\n",
           "wan-adamw8bit": wan.replace("type = 'AdamW8bitKahan'", "type = 'adamw8bit'"),
           "wan-pp2": wan.replace("pipeline_stages = 1", "pipeline_stages = 2").replace("blocks_to_swap = 32", "")}  # fmt: skip
    paths = {}
    for name, text in out.items():
        paths[name] = tmp / f"{name}.toml"
        paths[name].write_text(text)
    return paths


def test_diffusion_pipe_reads_every_rendered_trial_as_its_knobs_say(tmp_path: Path) -> None:
    from autotune.trainers.dpipe.adapter import optimizer_family

    src = _checkout("tdrussell/diffusion-pipe", "AUTOTUNE_DPIPE_SRC", "train.py", "8f83dbf")
    adapter = get_adapter("diffusion-pipe", trainer_dir=str(src), hook=False)
    names = ["blocks_to_swap", "transformer_dtype", "activation_checkpointing", "optimizer", "batch_size"]
    rows = []
    for name, path in _dpipe_baselines(tmp_path, src).items():
        baseline = adapter.load_baseline(path)
        if name == "wan-pp2":
            baseline = replace(baseline, num_gpus=2)
        in_play = adapter.knobs_in_play(baseline, names)
        limit = adapter.knob_limits(baseline).get("blocks_to_swap", 0)
        grid = {
            "blocks_to_swap": [0, 16, limit] if "blocks_to_swap" in in_play else [None],
            "transformer_dtype": ["float8", "bfloat16"] if "transformer_dtype" in in_play else [None],
            "activation_checkpointing": ["unsloth", True, False],
            # the family of the config's own (adamw8bit -> adamw, AdamW8bitKahan -> adamw_optimi)
            "optimizer": list(optimizer_family(adapter.baseline_params(baseline)["optimizer"]) or [None])
            if "optimizer" in in_play
            else [None],
        }
        for n, values in enumerate(itertools.product(*grid.values())):  # the batch alternates
            params = {k: v for k, v in zip(grid, values, strict=True) if v is not None}
            params["batch_size"] = 1 + 2 * (n % 2)
            trial = tmp_path / "trials" / name / f"t{n:03d}"
            adapter.render(baseline, params, gradient_accumulation_steps=2, steps=STEPS, trial_dir=trial)
            record = json.loads((trial / "adapter.json").read_text())
            rows.append(
                {"config": str(trial / "config.toml"), "params": params, "baseline": name, "record": record}
            )
    results = _parse("dpipe_parse.py", src, rows, tmp_path, "AUTOTUNE_DPIPE_PYTHON", "torch, toml")
    for row, result in zip(rows, results, strict=True):
        seen = result["seen"]
        assert result["errors"] == [], (row["baseline"], row["params"], result["errors"])
        assert {k: seen[k] for k in row["params"]} == row["params"], row["baseline"]
        assert (seen["max_steps"], seen["gradient_accumulation_steps"]) == (STEPS, 2)
        assert not seen["eval_before_first_step"]
        data_parallel = 2 // seen["pipeline_stages"] if row["baseline"] == "wan-pp2" else 1
        assert row["record"]["effective_batch"] == seen["batch_size"] * 2 * data_parallel  # train.py:632
    print(f"diffusion-pipe: {len(rows)} rendered trials read and accepted")


def test_diffusion_pipe_buckets_and_drops_as_autotune_says(tmp_path: Path) -> None:
    """diffusion-pipe's own bucket assignment and drop code (dataset.py:838-872, 392-396, run from the
    checkout with numpy) against ``dpipe.buckets`` over a grid of clips, buckets and batches."""
    import math

    from autotune.trainers.dpipe.buckets import Batch, Clip, Layout, drops_at, scope_of, size_bucket_of

    src = _checkout("tdrussell/diffusion-pipe", "AUTOTUNE_DPIPE_SRC", "utils/dataset.py", "8f83dbf")
    dims = [(1920, 1080), (1000, 1000), (500, 1000), (1280, 720), (720, 1280), (640, 480)]
    frames = [0, 1, 5, 16, 17, 20, 32, 33, 40, 100]
    ar_sets: list[dict[str, Any]] = [
        {"ars": [1.0]},
        {"ars": [0.5, 1.0, 1.777, 2.0]},
        {"min_ar": 0.5, "max_ar": 2.0, "num": 7},
        {"min_ar": 0.25, "max_ar": 4.0, "num": 9},
    ]
    frame_sets = [[1, 33], [1, 17, 33], [33], [1, 17, 33, 65]]
    size_sets = [
        [[512, 512, 1], [512, 512, 33], [768, 432, 33]],
        [[960, 960, 1], [960, 704, 1], [704, 960, 1], [1280, 704, 1], [704, 1280, 1]],  # cosmos_dataset.toml
        [[512, 512, 1], [768, 432, 1], [432, 768, 1], [512, 512, 17], [768, 432, 33]],
    ]
    rows: list[dict[str, Any]] = []
    for (w, h), f in itertools.product(dims, frames):
        rows += [{"kind": "ar", "width": w, "height": h, "frames": f, "frame_buckets": fb, **a}
                 for a in ar_sets for fb in frame_sets]  # fmt: skip
        rows += [
            {"kind": "size", "width": w, "height": h, "frames": f, "size_buckets": sb} for sb in size_sets
        ]
    rows += [{"kind": "drop", "n": n, "batch": b} for n in range(12) for b in range(1, 6)]
    results = _parse("dpipe_buckets.py", src, rows, tmp_path, "AUTOTUNE_DPIPE_PYTHON", "numpy")
    for row, real in zip(rows, results, strict=True):
        if row["kind"] == "ar":
            top = {"resolutions": [512], "frame_buckets": row["frame_buckets"], "enable_ar_bucket": True}
            top |= {"ar_buckets": row["ars"]} if "ars" in row else {
                "min_ar": row["min_ar"], "max_ar": row["max_ar"], "num_ar_buckets": row["num"]}  # fmt: skip
            clip = Clip(row["width"], row["height"], row["frames"])
            keys = Layout._keys(clip, scope_of({}, top, [clip]))
            ours = [keys[0][0], keys[0][2]] if keys else None
        elif row["kind"] == "size":
            key = size_bucket_of(
                Clip(row["width"], row["height"], row["frames"]), [tuple(b) for b in row["size_buckets"]]
            )
            ours = None if key is None else [key[0], key[1], key[2]]
            real = (
                None
                if real is None
                else [round(real[0] / real[1], 3), round(math.sqrt(real[0] * real[1]), 3), real[2]]
            )
        else:
            layout = Layout()
            layout.samples[(1.0, 512.0, 33)] = row["n"]
            ours = drops_at(layout, Batch(row["batch"], row["batch"])).kept
        assert ours == real, row
    print(f"diffusion-pipe: {len(rows)} bucket rows agree with dataset.py")


# --- ai-toolkit -----------------------------------------------------------------------------------

AITK_EXAMPLES = (
    "train_lora_wan21_14b_24gb.yaml",
    "train_lora_wan22_14b_24gb.yaml",
    "train_lora_flux_24gb.yaml",
    "train_lora_qwen_image_24gb.yaml",
)


def test_ai_toolkit_loads_every_rendered_trial_as_its_knobs_say(tmp_path: Path) -> None:
    src = _checkout("ostris/ai-toolkit", "AUTOTUNE_AITK_SRC", "toolkit/config_modules.py", "27a03a9")
    adapter = get_adapter("ai-toolkit", trainer_dir=str(src), hook=False)
    (tmp_path / "images").mkdir()
    rows, refused = [], 0
    for example in AITK_EXAMPLES:
        text = (
            (src / "config" / "examples" / example)
            .read_text()
            .replace("/path/to/images/folder", str(tmp_path / "images"))
        )
        (tmp_path / example).write_text(text)
        baseline = adapter.load_baseline(tmp_path / example)
        grid = itertools.product(["uint3", "uint4", "qfloat8", "none"], [1.0, 0.5, 0.0], [True, False],
                                 ["adamw8bit", "adamw"])  # fmt: skip
        for n, (qtype, offload, low_vram, opt) in enumerate(grid):  # checkpointing and batch alternate
            gc, bs = n % 2 == 0, 1 + (n // 2) % 2
            params = {"qtype": qtype, "layer_offloading_transformer_percent": offload, "low_vram": low_vram,
                      "gradient_checkpointing": gc, "optimizer": opt, "batch_size": bs}  # fmt: skip
            trial = tmp_path / "trials" / example.removesuffix(".yaml") / f"t{n:03d}"
            try:
                adapter.render(baseline, params, gradient_accumulation_steps=2, steps=STEPS, trial_dir=trial)
            except CandidateRefused as exc:
                refused += 1
                assert "float8" in str(exc) or "legacy" in str(exc), str(exc)
                continue
            rows.append({"config": str(trial / "config.yaml"), "params": params, "baseline": example})
    results = _parse("aitk_parse.py", src, rows, tmp_path, "AUTOTUNE_AITK_PYTHON", "torch, oyaml")
    for row, result in zip(rows, results, strict=True):
        seen, p = result["seen"], row["params"]
        assert seen["job"] == "extension"
        assert seen["qtype"] == p["qtype"], (row["baseline"], p, seen)  # never relabelled by the trainer
        if p["layer_offloading_transformer_percent"] > 0:
            assert seen["layer_offloading"], row["baseline"]
            assert seen["layer_offloading_transformer_percent"] == pytest.approx(
                p["layer_offloading_transformer_percent"]
            )
        for key in ("low_vram", "gradient_checkpointing", "optimizer", "batch_size"):
            assert seen[key] == p[key], (row["baseline"], key)
        assert (seen["steps"], seen["gradient_accumulation"], seen["disable_sampling"]) == (STEPS, 2, True)
        assert seen["save_every"] >= STEPS and seen["datasets"] == 1
        assert seen["training_folder"].endswith("/output")
    print(f"ai-toolkit: {len(rows)} rendered trials loaded and as asked, {refused} refused before rendering")
