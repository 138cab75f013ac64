"""A fake diffusion-pipe ``train.py``: reads the real config keys, prints the real lines, trains nothing.

It follows tdrussell/diffusion-pipe at 8f83dbf (``train.py`` unless named) and DeepSpeed at 38327e0;
no code is copied. What it reproduces:
- the command line: train.py:41-57's flags plus DeepSpeed's ``--deepspeed``/``--deepspeed_config``
  (deepspeed.add_config_arguments); an unknown flag dies with argparse's usage error, exit 2;
- the config: TOML (train.py:282-284); ``save_every_n_epochs``/``_steps``/``_examples`` required
  (train.py:95, an AssertionError); ``[model] dtype`` and ``transformer_dtype`` looked up in DTYPE_MAP
  (train.py:107-110, utils/common.py:14-21: a KeyError for anything else, ``nf4`` included);
  ``activation_checkpointing`` true / 'unsloth' / false (train.py:587-598, NotImplementedError
  otherwise); ``blocks_to_swap`` needs pipeline_stages = 1 and an ``[adapter]`` (train.py:577-578)
  and at most blocks - 2 (models/wan/wan.py:389-392); ``[optimizer] type`` matched lowercased
  (train.py:656-697; an unknown name fails in ``getattr(pytorch_optimizer, ...)`` with an
  AttributeError); unknown keys are ignored, as ``config.get`` ignores them;
- the model: ``type = 'wan'`` only, its block count and width from ``ckpt_path/config.json``
  (``num_layers``, ``dim``: models/wan/wan.py:84-127);
- the dataset TOML named by ``dataset`` (train.py:393), its largest bucket (utils/dataset.py:
  resolutions as areas 882-889, frame_buckets with 1 added 508-513, size_buckets 460-466); each
  ``[[directory]] path`` must exist (RuntimeError 'Invalid path', dataset.py:486-487); a folder
  that holds files loses what falls short of the global batch (dataset.py:392-396: the warning line,
  and with nothing left the RuntimeError 'Processed dataset was empty', dataset.py:1304-1309), the
  fake counting every captioned file x ``num_repeats`` (dataset.py:337, 650, 755-758) as one bucket,
  so it drops no more than the real trainer (which splits them by size and frames); an empty
  folder is not judged (the real trainer asserts it has images/videos);
- the loop: ``Global batch size = ...`` (train.py:633), DeepSpeed's step line on every
  ``steps_per_print``-th step (deepspeed/runtime/pipe/engine.py:396-406), ``max_steps`` ends it
  (train.py:961-963), ``save_every_n_steps`` saves ``step{N}`` (saver.py:165-167, "Saving model to
  directory ..." saver.py:112), the final training-state checkpoint ``global_step{N}`` and the model
  unless just saved (train.py:967-971), ``TRAINING COMPLETE!`` (train.py:974); eval before the first
  step when ``eval_before_first_step`` (default true, train.py:141, 908: "Running eval", train.py:201);
- over the emulated card (``AUTOTUNE_EMULATED_VRAM_GB``) PyTorch's CUDA OOM traceback on stderr and
  exit 1 (diffusion-pipe has no OOM handling; the DeepSpeed launcher exits with the rank's status).

The memory model (GB, device): the non-block weights and CUDA context, the resident blocks
(``num_layers - blocks_to_swap``, plus one in flight while swapping: utils/offloading.py:43-80's
ModelOffloader swaps a block's weights between CPU and GPU around each block), by
``transformer_dtype`` (float8 halves bf16), the LoRA and its optimizer states, and activations x
micro batch x the bucket's pixels x frames, by checkpointing (none keeps every block's activations;
true keeps each block's input; 'unsloth' moves those to host RAM, utils/unsloth_utils.py:40).
Host RAM: the swapped blocks and the unsloth-offloaded activations, REALLY allocated
(``HOST_BYTES_PER_GB`` per modelled GB) so the trial's RSS is real. Step time (modelled, not
measured): per micro-batch a fixed cost plus the samples' compute, times the recompute of
checkpointing, the float8 upcasts, and the block swap's share of the memory bus, which is NOT
monotone in the count: around ``SWAP_STALL_AT`` blocks the prefetch stalls, so more swapped blocks
can be faster (as SeedVR2#153 found 36 swapped blocks faster than 32). Each factor multiplies the
whole step, so a family's speed ratio to another holds across batch sizes (the search's
assumption, autotune/core/bounds.py ``LEARNED_DRIFT``). Times are printed, never slept.

The hook: the fake has no torch for the trial-side hook to watch, so it writes the hook's ``step``
and ``exit`` lines to ``$AUTOTUNE_HOOK_FILE`` itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import tomllib

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
)  # tests/fakes: the hook's line format
from hookline import hook_text

DTYPE_MAP = ("float32", "float16", "bfloat16", "float8", "float8_e4m3fn", "float8_e5m2")
#: Bytes per weight relative to bfloat16.
DTYPE_SIZE = {
    "float32": 2.0,
    "float16": 1.0,
    "bfloat16": 1.0,
    "float8": 0.5,
    "float8_e4m3fn": 0.5,
    "float8_e5m2": 0.5,
}
#: train.py:668-697's names (lowercased), with modelled state GB for a rank-32 LoRA and step seconds.
OPTIMIZERS = {
    "adamw": (0.6, 0.03),
    "adamw8bit": (0.15, 0.04),
    "adamw_optimi": (0.9, 0.03),
    "stableadamw": (0.9, 0.03),
    "sgd": (0.0, 0.02),
    "adamw8bitkahan": (0.3, 0.05),
    "offload": (0.0, 0.30),
    "automagic": (0.3, 0.05),
    "genericoptim": (0.6, 0.04),
}
OTHER_GB = 1.5  # non-block weights, the CUDA context
LORA_GB = 0.3
#: Activations of one 512x512x33 sample: every block's (no checkpointing), each block's input (true),
#: one block's worth on the device with the inputs moved to the host ('unsloth').
ACT_GB = {False: 4.0, True: 2.0, "unsloth": 0.4}
ACT_HOST_GB = {False: 0.0, True: 0.0, "unsloth": 1.6}
RECOMPUTE = {False: 1.0, True: 1.33, "unsloth": 1.38}
#: float8 weights are stored, not computed in: each block's are upcast for its matmuls (modelled).
FLOAT8_SLOWDOWN = 1.5
MICRO_BATCH_S = 0.2  # the pipeline engine's per-micro-batch cost
SAMPLE_S = 0.5  # one 512x512x33 sample's forward and backward in bfloat16
SWAP_SHARE_PER_BLOCK = 0.005  # each swapped block's copies slow the step by this share
SWAP_STALL = 0.5
SWAP_STALL_AT = 32.0
SWAP_STALL_WIDTH = 3.0
HOST_BYTES_PER_GB = 4 * 1024 * 1024
REFERENCE_SIZE = 512 * 512 * 33


class Refused(Exception):
    """Where the real trainer dies on its config: the exception name and its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def block_gb(dim: int) -> float:
    """One transformer block's bfloat16 weights: Wan 14B (dim 5120, 40 blocks) ~28 GB, 1.3B ~2.6 GB."""
    return 0.7 if dim >= 5120 else 0.085


def checkpointing_of(config: dict[str, Any]) -> Any:
    value = config.get("activation_checkpointing", False)
    if value is True or value is False or value == "unsloth":
        return value
    raise Refused("NotImplementedError", f"activation_checkpointing={value} is not implemented")


def swap_slowdown(swapped: int) -> float:
    """How much the block swap slows each step: the offloader's copies share the memory bus with
    compute (a share per swapped block), and around SWAP_STALL_AT blocks its prefetch waits on the
    blocks it evicts (a stall), so a few more swapped blocks can be faster than fewer."""
    if swapped <= 0:
        return 1.0
    stall = SWAP_STALL * math.exp(-(((swapped - SWAP_STALL_AT) / SWAP_STALL_WIDTH) ** 2))
    return 1.0 + SWAP_SHARE_PER_BLOCK * swapped + stall


def model(config: dict[str, Any], bucket: tuple[int, int, int], layers: int, dim: int) -> dict[str, float]:
    """Device peak GB, host GB and the optimizer step's seconds of one config on one bucket."""
    mcfg = config["model"]
    dtype = mcfg.get("transformer_dtype", mcfg["dtype"])
    swapped = int(config.get("blocks_to_swap", 0) or 0)
    ckpt = checkpointing_of(config)
    batch = int(config.get("micro_batch_size_per_gpu", 1))
    accum = int(config.get("gradient_accumulation_steps", 1))
    opt_gb, opt_s = OPTIMIZERS[config["optimizer"]["type"].lower()]
    size = bucket[0] * bucket[1] * bucket[2] / REFERENCE_SIZE
    bgb = block_gb(dim) * DTYPE_SIZE[dtype]
    resident = (layers - swapped + (1 if swapped else 0)) * bgb
    device = OTHER_GB + resident + LORA_GB + opt_gb + batch * ACT_GB[ckpt] * size
    host = swapped * bgb + batch * ACT_HOST_GB[ckpt] * size
    micro = (MICRO_BATCH_S + batch * SAMPLE_S * size) * RECOMPUTE[ckpt] * swap_slowdown(swapped)
    step = accum * micro * (FLOAT8_SLOWDOWN if DTYPE_SIZE[dtype] < 1 else 1.0) + opt_s
    return {"device_gb": device, "host_gb": host, "step_s": step, "samples": batch * accum}


def largest_bucket(dataset: dict[str, Any]) -> tuple[int, int, int]:
    """utils/dataset.py's buckets, the largest by pixels x frames."""
    best = (0, 0, 0)
    for directory in dataset.get("directory", []):
        path = Path(directory["path"])
        if not path.is_dir():
            raise Refused("RuntimeError", f"Invalid path: {path}")
        sizes = directory.get("size_buckets", dataset.get("size_buckets"))
        if sizes is not None:
            cands = [tuple(s) for s in sizes]
        else:
            resolutions = directory.get("resolutions", dataset.get("resolutions"))
            if resolutions is None:
                raise Refused("KeyError", "'resolutions'")
            frames = [*list(directory.get("frame_buckets", dataset.get("frame_buckets", [1]))), 1]
            cands = []
            for res in resolutions:
                w, h = (res, res) if isinstance(res, (int, float)) else res
                cands += [(int(w), int(h), f) for f in frames]
        for c in cands:
            if c[0] * c[1] * c[2] > best[0] * best[1] * best[2]:
                best = (int(c[0]), int(c[1]), int(c[2]))
    return best


SKIPPED_SUFFIXES = (".txt", ".npz", ".json", ".parquet", ".bak", ".db")  # dataset.py:650


def check_samples(dataset: dict[str, Any], global_batch: int) -> None:
    """dataset.py:392-396 on all the folders' captioned files as one bucket (see the docstring)."""
    total = 0
    for directory in dataset.get("directory", []):
        path = Path(directory["path"])
        files = [p for p in path.iterdir() if p.is_file() and p.suffix not in SKIPPED_SUFFIXES]
        captioned = [p for p in files if p.with_suffix(".txt").exists() or (path / "captions.json").exists()]
        total += int(len(captioned) * directory.get("num_repeats", dataset.get("num_repeats", 1)))
    if 0 < total < global_batch:
        print("size bucket is being completely dropped because it doesn't have enough images", flush=True)
        raise Refused(
            "RuntimeError",
            "Processed dataset was empty. Probably caused by rounding down for each size bucket.\n"
            "Try decreasing the global batch size, or increasing num_repeats.",
        )


def wan_shape(mcfg: dict[str, Any]) -> tuple[int, int]:
    """models/wan/wan.py:84-113: config.json beside the weights names the layers and the width."""
    with open(Path(mcfg["ckpt_path"]) / "config.json") as fh:
        cfg = json.load(fh)
    return int(cfg.get("num_layers", 40)), int(cfg["dim"])


def check_config(config: dict[str, Any], layers: int) -> None:
    """The config checks the real trainer makes before training (each cites its line above)."""
    if not any(k in config for k in ("save_every_n_epochs", "save_every_n_steps", "save_every_n_examples")):
        raise Refused("AssertionError", "")
    mcfg = config["model"]
    for key in ("dtype", "transformer_dtype"):
        if key in mcfg and mcfg[key] not in DTYPE_MAP:
            raise Refused("KeyError", repr(mcfg[key]))
    if "adapter" in config and "alpha" in config["adapter"]:
        raise Refused(
            "NotImplementedError",
            "This script forces alpha=rank to make the saved adapter format simpler and more predictable with "
            "downstream inference programs. Please remove alpha from the config.",
        )
    checkpointing_of(config)
    swapped = config.get("blocks_to_swap", 0)
    if swapped:
        if config.get("pipeline_stages", 1) != 1:
            raise Refused("AssertionError", "Block swapping only works with pipeline_stages=1")
        if "adapter" not in config:
            raise Refused("AssertionError", "Block swapping only works when training LoRA")
        if swapped > layers - 2:
            raise Refused(
                "AssertionError",
                f"Cannot swap more than {layers - 2} blocks. Requested {swapped} blocks to swap.",
            )
    name = config["optimizer"]["type"]
    if name.lower() not in OPTIMIZERS:
        raise Refused("AttributeError", f"module 'pytorch_optimizer' has no attribute '{name}'")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--resume_from_checkpoint", nargs="?", const=True, default=None)
    for flag in (
        "--reset_dataloader",
        "--reset_optimizer",
        "--reset_optimizer_params",
        "--regenerate_cache",
        "--cache_only",
        "--trust_cache",
        "--i_know_what_i_am_doing",
        "--test_sample",
    ):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--master_port", type=int, default=29500)
    parser.add_argument("--dump_dataset", type=Path, default=None)
    # deepspeed.add_config_arguments
    parser.add_argument("--deepspeed", default=False, action="store_true")
    parser.add_argument("--deepspeed_config", default=None, type=str)
    return parser.parse_args(argv)


class Hook:
    """The trial-side hook's lines (trials/hook/sitecustomize.py's format), written by the fake."""

    def __init__(self) -> None:
        self.path = os.environ.get("AUTOTUNE_HOOK_FILE")

    def event(self, kind: str, **fields: Any) -> None:
        if self.path:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(hook_text({"event": kind, **fields, "pid": os.getpid()}))


def oom(tried_gb: float, card_gb: float, used_gb: float, hook: Hook) -> int:
    """PyTorch's CUDA OOM as a rank dies of it inside DeepSpeed's train_batch."""
    free = max(0.0, card_gb - used_gb)
    print(
        "Traceback (most recent call last):\n"
        '  File "/home/user/diffusion-pipe/train.py", line 918, in <module>\n'
        "    loss = model_engine.train_batch(iterator).item()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{tried_gb:.2f} GiB. GPU 0 has a total capacity of {card_gb:.2f} GiB of which {free:.2f} GiB is free. "
        f"Including non-PyTorch memory, this process has {used_gb:.2f} GiB memory in use. Of the allocated memory "
        f"{used_gb:.2f} GiB is allocated by PyTorch, and 0.00 GiB is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        file=sys.stderr,
        flush=True,
    )
    hook.event("exit", steps=0, exception="OutOfMemoryError", max_memory_reserved_gb=round(used_gb, 4))
    return 1


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    hook = Hook()
    with open(args.config, "rb") as fh:
        config = tomllib.load(fh)
    try:
        mcfg = config["model"]
        if mcfg["type"] != "wan":
            raise Refused("NotImplementedError", f"fake diffusion-pipe models only wan, not {mcfg['type']}")
        layers, dim = wan_shape(mcfg)
        check_config(config, layers)
        with open(config["dataset"], "rb") as fh:
            dataset = tomllib.load(fh)
        bucket = largest_bucket(dataset)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        accum = int(config.get("gradient_accumulation_steps", 1))
        check_samples(dataset, int(config.get("micro_batch_size_per_gpu", 1)) * accum * world)
    except Refused as exc:
        print(f"Traceback (most recent call last):\n{exc.kind}: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyError as exc:
        print(f"Traceback (most recent call last):\nKeyError: {exc}", file=sys.stderr, flush=True)
        return 1
    m = model(config, bucket, layers, dim)
    held = bytearray(b"\x01") * int(m["host_gb"] * HOST_BYTES_PER_GB)  # really held: the RSS is real
    out = Path(config["output_dir"]) / "20260101_00-00-00"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fake_trained_on.json").write_text(json.dumps({"bucket": bucket, "host_bytes": len(held)}))
    batch = int(config.get("micro_batch_size_per_gpu", 1))
    print(f"Global batch size = {batch * accum * world}", flush=True)  # train.py:633
    card = os.environ.get("AUTOTUNE_EMULATED_VRAM_GB")
    card_gb = float(card) if card else None
    if config.get("eval_before_first_step", True) and config.get("eval_datasets"):
        print("Running eval", flush=True)  # train.py:201
    max_steps = int(config.get("max_steps", 10**9))
    per_print = int(config.get("steps_per_print", 1))
    loss_text = os.environ.get("FAKE_DPIPE_LOSS", "0.1234")
    step = 0
    saved = False
    while step < max_steps:
        step += 1
        if card_gb is not None and m["device_gb"] > card_gb:
            return oom(m["device_gb"] - OTHER_GB, card_gb, OTHER_GB, hook)
        # DeepSpeed times the first step with its warm-up (allocations, kernel selection).
        step_s = m["step_s"] * (1.5 if step == 1 else 1.0)
        if step % per_print == 0 and args.local_rank in (-1, 0):
            samples = batch * accum * world
            print(
                f"steps: {step} loss: {float(loss_text):0.4f} iter time (s): {step_s:0.3f} "
                f"samples/sec: {samples / step_s:0.3f}",
                flush=True,
            )
        hook.event(
            "step",
            step=step,
            t=step,
            step_time_s=step_s,
            max_memory_reserved_gb=round(m["device_gb"], 4),
            max_memory_allocated_gb=round(m["device_gb"], 4),
            loss=float(loss_text),
            counted=False,
        )
        saved = False
        if "save_every_n_steps" in config and step % int(config["save_every_n_steps"]) == 0:
            print(f"Saving model to directory step{step}", flush=True)  # saver.py:112
            (out / f"step{step}").mkdir(exist_ok=True)
            saved = True
    (out / f"global_step{step}").mkdir(exist_ok=True)  # train.py:968-969: the training state
    if not saved:
        print(f"Saving model to directory step{step}", flush=True)
        (out / f"step{step}").mkdir(exist_ok=True)
    hook.event("exit", steps=step, exception=None, max_memory_reserved_gb=round(m["device_gb"], 4))
    print("TRAINING COMPLETE!", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
