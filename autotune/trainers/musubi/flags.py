"""The musubi-tuner command's knob flags: the baseline's knob values read from its flags, a
candidate's set into them, and the model's block-swap maximum (the facts and their file:line are
in ``autotune.trainers.musubi.adapter``'s docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.errors import CandidateRefused, ConfigError
from autotune.trainers.kit.argv import drop_value_flag, flag_value, has_flag, set_bool_flag, set_value_flag

KNOBS = (
    "blocks_to_swap",
    "precision",
    "gradient_checkpointing",
    "gradient_checkpointing_cpu_offload",
    "optimizer",
    "split_attn",
    "batch_size",
)
PRECISIONS = ("fp8", "fp8_scaled", "bf16")
OPTIMIZERS = ("adamw8bit", "adamw")
#: Training script -> (architecture of its latent caches, dataset/architectures.py:2,4).
SCRIPTS = {"wan_train_network.py": "wan", "hv_train_network.py": "hv"}
#: --task -> DiT blocks (wan/configs/wan_t2v_14B.py:30, wan_t2v_1_3B.py:30, wan_i2v_14B.py:36,
#: wan_*_A14B.py:30); the default task is t2v-14B (wan_train_network.py:723).
WAN_DEFAULT_TASK = "t2v-14B"
#: HunyuanVideo's most swappable blocks: 20 double, 40 single, ``n // 2`` double and
#: ``(n - n // 2) * 2 + 1`` single swapped, at most 19 and 39 (hunyuan_model/models.py:518-519, 680-685).
HV_MAX_SWAP = 38
DATASET_FLAG = "--dataset_config"
STEPS_FLAG = "--max_train_steps"
OUTPUT_FLAG = "--output_dir"
GRAD_ACCUM_FLAG = "--gradient_accumulation_steps"
SWAP_FLAG = "--blocks_to_swap"
OPTIMIZER_FLAG = "--optimizer_type"


def swap_maximum(script: str, args: Sequence[str]) -> int:
    """The most blocks this script's model can swap (``num_blocks - 1``, model.py:752-754);
    0 when Wan 2.2 offloads its inactive expert (``offloads_inactive_dit``)."""
    if Path(script).name == "hv_train_network.py":
        return HV_MAX_SWAP
    if offloads_inactive_dit(args):
        return 0
    task = flag_value(args, "--task") or WAN_DEFAULT_TASK
    layers = 30 if "1.3B" in task else 40
    return layers - 1


def offloads_inactive_dit(args: Sequence[str]) -> bool:
    """Wan 2.2 trains both experts (``--dit_high_noise``) and keeps the inactive one in host RAM
    (``--offload_inactive_dit``): the trainer then asserts that no block is swapped
    (wan_train_network.py:82-86), so the swap knob stays at 0."""
    return flag_value(args, "--dit_high_noise") is not None and has_flag(args, "--offload_inactive_dit")


def precision_of(args: Sequence[str]) -> str:
    """The ``precision`` knob's value the flags spell."""
    if has_flag(args, "--fp8_base"):
        return "fp8_scaled" if has_flag(args, "--fp8_scaled") else "fp8"
    return "bf16"


def set_knob_flags(
    record: Mapping[str, Any], merged: Mapping[str, Any], gradient_accumulation_steps: int
) -> list[str]:
    """The baseline command's args (``record["args"]``) with the knob flags set to ``merged``'s
    values (order kept, new flags at the end); a value the model or the trainer refuses is named."""
    args = list(record["args"])
    swap = merged["blocks_to_swap"]
    limit = swap_maximum(record["script"], args)
    if isinstance(swap, bool) or not isinstance(swap, int) or swap < 0:
        raise ConfigError(f"blocks_to_swap must be a whole number >= 0; got {swap!r}")
    if swap > limit and offloads_inactive_dit(args) and Path(record["script"]).name != "hv_train_network.py":
        raise CandidateRefused(
            f"blocks_to_swap {swap}: with --dit_high_noise and --offload_inactive_dit the trainer "
            "refuses block swap ('Block swap is not supported with offloading inactive DiT', "
            "wan_train_network.py:82-86); drop --offload_inactive_dit from the baseline to sweep it"
        )
    if swap > limit:
        raise CandidateRefused(
            f"blocks_to_swap {swap}: this model has {limit + 1} blocks and swaps at most {limit} "
            "(wan/modules/model.py:752-754, hunyuan_model/models.py:680-685)"
        )
    args = set_value_flag(args, SWAP_FLAG, str(swap)) if swap else drop_value_flag(args, SWAP_FLAG)
    precision = merged["precision"]
    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "fp8_scaled" and record["arch"] != "wan":
        raise CandidateRefused(
            "precision fp8_scaled: HunyuanVideo's trainer has no --fp8_scaled (parser_common.py:384-387)"
        )
    args = set_bool_flag(args, "--fp8_base", precision in ("fp8", "fp8_scaled"))
    args = set_bool_flag(args, "--fp8_scaled", precision == "fp8_scaled")
    gc, offload = merged["gradient_checkpointing"], merged["gradient_checkpointing_cpu_offload"]
    if not isinstance(gc, bool):
        raise ConfigError(f"gradient_checkpointing must be true or false; got {gc!r}")
    if offload not in (0, 1) or isinstance(offload, bool):
        raise ConfigError(f"gradient_checkpointing_cpu_offload must be 1 (on) or 0 (off); got {offload!r}")
    args = set_bool_flag(args, "--gradient_checkpointing", gc)
    args = set_bool_flag(args, "--gradient_checkpointing_cpu_offload", gc and offload == 1)
    optimizer = merged["optimizer"]
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer {optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    given = flag_value(args, OPTIMIZER_FLAG)
    current = (given or "adamw").lower()
    if current in OPTIMIZERS and (current != optimizer or given is None):  # Adafactor stays as it is
        args = set_value_flag(
            args, OPTIMIZER_FLAG, optimizer
        )  # always spelled out (the adapter's docstring says why)
    if not isinstance(merged["split_attn"], bool):
        raise ConfigError(f"split_attn must be true or false; got {merged['split_attn']!r}")
    args = set_bool_flag(args, "--split_attn", merged["split_attn"])
    if gradient_accumulation_steps != 1 or flag_value(args, GRAD_ACCUM_FLAG) is not None:
        args = set_value_flag(args, GRAD_ACCUM_FLAG, str(gradient_accumulation_steps))
    return args
