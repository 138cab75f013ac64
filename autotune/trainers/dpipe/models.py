"""What diffusion-pipe's models allow (tdrussell/diffusion-pipe @ 8f83dbf): the dtype names, the
checkpointing modes, which model types read ``transformer_dtype`` or swap blocks, and how many
blocks each can swap. Pure apart from reading a Wan checkpoint's ``config.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: utils/common.py:14-21: the dtype names the trainer maps (``nf4`` is not one: train.py:110 would
#: fail on it before HiDream's nf4 branch, models/hidream.py:96, is reached).
DTYPES = ("float32", "float16", "bfloat16", "float8", "float8_e4m3fn", "float8_e5m2")
#: train.py:587-598: what ``activation_checkpointing`` may be.
CHECKPOINTING: tuple[bool | str, ...] = (False, True, "unsloth")
#: Model types whose loaders read ``transformer_dtype`` (grep of models/*.py @ 8f83dbf).
TRANSFORMER_DTYPE_MODELS = frozenset(
    {
        "auraflow",
        "chroma",
        "cosmos_predict2",
        "flux",
        "hidream",
        "hunyuan_image",
        "hunyuan-video",
        "ltx-video",
        "qwen_image",
        "sd3",
        "wan",
    }
)
#: Model types with ``enable_block_swap`` (models/base.py:438 raises for the rest), type names as
#: train.py:310-390 dispatches them.
BLOCK_SWAP_MODELS = frozenset(
    {
        "auraflow",
        "chroma",
        "cosmos_predict2",
        "ernie_image",
        "flux",
        "flux2",
        "hidream",
        "hunyuan_image",
        "hunyuan-video",
        "hunyuan_video_15",
        "ideogram4",
        "krea2",
        "ltx2",
        "minimax_h3",
        "qwen_image",
        "wan",
        "z_image",
    }
)
#: The most blocks a model swaps, where its block count is fixed: qwen_image's 60 layers
#: (configs/qwen_image/transformer/config.json) less 2 (models/qwen_image.py:494-496); flux's
#: 19 double / 38 single (configs/flux_dev_config.json) with swap//2 double and
#: (swap - swap//2)*2+1 single blocks, each at most count - 2 (models/flux.py:410-419): 34;
#: HunyuanVideo's 20 double / 40 single blocks (its checkpoints' mm_double/single_blocks_depth)
#: split the same way, at most 18 and 38 (models/hunyuan_video.py:494-508): 36.
FIXED_SWAP_LIMITS = {"qwen_image": 58, "flux": 34, "hunyuan-video": 36}
#: Wan's block count is its checkpoint's ``num_layers`` (config.json beside the weights,
#: models/wan/wan.py:84-113); 40 for the 14B, 30 for the 1.3B (models/wan/configs.py).
WAN_DEFAULT_LAYERS = 40


def swap_limit(model: Mapping[str, Any], cwd: Path | None) -> int | None:
    """The most blocks ``[model]`` can swap (``None``: not known here; the knob file's ``max``)."""
    model_type = model.get("type")
    if model_type in FIXED_SWAP_LIMITS:
        return FIXED_SWAP_LIMITS[str(model_type)]
    if model_type == "wan":
        return _wan_layers(model, cwd) - 2
    return None


def _wan_layers(model: Mapping[str, Any], cwd: Path | None) -> int:
    """Wan's block count from its checkpoint's config.json (models/wan/wan.py:84-113)."""
    ckpt = model.get("ckpt_path")
    if not isinstance(ckpt, str):
        return WAN_DEFAULT_LAYERS
    root = Path(ckpt).expanduser()
    if not root.is_absolute() and cwd is not None:
        root = cwd / root
    transformer = model.get("transformer_path")
    candidates = []
    if isinstance(transformer, str) and Path(transformer).is_dir():
        candidates.append(Path(transformer) / "config.json")
    candidates += [root / "config.json", root / "low_noise_model" / "config.json"]
    for candidate in candidates:
        try:
            layers = json.loads(candidate.read_text(encoding="utf-8")).get("num_layers")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(layers, int) and layers > 2:
            return layers
    return WAN_DEFAULT_LAYERS
