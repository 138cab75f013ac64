"""Parse rendered musubi-tuner trials with musubi-tuner's REAL argument parsers (run in a Python
that can import the checkout's ``musubi_tuner``: torch, toml, accelerate, easydict).

Usage: python musubi_parse.py SRC ROWS.json  -> prints one JSON list, per row ``errors`` and ``seen``.
Executed from the checkout (kohya-ss/musubi-tuner @ 30c658c): accelerate's own ``launch_command_parser``
on the launcher part, ``parser_common.setup_parser_common`` + ``read_config_from_file``, and
``wan_setup_parser`` / ``hv_setup_parser`` taken from their scripts with ``ast`` (the scripts
import the whole model stack at the top). Transcribed, with file:line, what the trainer refuses after
parsing and before any GPU work. Follows shared/real-trainers/parser-checks/musubi_parse.py."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any


def _function(path: Path, name: str, namespace: dict[str, Any]) -> Any:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def main(src: str, rows_path: str) -> None:
    sys.path.insert(0, str(Path(src) / "src"))
    import musubi_tuner.training.parser_common as parser_common
    from accelerate.commands.launch import launch_command_parser
    from musubi_tuner.wan.configs import WAN_CONFIGS

    pkg = Path(parser_common.__file__).resolve().parents[1]
    ns = {"argparse": argparse, "WAN_CONFIGS": WAN_CONFIGS}
    wan_setup = _function(pkg / "wan_train_network.py", "wan_setup_parser", ns)
    hv_setup = _function(pkg / "hv_train_network.py", "hv_setup_parser", ns)
    launch = launch_command_parser()
    out = []
    for row in json.loads(Path(rows_path).read_text()):
        argv = row["argv"]
        at = next(i for i, t in enumerate(argv) if t.endswith(".py"))
        launcher, script, args = argv[:at], argv[at], argv[at + 1 :]
        errors: list[str] = []
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                if launcher[:2] == ["accelerate", "launch"]:
                    launch.parse_args([*launcher[2:], script, *args])
                wan = script.endswith("wan_train_network.py")
                parser = (wan_setup if wan else hv_setup)(parser_common.setup_parser_common())
                parsed = parser_common.read_config_from_file(parser.parse_args(args), parser)
        except SystemExit:
            out.append({"errors": [f"argparse: {err.getvalue().strip()[-300:]}"], "seen": {}})
            continue
        if parsed.fp8_scaled and not parsed.fp8_base:  # trainer_base.py:1398
            errors.append("fp8_scaled requires fp8_base (trainer_base.py:1398)")
        swap = parsed.blocks_to_swap or 0  # trainer_base.py:1496
        if wan:
            if parsed.dit_high_noise is not None and swap > 0 and parsed.offload_inactive_dit:
                errors.append(
                    "Block swap is not supported with offloading inactive DiT (wan_train_network.py:82-86)"
                )
            if swap > WAN_CONFIGS[parsed.task].num_layers - 1:  # wan/modules/model.py:752-754
                errors.append(f"cannot swap {swap} blocks (wan/modules/model.py:752-754)")
        elif swap:
            double, single = swap // 2, (swap - swap // 2) * 2 + 1  # hunyuan_model/models.py:680-681
            if not (double <= 20 - 1 and single <= 40 - 1):  # :683, 20 double / 40 single blocks (:518-519)
                errors.append(f"cannot swap {swap} blocks (hunyuan_model/models.py:683-686)")
        seen = {
            "blocks_to_swap": swap,
            "precision": ("fp8_scaled" if parsed.fp8_scaled else "fp8") if parsed.fp8_base else "bf16",
            "gradient_checkpointing": parsed.gradient_checkpointing,
            "gradient_checkpointing_cpu_offload": int(
                parsed.gradient_checkpointing and parsed.gradient_checkpointing_cpu_offload
            ),
            "optimizer": parsed.optimizer_type.lower(),
            "split_attn": parsed.split_attn,
            "max_train_steps": parsed.max_train_steps,
            "max_train_epochs": parsed.max_train_epochs,
            "gradient_accumulation_steps": parsed.gradient_accumulation_steps,
            "dataset_config": str(parsed.dataset_config),
            "sampling": bool(parsed.sample_prompts or parsed.sample_at_first or parsed.sample_every_n_epochs
                             or parsed.sample_every_n_steps),
            "saving": bool(parsed.save_every_n_epochs or parsed.save_every_n_steps or parsed.save_state),
        }  # fmt: skip
        out.append({"errors": errors, "seen": seen})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
