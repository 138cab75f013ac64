"""The sweep's small pure rules: accumulation, labels, names (fit and throughput: ``core.verdict``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from autotune.core.metrics import effective_batch
from autotune.sweep.options import DEMO_STUDY, SweepOptions


def accumulation_for(batch_size: int, target_effective: int, num_gpus: int = 1) -> tuple[int, int]:
    """``(gradient_accumulation_steps, effective_batch)`` that keep ``target_effective`` where possible
    (``num_gpus``: the adapter's data-parallel copies).

    Accumulation only goes down: a batch past the target runs with accumulation 1
    and a larger effective batch, which the trial records.
    """
    ga = max(1, target_effective // effective_batch(batch_size, 1, num_gpus))
    return ga, effective_batch(batch_size, ga, num_gpus)


def label(params: Mapping[str, Any]) -> str:
    """A short human label for a candidate, like ``int8-quanto adamw8bit bs=4 ckpt``."""
    parts = []
    for key, value in params.items():
        if key == "batch_size":
            parts.append(f"bs={value}")
        elif key == "gradient_checkpointing":
            parts.append("ckpt" if value else "no-ckpt")
        elif key == "quantization":
            parts.append("no-quant" if value in (None, "none") else str(value))
        elif isinstance(value, bool):
            parts.append(key if value else f"no-{key}")
        elif isinstance(value, (int, float)):  # a count or a fraction: the number alone says nothing
            parts.append(f"{key}={value:g}")
        else:
            parts.append(str(value))
    return " ".join(parts)


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def default_study_name(opts: SweepOptions) -> str:
    """Deterministic from the command, so running it again resumes: trainer and config file stem."""
    if opts.demo:
        return DEMO_STUDY
    stem = opts.config.stem if opts.config is not None else "default"
    raw = f"{opts.trainer}-{stem}"
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in raw)[:100]
