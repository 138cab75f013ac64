"""A fake of musubi-tuner's ``src/musubi_tuner/wan_train_network.py`` (kohya-ss/musubi-tuner @ 30c658c).

No torch: it reads the same flags (argparse: an unknown flag fails as the real parser fails) and the
same dataset TOML (keys checked like the real voluptuous schema), finds the latent caches the way
the real dataset does, models device memory, host RAM and step time from the knobs, and prints
what the real trainer prints: the ``running training`` block, ``epoch N/M`` lines, the tqdm bar
(``desc="steps"``, ``smoothing=0``, ``avr_loss`` postfix, reset after the first step), a CUDA OOM
traceback (exit 1) when over the card, and the final ``saving checkpoint`` line. Citations are
``path:line`` in the real checkout at 30c658c.

Environment:
  AUTOTUNE_EMULATED_VRAM_GB  the card (GiB) it runs out of memory on (autotune's hook env); else
                             FAKE_MUSUBI_CARD_GB; else no limit
  AUTOTUNE_HOOK_FILE         where the trial-side hook writes: the fake has no torch for the hook
                             to watch, so it writes the hook's step and exit lines itself
  FAKE_MUSUBI_HOST_RAM_GB    host RAM (GB): above it, the allocator's out-of-memory error
  FAKE_MUSUBI_HOST_MB_PER_GB real host memory allocated and touched per modelled GB (default 2)
  FAKE_MUSUBI_LOSS           the loss it reports (default 0.1234; "nan" for a diverged run)

The model (``device_gb``, ``host_gb``, ``step_time_s``) is importable so tests can brute-force
the best config from the same numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import tomlkit  # the real trainer reads it with the toml package (config_utils.py:20); 3.10 has no tomllib

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
)  # tests/fakes: the hook's line format
from hookline import hook_text

# --- the model ----------------------------------------------------------------------------------

#: wan/configs/wan_t2v_14B.py:30 (40 layers), wan_t2v_1_3B.py:30 (30 layers); default task t2v-14B
#: (wan_train_network.py:723). Billions of DiT parameters per task family.
TASKS = {
    "t2v-14B": (40, 14.0),
    "i2v-14B": (40, 14.0),
    "t2i-14B": (40, 14.0),
    "t2v-A14B": (40, 14.0),
    "i2v-A14B": (40, 14.0),
    "t2v-1.3B": (30, 1.3),
}
BLOCK_SHARE = 0.97  # the transformer blocks' share of the DiT's weights (the rest: embeddings, head, norms)
ACT_FULL_GB = 0.15  # per 1k tokens per block: a block's activations kept for backward
ACT_CKPT_GB = 0.01  # per 1k tokens per block: a checkpointed block keeps only its input
ATTN_GB = 0.05  # per 1k tokens per sample in one attention call (split_attn: one sample at a time)
OVERHEAD_GB = 1.2  # CUDA context, allocator slack
H2D_GB_S = 12.0  # host-to-device bandwidth for swapped blocks
SECONDS_PER_KTOKEN = 0.05  # one sample's forward+backward per 1k tokens, 14B in bf16 (1.3B: x0.1)
STEP_OVERHEAD_S = 1.5  # per optimizer step whatever the batch: data loading, optimizer, LoRA bookkeeping


def tokens_k(width: int, height: int, frames: int) -> float:
    """Thousands of DiT tokens per sample: VAE 4x8x8 then patch (1, 2, 2)
    (wan_train_network.py:705-706)."""
    latent_frames = (frames - 1) // 4 + 1
    return latent_frames * (height // 16) * (width // 16) / 1000.0


def weights_gb(params_b: float, precision: str) -> tuple[float, float]:
    """(all DiT weights, the blocks' share) in GB. fp8 (``--fp8_base``): the whole model cast to
    float8 (wan/modules/model.py:1036-1037); fp8_scaled: only the blocks' linears in fp8 with
    scales, norms and embeddings kept (model.py:536-541, 1046); bf16: 2 bytes each."""
    if precision == "bf16":
        return 2.0 * params_b, 2.0 * params_b * BLOCK_SHARE
    if precision == "fp8":
        return params_b, params_b * BLOCK_SHARE
    blocks = params_b * BLOCK_SHARE * 1.002  # fp8 plus a scale per output channel
    return blocks + 2.0 * params_b * (1 - BLOCK_SHARE), blocks


def device_gb(c: dict) -> float:
    """Peak device memory of one training step for config ``c`` (see ``config_of``)."""
    blocks, params_b = TASKS[c["task"]]
    total, in_blocks = weights_gb(params_b, c["precision"])
    block = in_blocks / blocks
    swap = c["swap"]
    resident = total - swap * block + (2 * block if swap else 0)  # two swapped blocks in flight
    lora_b = params_b * 0.005  # LoRA parameters (billions)
    optimizer = lora_b * (1.0 if c["optimizer"] == "adamw8bit" else 8.0)  # 2 states: 8-bit vs fp32
    lora = lora_b * 8.0 + optimizer  # fp32 weights and gradients
    tk = tokens_k(*c["bucket"])
    if c["gc"] == "cpu_offload":  # inputs to host, two in flight (trainer_base.py:1609)
        per_sample = tk * (2 * ACT_CKPT_GB + ACT_FULL_GB)
    elif c["gc"]:
        per_sample = tk * (blocks * ACT_CKPT_GB + ACT_FULL_GB)
    else:
        per_sample = tk * blocks * ACT_FULL_GB
    attention = tk * ATTN_GB * (1 if c["split_attn"] else c["batch"])
    return resident + lora + c["batch"] * per_sample + attention + OVERHEAD_GB


def loaded_gb(c: dict) -> float:
    """What is on the card before the first step: the resident weights, LoRA and optimizer, overhead."""
    return device_gb({**c, "batch": 0, "split_attn": False})  # no activations, no attention yet


def host_gb(c: dict) -> float:
    """Host RAM for what lives off the card: swapped blocks and offloaded activations."""
    blocks, params_b = TASKS[c["task"]]
    _, in_blocks = weights_gb(params_b, c["precision"])
    offloaded = (
        c["batch"] * tokens_k(*c["bucket"]) * blocks * ACT_CKPT_GB if c["gc"] == "cpu_offload" else 0.0
    )
    return c["swap"] * in_blocks / blocks + offloaded


def swap_exposure(swap: int, blocks: int) -> float:
    """Blocks' worth of transfer not hidden behind compute. Non-monotone on purpose: a sweet spot
    near 90% of the blocks, where a larger swap is also faster (SeedVR2#153 measured 36 swapped
    blocks faster than 32; the real offloader switches to a wrap-around schedule above half of the
    blocks, modules/custom_offloading_utils.py:539-555)."""
    return swap * (1.0 - 0.5 * math.exp(-(((swap - 0.9 * blocks) / 1.5) ** 2)))


def step_time_s(c: dict) -> float:
    """Seconds per optimizer step (one micro-batch of ``batch`` samples)."""
    blocks, params_b = TASKS[c["task"]]
    _, in_blocks = weights_gb(params_b, c["precision"])
    tk = tokens_k(*c["bucket"])
    compute = c["batch"] * tk * SECONDS_PER_KTOKEN * (params_b / 14.0)
    compute *= {"bf16": 1.0, "fp8": 1.1, "fp8_scaled": 1.15}[c["precision"]]
    compute *= {False: 1.0, True: 1.3, "cpu_offload": 1.6}[c["gc"]]
    compute *= 1.0 + (0.04 * (c["batch"] - 1) / c["batch"] if c["split_attn"] else 0.0)
    stall = 2 * swap_exposure(c["swap"], blocks) * (in_blocks / blocks) / H2D_GB_S  # forward and backward
    optimizer = 0.03 if c["optimizer"] == "adamw8bit" else 0.02
    return compute + stall + optimizer + STEP_OVERHEAD_S


def config_of(args: argparse.Namespace, bucket: tuple[int, int, int], batch: int) -> dict:
    precision = ("fp8_scaled" if args.fp8_scaled else "fp8") if args.fp8_base else "bf16"
    gc = (
        ("cpu_offload" if args.gradient_checkpointing_cpu_offload else True)
        if args.gradient_checkpointing
        else False
    )
    optimizer = "adamw8bit" if args.optimizer_type.lower() == "adamw8bit" else "adamw"
    return {
        "task": args.task,
        "precision": precision,
        "swap": args.blocks_to_swap or 0,  # trainer_base.py:1496
        "gc": gc,
        "optimizer": optimizer,
        "split_attn": args.split_attn,
        "batch": batch,
        "bucket": bucket,
    }


# --- the command line (training/parser_common.py and wan_train_network.py:721-753) ---------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wan_train_network.py")
    p.add_argument("--dataset_config", type=Path, default=None)  # parser_common.py:42-47
    for flag in ("--sdpa", "--flash_attn", "--sage_attn", "--xformers", "--flash3", "--split_attn"):
        p.add_argument(flag, action="store_true")  # parser_common.py:51-82
    p.add_argument("--max_train_steps", type=int, default=1600)  # :164
    p.add_argument("--max_train_epochs", type=int, default=None)  # :165-170
    p.add_argument("--max_data_loader_n_workers", type=int, default=8)  # :171-176
    p.add_argument("--persistent_data_loader_workers", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--gradient_checkpointing", action="store_true")  # :183-185
    p.add_argument("--gradient_checkpointing_cpu_offload", action="store_true")  # :186-190
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)  # :191-196
    p.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])  # :197-203
    p.add_argument("--save_precision", type=str, default=None, choices=["float", "fp32", "fp16", "bf16"])
    p.add_argument("--logging_dir", type=str, default=None)  # :215-220
    p.add_argument("--log_with", type=str, default=None, choices=["tensorboard", "wandb", "all"])
    p.add_argument("--log_prefix", type=str, default=None)
    p.add_argument("--wandb_run_name", type=str, default=None)
    p.add_argument("--wandb_api_key", type=str, default=None)
    p.add_argument("--sample_every_n_steps", type=int, default=None)  # :278-283
    p.add_argument("--sample_at_first", action="store_true")  # :284-286
    p.add_argument("--sample_every_n_epochs", type=int, default=None)  # :287-292
    p.add_argument("--sample_prompts", type=str, default=None)  # :293-298
    p.add_argument("--optimizer_type", type=str, default="")  # :302-308
    p.add_argument("--optimizer_args", type=str, default=None, nargs="*")
    p.add_argument("--learning_rate", type=float, default=2.0e-6)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--lr_scheduler", type=str, default="constant")
    p.add_argument("--lr_warmup_steps", type=float, default=0)
    p.add_argument("--fp8_base", action="store_true")  # :383
    p.add_argument("--blocks_to_swap", type=int, default=None)  # :391-396
    p.add_argument("--use_pinned_memory_for_block_swap", action="store_true")  # :397-402
    p.add_argument(
        "--timestep_sampling",
        default="sigma",
        choices=["sigma", "uniform", "sigmoid", "shift", "flux_shift", "flux2_shift", "ideogram4_shift",
                 "qwen_shift", "krea2_shift", "logsnr", "qinglong_flux", "qinglong_qwen"],
    )  # fmt: skip  # :436-455
    p.add_argument("--discrete_flow_shift", type=float, default=1.0)
    p.add_argument("--min_timestep", type=int, default=None)
    p.add_argument("--max_timestep", type=int, default=None)
    p.add_argument("--preserve_distribution_shape", action="store_true")
    p.add_argument("--network_weights", type=str, default=None)  # :541-546
    p.add_argument("--network_module", type=str, default=None)
    p.add_argument("--network_dim", type=int, default=None)  # :547-552
    p.add_argument("--network_alpha", type=float, default=1)
    p.add_argument("--network_dropout", type=float, default=None)
    p.add_argument("--network_args", type=str, default=None, nargs="*")
    p.add_argument("--output_dir", type=str, default=None)  # :606-608
    p.add_argument("--output_name", type=str, default=None)  # :609-614
    p.add_argument("--resume", type=str, default=None)  # :615
    for flag in (
        "--save_every_n_epochs",
        "--save_every_n_steps",
        "--save_last_n_epochs",
        "--save_last_n_epochs_state",
        "--save_last_n_steps",
        "--save_last_n_steps_state",
    ):
        p.add_argument(flag, type=int, default=None)  # :617-652
    p.add_argument("--save_state", action="store_true")  # :653-657
    p.add_argument("--save_state_on_train_end", action="store_true")  # :658-663
    p.add_argument("--huggingface_repo_id", type=str, default=None)  # :713-718
    p.add_argument("--dit", type=str)  # :754
    p.add_argument("--vae", type=str)  # :755
    p.add_argument("--vae_dtype", type=str, default=None)  # :756
    p.add_argument("--task", type=str, default="t2v-14B", choices=list(TASKS))  # wan_train_network.py:723
    p.add_argument("--fp8_scaled", action="store_true")  # :724
    p.add_argument("--t5", type=str, default=None)  # :725
    p.add_argument("--fp8_t5", action="store_true")  # :726
    p.add_argument("--clip", type=str, default=None)  # :727-732
    p.add_argument("--vae_cache_cpu", action="store_true")  # :733
    p.add_argument("--force_v2_1_time_embedding", action="store_true")  # :737-739
    p.add_argument("--dit_high_noise", type=str, default=None)  # :740
    p.add_argument("--timestep_boundary", type=int, default=None)  # :741-746
    p.add_argument("--offload_inactive_dit", action="store_true")  # :747-751
    return p


# --- the dataset (dataset/config_utils.py, dataset/image_video_dataset.py, dataset/bucket.py) -------

ASCENDABLE = {
    "caption_extension",
    "batch_size",
    "num_repeats",
    "resolution",
    "enable_bucket",
    "bucket_no_upscale",
}
IMAGE_KEYS = ASCENDABLE | {
    "image_directory", "image_jsonl_file", "cache_directory", "control_directory", "multiple_target",
    "fp_latent_window_size", "fp_1f_clean_indices", "fp_1f_target_index", "fp_1f_no_post",
    "no_resize_control", "control_resolution",
}  # fmt: skip  # config_utils.py:112-132
VIDEO_KEYS = ASCENDABLE | {
    "video_directory", "video_jsonl_file", "control_directory", "target_frames", "frame_extraction",
    "frame_stride", "frame_sample", "max_frames", "cache_directory", "source_fps", "fp_latent_window_size",
}  # fmt: skip  # config_utils.py:133-145
CACHE = re.compile(r"^(.+)_(\d+)-(\d+)(?:-\d+)?_(\d+)x(\d+)_wan\.safetensors$")


class Invalid(Exception):
    pass


def check_schema(config: dict) -> None:
    """voluptuous' ``Schema`` (config_utils.py:170-178, 184-190): unknown keys are refused."""
    for key in config:
        if key not in ("general", "datasets"):
            raise Invalid(f"extra keys not allowed @ data['{key}']")
    for key in config.get("general", {}):
        if key not in ASCENDABLE:
            raise Invalid(f"extra keys not allowed @ data['general']['{key}']")
    for i, ds in enumerate(config.get("datasets", [])):
        allowed = VIDEO_KEYS if "video_directory" in ds or "video_jsonl_file" in ds else IMAGE_KEYS
        for key in ds:
            if key not in allowed:
                raise Invalid(f"extra keys not allowed @ data['datasets'][{i}]['{key}']")
        if "batch_size" in ds and not isinstance(ds["batch_size"], int):
            raise Invalid(f"expected int for dictionary value @ data['datasets'][{i}]['batch_size']")


def bucket_of(
    size: tuple[int, int], resolution: tuple[int, int], enable: bool, no_upscale: bool
) -> tuple[int, int]:
    """bucket.py:74-121: the resolution, or the nearest-aspect bucket of its area (steps of 16)."""
    if not enable:
        return resolution
    area = resolution[0] * resolution[1]
    if no_upscale and size[0] * size[1] <= area:
        return size[0] - size[0] % 16, size[1] - size[1] % 16
    side = int(math.sqrt(area))
    found = set()
    for w in range(side // 2 - (side // 2) % 16, side + 16, 16):
        h = area // w - (area // w) % 16
        found |= {(w, h), (h, w)}
    ordered = sorted(found)
    return min(ordered, key=lambda b: abs(b[0] / b[1] - size[0] / size[1]))


def batches(config: dict) -> list[tuple[tuple[int, int, int], int]]:
    """Every batch of an epoch as (bucket (W, H, frames), samples): caches globbed and bucketed as
    ``prepare_for_training`` does (image_video_dataset.py:857-895), each bucket cut into batches
    of ``batch_size`` (bucket.py:183-184, the last one partial)."""
    general = config.get("general", {})
    out = []
    for ds in config.get("datasets", []):

        def get(key: str, default: object, ds: dict = ds) -> object:
            return ds.get(key, general.get(key, default))  # dataset, then [general] (config_utils.py:253)

        res = get("resolution", [960, 544])
        res = (res, res) if isinstance(res, int) else tuple(res)
        folder = Path(ds.get("cache_directory") or ds.get("video_directory") or "")
        by_bucket: dict[tuple[int, int, int], int] = {}
        for path in sorted(folder.glob("*_wan.safetensors")) if folder.is_dir() else []:
            m = CACHE.match(path.name)
            if not m:
                continue
            if not (folder / f"{m.group(1)}_wan_te.safetensors").exists():
                print(f"WARNING Text encoder output cache file not found: {m.group(1)}", file=sys.stderr)
                continue  # :877-879
            w, h = bucket_of(
                (int(m.group(4)), int(m.group(5))),
                res,
                get("enable_bucket", False),
                get("bucket_no_upscale", False),
            )
            key = (w, h, int(m.group(3)))
            by_bucket[key] = by_bucket.get(key, 0) + get("num_repeats", 1)
        size = get("batch_size", 1)
        for key in sorted(by_bucket):
            items = by_bucket[key]
            out += [(key, min(size, items - i)) for i in range(0, items, size)]
    return out


# --- the run ----------------------------------------------------------------------------------------


class OutOfMemory(Exception):
    pass


def hook_line(kind: str, **fields) -> None:
    """The line the trial-side hook would write (trials/hook/sitecustomize.py)."""
    where = os.environ.get("AUTOTUNE_HOOK_FILE")
    if where:
        with open(where, "a", encoding="utf-8") as fh:
            fh.write(hook_text({"event": kind, **fields, "pid": os.getpid()}))


def interval(seconds: float) -> str:
    """tqdm's ``format_interval``: [H:]MM:SS."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def bar_line(n: int, total: int, elapsed: float, postfix: str) -> str:
    """tqdm's ``format_meter`` for ``desc="steps"`` without a terminal width (a 10-cell bar): the
    rate is ``n / elapsed`` since the bar (re)started, as ``smoothing=0`` draws it."""
    frac = n / total if total else 0
    full = int(frac * 10)
    partial = " ▏▎▍▌▋▊▉"[int((frac * 10 - full) * 8)] if full < 10 else ""
    cells = ("█" * full + partial).ljust(10)
    rate = n / elapsed if n and elapsed > 0 else None
    if rate is None:
        rate_fmt, left = "?it/s", "?"
    else:
        rate_fmt = f"{1 / rate:5.2f}s/it" if 1 / rate > 1 else f"{rate:5.2f}it/s"
        left = interval((total - n) / rate)
    return f"steps: {frac * 100:3.0f}%|{cells}| {n}/{total} [{interval(elapsed)}<{left}, {rate_fmt}{postfix}]"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.dataset_config is None:  # trainer_base.py:1394-1395
        raise ValueError("dataset_config is required / dataset_configが必要です")
    if args.dit is None:  # :1396-1397
        raise ValueError("path to DiT model is required / DiTモデルのパスが必要です")
    assert not args.fp8_scaled or args.fp8_base, (
        "fp8_scaled requires fp8_base / fp8_scaledはfp8_baseが必要です"
    )  # :1398
    if args.optimizer_type.lower() not in ("adamw", "adamw8bit", "adafactor"):  # trainer_base.py:231-243
        raise AttributeError(f"module 'torch.optim' has no attribute '{args.optimizer_type}'")
    blocks, _ = TASKS[args.task]
    if args.blocks_to_swap and args.blocks_to_swap > blocks - 1:  # wan/modules/model.py:752-754
        raise AssertionError(
            f"Cannot swap more than {blocks - 1} blocks. Requested {args.blocks_to_swap} blocks to swap."
        )
    config = tomlkit.parse(Path(args.dataset_config).read_text(encoding="utf-8")).unwrap()
    try:
        check_schema(config)
    except Invalid:
        print(
            "ERROR Invalid user config / ユーザ設定の形式が正しくないようです", file=sys.stderr
        )  # config_utils.py:189
        raise
    epoch_batches = batches(config)
    if not epoch_batches:
        raise ValueError("No training items found in the dataset / データセットに学習データがありません")

    accum = args.gradient_accumulation_steps
    steps = args.max_train_steps
    per_epoch = math.ceil(len(epoch_batches) / accum)  # trainer_base.py:1796
    if args.max_train_epochs is not None:  # :1639-1646
        steps = args.max_train_epochs * per_epoch
        print(
            f"INFO override steps. steps for {args.max_train_epochs} epochs is / 指定エポックまでのステップ数: {steps}"
        )
    epochs = math.ceil(steps / per_epoch)  # :1797
    print("running training / 学習開始")  # :1802-1811
    print(f"  num train items / 学習画像、動画数: {sum(n for _, n in epoch_batches)}")
    print(f"  num batches per epoch / 1epochのバッチ数: {len(epoch_batches)}")
    print(f"  num epochs / epoch数: {epochs}")
    print(f"  batch size per device / バッチサイズ: {max(n for _, n in epoch_batches)}")
    print(f"  gradient accumulation steps / 勾配を合計するステップ数 = {accum}")
    print(f"  total optimization steps / 学習ステップ数: {steps}")
    sys.stdout.flush()

    card = os.environ.get("AUTOTUNE_EMULATED_VRAM_GB") or os.environ.get("FAKE_MUSUBI_CARD_GB")
    card_gb = float(card) if card else None
    host_limit = os.environ.get("FAKE_MUSUBI_HOST_RAM_GB")
    mb_per_gb = float(os.environ.get("FAKE_MUSUBI_HOST_MB_PER_GB", "2"))
    loss = os.environ.get("FAKE_MUSUBI_LOSS", "0.1234")
    held: list[bytearray] = []
    peak = 0.0
    try:
        elapsed = 0.0
        step = 0
        visited = [epoch_batches[i % len(epoch_batches)] for i in range(steps * accum)]
        for micro, (bucket, batch) in enumerate(visited):
            c = config_of(args, bucket, batch)
            need_host = host_gb(c)
            if host_limit and need_host > float(host_limit):
                print(
                    # torch's c10/core/impl/alloc_cpu.cpp text on Linux, raised while pinning or offloading
                    "Traceback (most recent call last):\nRuntimeError: [enforce fail at alloc_cpu.cpp:117] data. "
                    f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {int(need_host * 2**30)} "
                    "bytes. Error code 12 (Cannot allocate memory)",
                    file=sys.stderr,
                )
                return 1
            if need_host * mb_per_gb >= 1 and (not held or len(held[0]) < int(need_host * mb_per_gb * 2**20)):
                buf = bytearray(int(need_host * mb_per_gb * 2**20))
                buf[::4096] = b"\x01" * len(range(0, len(buf), 4096))  # touched: real resident memory
                held[:] = [buf]
            need = device_gb(c)
            if card_gb is not None and need > card_gb:
                loaded = peak or loaded_gb(c)  # weights and LoRA are on the card before the first step
                raise OutOfMemory(need - loaded, card_gb, loaded)
            peak = max(peak, need)
            if micro % len(epoch_batches) == 0:
                print(f"\nepoch {micro // len(epoch_batches) + 1}/{epochs}")  # :2021
                sys.stdout.flush()
            if micro == 0:
                print(bar_line(0, steps, 0.0, ""), end="\r", file=sys.stderr)
            if (micro + 1) % accum:
                continue
            step += 1
            seconds = accum * step_time_s(c)
            if step == 1:
                seconds *= 3.0  # the first step: allocations, compilation, caches
                hook_line("step", step=1, step_time_s=seconds, max_memory_reserved_gb=peak, loss=float(loss))
                elapsed = 0.02 * seconds  # reset() after it (trainer_base.py:2085-2086): tail time only
            else:
                hook_line(
                    "step", step=step, step_time_s=seconds, max_memory_reserved_gb=peak, loss=float(loss)
                )
                elapsed += seconds
            print(
                bar_line(step, steps, elapsed, f", avr_loss={loss}"), end="\r", file=sys.stderr
            )  # :2116-2118
            sys.stderr.flush()
    except OutOfMemory as exc:
        tried, capacity, used = exc.args
        print(
            "Traceback (most recent call last):\n"
            '  File "src/musubi_tuner/wan_train_network.py", line 772, in <module>\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{min(tried, capacity):.2f} GiB. GPU 0 has a total capacity of {capacity:.2f} GiB of which "
            f"{max(0.0, capacity - used):.2f} GiB is free. Including non-PyTorch memory, this process has "
            f"{used:.2f} GiB memory in use.",
            file=sys.stderr,
        )
        hook_line("exit", steps=step, max_memory_reserved_gb=peak, exception="OutOfMemoryError")
        return 1
    print(file=sys.stderr)
    if args.output_dir is None:  # os.makedirs(None) in save_model (trainer_base.py:1939)
        raise TypeError("expected str, bytes or os.PathLike object, not NoneType")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.output_name or 'last'}.safetensors"  # train_utils.get_last_ckpt_name, trainer_base.py:2174
    print(f"\nsaving checkpoint: {out / name}")  # :1942
    (out / name).write_text(json.dumps({"steps": step, "peak_gb": round(peak, 3)}))
    print("INFO model saved.")  # :2177
    hook_line("exit", steps=step, max_memory_reserved_gb=peak, loss=float(loss))
    return 0


if __name__ == "__main__":
    sys.exit(main())
