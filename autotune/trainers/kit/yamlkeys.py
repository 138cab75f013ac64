"""The LTX-2 config schema's knob keys: what the ltx2 and reference adapters edit, and what the YAML a
command template's ``{config}`` names holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Study param -> the config key it sets.
KNOB_KEYS: dict[str, str] = {
    "quantization": "acceleration.quantization",
    "optimizer": "optimization.optimizer_type",
    "batch_size": "optimization.batch_size",
    "gradient_checkpointing": "optimization.enable_gradient_checkpointing",
}
GRAD_ACCUM_KEY = "optimization.gradient_accumulation_steps"
STEPS_KEY = "optimization.steps"


def get_dotted(data: Mapping[str, Any] | Sequence[Any] | None, dotted: str, default: Any) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node
