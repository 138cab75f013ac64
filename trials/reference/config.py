"""The reference trainer's config: the LTX-2 trainer's schema (the keys that matter) plus ``reference:``.

Like the LTX-2 trainer (pydantic, ``extra="forbid"`` in every section), an unknown or misspelled key
is a hard error, printed as ``Error: Invalid configuration data: ...`` on stdout with exit code 1.
Sections the reference trainer has no use for (validation, checkpoints, wandb, ...) are accepted
with the LTX-2 key names, so a config rendered for a short LTX-2 run drives this trainer unchanged.

This module never imports torch: a bad config fails in a fraction of a second.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """The config is invalid; the message names the key, what was wrong and what is allowed."""


QUANTIZATIONS = ("int8-quanto", "int4-quanto", "int2-quanto", "fp8-quanto", "fp8uz-quanto")
OPTIMIZERS = ("adamw", "adamw8bit")
MIXED_PRECISION = ("no", "fp16", "bf16")
SCHEDULERS = ("constant", "linear", "cosine", "cosine_with_restarts", "polynomial")
DEVICES = ("auto", "cpu", "cuda")

Check = Callable[[str, Any], Any]


def _any(path: str, value: Any) -> Any:
    return value


def _int(minimum: int) -> Check:
    def check(path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer >= {minimum}, got {value!r}")
        if value < minimum:
            raise ConfigError(f"{path}: must be >= {minimum}, got {value}")
        return value

    return check


def _opt_int(minimum: int) -> Check:
    inner = _int(minimum)
    return lambda path, value: None if value is None else inner(path, value)


def _float(minimum: float, *, inclusive: bool = True, maximum: float | None = None) -> Check:
    def check(path: str, value: Any) -> float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string; pydantic accepts it
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        if value < minimum or (not inclusive and value == minimum):
            raise ConfigError(f"{path}: must be {'>=' if inclusive else '>'} {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{path}: must be <= {maximum}, got {value}")
        return float(value)

    return check


def _opt_float(minimum: float, *, inclusive: bool = True) -> Check:
    inner = _float(minimum, inclusive=inclusive)
    return lambda path, value: None if value is None else inner(path, value)


def _bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    return value


def _choice(*allowed: str | None) -> Check:
    def check(path: str, value: Any) -> Any:
        if value not in allowed:
            shown = ", ".join("null" if a is None else repr(a) for a in allowed)
            raise ConfigError(f"{path}: {value!r} is not one of {shown}")
        return value

    return check


def _str_list(path: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: expected a non-empty list of module names, got {value!r}")
    return list(value)


def _int_triple(path: str, value: Any) -> list[int]:
    if not isinstance(value, list) or len(value) != 3:
        raise ConfigError(f"{path}: expected [frames, height, width] patch sizes, got {value!r}")
    return [_int(1)(f"{path}[{i}]", v) for i, v in enumerate(value)]


def _mapping(path: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping, got {value!r}")
    return dict(value)


# Section -> key -> check. Sections and keys are the LTX-2 trainer's (1.2.0); "reference" is ours.
# A nested dict is a sub-section with its own keys; unknown keys anywhere are refused.
Schema = Mapping[str, "Check | Schema"]

SCHEMA: Schema = {
    "model": {
        "model_path": _any,
        "text_encoder_path": _any,
        "video_vae_path": _any,
        "audio_vae_path": _any,
        "training_mode": _choice("lora", "full"),
        "load_checkpoint": _any,
    },
    "lora": {
        "rank": _int(1),
        "alpha": _float(0.0, inclusive=False),
        "dropout": _float(0.0, maximum=0.99),
        "target_modules": _str_list,
    },
    "training_strategy": {
        "name": _any,
        "video": {"is_generated": _any, "latents_dir": _any, "conditions": _any},
        "audio": {"is_generated": _any, "latents_dir": _any},
    },
    "optimization": {
        "learning_rate": _float(0.0, inclusive=False),
        "steps": _int(1),
        "batch_size": _int(1),
        "gradient_accumulation_steps": _int(1),
        "max_grad_norm": _opt_float(0.0, inclusive=False),
        "optimizer_type": _choice(*OPTIMIZERS),
        "scheduler_type": _choice(*SCHEDULERS),
        "scheduler_params": _mapping,
        "enable_gradient_checkpointing": _bool,
    },
    "acceleration": {
        "mixed_precision_mode": _choice(*MIXED_PRECISION),
        "quantization": _choice(None, *QUANTIZATIONS),
        "load_text_encoder_in_8bit": _any,
        "offload_optimizer_during_validation": _any,
    },
    "data": {"preprocessed_data_root": _any, "num_dataloader_workers": _any},
    "validation": {
        k: _any
        for k in (
            *("samples", "audio_cfg_scale", "audio_modality_guidance_scale", "audio_stg_scale", "frame_rate"),
            *("generate_audio", "guidance_rescale", "inference_steps", "interval", "negative_prompt", "seed"),
            *("skip_initial_validation", "stg_blocks", "video_cfg_scale", "video_dims"),
            *(
                "video_modality_guidance_scale",
                "video_stg_scale",
                "prompts",
                "images",
                "videos",
                "reference_videos",
            ),
        )
    },
    "checkpoints": {
        name: _any for name in ("interval", "keep_last_n", "precision", "save_training_state", "no_resume")
    },
    "flow_matching": {"timestep_sampling_mode": _any, "timestep_sampling_params": _any},
    "hub": {"push_to_hub": _any, "hub_model_id": _any},
    "wandb": {"enabled": _any, "project": _any, "entity": _any, "tags": _any, "log_validation_videos": _any},
    "seed": _int(0),
    "output_dir": _any,
    "reference": {
        "device": _choice(*DEVICES),
        "emulated_vram_gb": _opt_float(0.0, inclusive=False),
        "log_interval": _int(1),
        "warmup_steps": _int(0),
        "memory_steps": _opt_int(1),
        "threads": _opt_int(1),
        "validation_steps": _int(0),
        "model": {
            "hidden_dim": _int(8),
            "depth": _int(1),
            "heads": _int(1),
            "mlp_ratio": _int(1),
            "patch_size": _int_triple,
        },
        "data": {
            "num_samples": _int(1),
            "channels": _int(1),
            "frames": _int(1),
            "height": _int(1),
            "width": _int(1),
            "text_tokens": _int(1),
            "text_dim": _int(1),
        },
    },
}

# Sections a config must have, and the keys that must be set in them (every knob explicit).
REQUIRED: dict[str, tuple[str, ...]] = {
    "model": ("training_mode",),
    "optimization": (
        "learning_rate",
        "steps",
        "batch_size",
        "gradient_accumulation_steps",
        "optimizer_type",
        "enable_gradient_checkpointing",
    ),
    "acceleration": ("mixed_precision_mode", "quantization"),
}


@dataclass(frozen=True)
class ModelShape:
    hidden_dim: int = 256
    depth: int = 8
    heads: int = 4
    mlp_ratio: int = 4
    patch_size: tuple[int, int, int] = (1, 2, 2)


@dataclass(frozen=True)
class DataShape:
    num_samples: int = 16
    channels: int = 16
    frames: int = 4
    height: int = 16
    width: int = 16
    text_tokens: int = 16
    text_dim: int = 256

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        return (self.channels, self.frames, self.height, self.width)


@dataclass(frozen=True)
class TrainConfig:
    """The validated settings the trainer acts on."""

    training_mode: str = "lora"
    lora_rank: int = 16
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ("to_k", "to_q", "to_v", "to_out.0")
    learning_rate: float = 1e-4
    steps: int = 20
    batch_size: int = 1
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    optimizer: str = "adamw"
    scheduler: str = "linear"
    scheduler_params: dict[str, Any] = field(default_factory=dict)
    checkpointing: bool = True
    mixed_precision: str = "bf16"
    quantization: str | None = None
    seed: int = 42
    output_dir: Path | None = None
    device: str = "auto"
    emulated_vram_gb: float | None = None
    log_interval: int = 20
    warmup_steps: int = 2
    memory_steps: int | None = 3
    threads: int | None = None
    validation_steps: int = 0  # a validation-like pass after training: this many forwards (0: none)
    model: ModelShape = ModelShape()
    data: DataShape = DataShape()


def _validate(node: Any, schema: Schema, path: str, out: dict[str, Any]) -> None:
    """Check ``node`` against ``schema``; store checked leaves in ``out`` under dotted paths."""
    if not isinstance(node, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {node!r}")
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise ConfigError(
                f"{where}: Extra inputs are not permitted (unknown key; known keys here: {known})"
            )
        rule = schema[key]
        if isinstance(rule, Mapping):
            if value is None:  # LTX-2 allows a null optional section, e.g. "lora: null" for full training
                continue
            _validate(value, rule, where, out)
        else:
            out[where] = rule(where, value)


def parse_config(data: Any) -> TrainConfig:
    """Validate a loaded YAML document; raise ``ConfigError`` naming the first problem."""
    flat: dict[str, Any] = {}
    _validate(data, SCHEMA, "", flat)
    for section, keys in REQUIRED.items():
        for key in keys:
            if f"{section}.{key}" not in flat:
                raise ConfigError(f"{section}.{key}: Field required (write every knob explicitly)")

    def get(key: str, default: Any) -> Any:
        return flat.get(key, default)

    mode = flat["model.training_mode"]
    quant = flat["acceleration.quantization"]
    if mode == "full" and quant is not None:
        raise ConfigError(
            f"acceleration.quantization: {quant!r} cannot be used with model.training_mode 'full' "
            "(quantized weights cannot be trained); set quantization: null or training_mode: lora"
        )
    if mode == "lora":
        for key in ("lora.rank", "lora.alpha", "lora.target_modules"):
            if key not in flat:
                raise ConfigError(f"{key}: Field required when model.training_mode is 'lora'")
    shape = ModelShape(
        hidden_dim=get("reference.model.hidden_dim", ModelShape.hidden_dim),
        depth=get("reference.model.depth", ModelShape.depth),
        heads=get("reference.model.heads", ModelShape.heads),
        mlp_ratio=get("reference.model.mlp_ratio", ModelShape.mlp_ratio),
        patch_size=tuple(get("reference.model.patch_size", ModelShape.patch_size)),
    )
    if shape.hidden_dim % shape.heads:
        raise ConfigError(
            f"reference.model.hidden_dim: {shape.hidden_dim} is not divisible by reference.model.heads {shape.heads}"
        )
    data_shape = DataShape(
        **{k: get(f"reference.data.{k}", getattr(DataShape, k)) for k in DataShape.__dataclass_fields__}
    )
    for axis, size, patch in zip(
        ("frames", "height", "width"), data_shape.latent_shape[1:], shape.patch_size, strict=True
    ):
        if size % patch:
            raise ConfigError(f"reference.data.{axis}: {size} is not divisible by the patch size {patch}")
    batch = flat["optimization.batch_size"]
    if data_shape.num_samples < batch:
        raise ConfigError(
            f"reference.data.num_samples: {data_shape.num_samples} samples cannot fill one batch of "
            f"optimization.batch_size {batch}; raise num_samples"
        )
    out_dir = get("output_dir", None)
    return TrainConfig(
        training_mode=mode,
        lora_rank=get("lora.rank", 16),
        lora_alpha=get("lora.alpha", 16.0),
        lora_dropout=get("lora.dropout", 0.0),
        lora_targets=tuple(get("lora.target_modules", TrainConfig.lora_targets)),
        learning_rate=flat["optimization.learning_rate"],
        steps=flat["optimization.steps"],
        batch_size=batch,
        grad_accum=flat["optimization.gradient_accumulation_steps"],
        max_grad_norm=get("optimization.max_grad_norm", 1.0),
        optimizer=flat["optimization.optimizer_type"],
        scheduler=get("optimization.scheduler_type", "linear"),
        scheduler_params=get("optimization.scheduler_params", {}),
        checkpointing=flat["optimization.enable_gradient_checkpointing"],
        mixed_precision=flat["acceleration.mixed_precision_mode"],
        quantization=quant,
        seed=get("seed", 42),
        output_dir=Path(str(out_dir)) if out_dir is not None else None,
        device=get("reference.device", "auto"),
        emulated_vram_gb=get("reference.emulated_vram_gb", None),
        log_interval=get("reference.log_interval", 20),
        warmup_steps=get("reference.warmup_steps", 2),
        memory_steps=get("reference.memory_steps", 3),
        threads=get("reference.threads", None),
        validation_steps=get("reference.validation_steps", 0),
        model=shape,
        data=data_shape,
    )


def load_config(path: Path) -> TrainConfig:
    """Read and validate a config file; every problem is a ``ConfigError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    return parse_config(data)
