"""Read rendered diffusion-pipe trial configs as diffusion-pipe reads them (run in a Python with
torch and toml).

Usage: python dpipe_parse.py SRC ROWS.json -> prints one JSON list, per row ``errors`` and ``seen``.
Executed from the checkout (tdrussell/diffusion-pipe @ 8f83dbf): the config load
(``json.loads(json.dumps(toml.load(f)))``, train.py:282-284) and ``set_config_defaults``
(train.py:93-146) and ``DTYPE_MAP`` (utils/common.py:14-21), taken with ``ast`` (the modules import
deepspeed). Transcribed, with file:line, the checks of ``__main__`` that need DeepSpeed or a GPU to
reach. Follows shared/real-trainers/parser-checks/dpipe_parse.py."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import toml
import torch


def _take(path: Path, name: str, ns: dict[str, Any]) -> Any:
    for node in ast.parse(path.read_text()).body:
        named = isinstance(node, ast.FunctionDef) and node.name == name
        assigned = isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)
        if named or assigned:
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), ns)
            return ns[name]
    raise KeyError(name)


def main(src: str, rows_path: str) -> None:
    ns: dict[str, Any] = {"torch": torch}
    dtypes = _take(Path(src) / "utils" / "common.py", "DTYPE_MAP", ns)
    set_config_defaults = _take(Path(src) / "train.py", "set_config_defaults", ns)
    out = []
    for row in json.loads(Path(rows_path).read_text()):
        errors: list[str] = []
        with open(row["config"]) as f:  # train.py:282-284
            config = json.loads(json.dumps(toml.load(f)))
        set_config_defaults(config)
        with open(config["dataset"]) as f:  # train.py:393
            dataset = toml.load(f)
        blocks = config.get("blocks_to_swap", 0)
        if blocks:  # train.py:576-578
            if config["pipeline_stages"] != 1:
                errors.append("Block swapping only works with pipeline_stages=1 (train.py:577)")
            if "adapter" not in config:
                errors.append("Block swapping only works when training LoRA (train.py:578)")
            if config["model"]["type"] == "hunyuan-video":  # models/hunyuan_video.py:500-508, 20/40 blocks
                double, single = blocks // 2, (blocks - blocks // 2) * 2 + 1
                if not (double <= 20 - 2 and single <= 40 - 2):
                    errors.append(f"cannot swap {blocks} blocks (hunyuan_video.py:505-508)")
        checkpointing = config["activation_checkpointing"]  # train.py:587-598
        if checkpointing and checkpointing is not True and checkpointing != "unsloth":
            errors.append(f"activation_checkpointing={checkpointing} (train.py:587-598)")
        if "epochs" not in config:
            errors.append("KeyError: epochs (utils/saver.py:140)")
        model = config["model"]
        dtype = model.get("transformer_dtype", model["dtype"])  # set_config_defaults maps names to dtypes
        dtype = dtypes[dtype] if isinstance(dtype, str) else dtype
        seen = {
            "blocks_to_swap": blocks,
            "transformer_dtype": next(k for k, v in dtypes.items() if v == dtype),
            "activation_checkpointing": checkpointing,
            "optimizer": config["optimizer"]["type"],
            "batch_size": config.get("micro_batch_size_per_gpu", 1),  # train.py:396-400
            "gradient_accumulation_steps": config.get("gradient_accumulation_steps", 1),
            "max_steps": config.get("max_steps"),
            "eval_before_first_step": config["eval_before_first_step"],
            "save_every_n_steps": config.get("save_every_n_steps"),
            "pipeline_stages": config["pipeline_stages"],
            "resolutions": dataset.get("resolutions"),
            "frame_buckets": dataset.get("frame_buckets"),
        }
        out.append({"errors": errors, "seen": seen})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
