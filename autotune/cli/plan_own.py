"""``autotune plan --trainer X --config FILE`` for a trainer that ships no tier baselines
(musubi-tuner, diffusion-pipe, ai-toolkit, Sana, ``--cmd``): your own config, checked the way
``autotune sweep`` reads it, the knobs the sweep would try from it, and the sweep command to run.

Why here: it is the sweep's own set-up (``plan_sweep``), run without a trial, so what it prints is
what the sweep would do; nothing is written."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from autotune.errors import UsageError

#: The plan flags that patch a shipped config or write one: they mean nothing for your own config.
_SHIPPED_ONLY = (
    ("model", "--model"),
    ("text_encoder", "--text-encoder"),
    ("data", "--data"),
    ("output_dir", "--output-dir"),
    ("output", "-o"),
    ("gpus", "--gpus"),
)


def own_sweep_argv(args: argparse.Namespace, config: Path) -> list[str]:
    """The ``autotune sweep`` command for this config, every path absolute (it runs from anywhere)."""
    argv = ["autotune", "sweep", "--trainer", args.trainer, "--config", str(config)]
    if args.trainer_dir is not None:
        argv += ["--trainer-dir", str(Path(args.trainer_dir).expanduser().resolve())]
    if args.trainer_python is not None:
        argv += ["--trainer-python", str(Path(args.trainer_python).expanduser().absolute())]
    if args.vram_gb is not None:
        argv += ["--vram-gb", f"{args.vram_gb:g}"]
    return argv


def own_config_plan(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep's set-up for your own config: what it checked and would sweep, and the command."""
    from autotune.cli.sweep_worker import trainer_python
    from autotune.sweep.options import SweepOptions
    from autotune.sweep.setup import plan_sweep

    trainer = args.trainer
    if args.config is None:
        raise UsageError(
            f"'autotune plan --trainer {trainer}' checks your own config (this trainer ships no baseline "
            f"per card tier): add --config FILE, or sweep it at once with 'autotune sweep --trainer {trainer} "
            "--config FILE --vram-gb N'"
        )
    given = [flag for attr, flag in _SHIPPED_ONLY if getattr(args, attr, None) is not None]
    if given or args.force:
        flags = ", ".join([*given, *(["--force"] if args.force else [])])
        raise UsageError(
            f"{flags}: only for a trainer whose shipped baselines 'autotune plan' patches (ltx2, reference); "
            f"for --trainer {trainer} edit your config itself and drop {flags}"
        )
    config = Path(args.config).expanduser().absolute()
    options: dict[str, Any] = {}
    if args.trainer_dir is not None:
        options["trainer_dir"] = args.trainer_dir
    if args.trainer_python is not None:
        options["launcher"] = [trainer_python(args.trainer_python, trainer)]
    opts = SweepOptions(trainer=trainer, config=config, vram_gb=args.vram_gb, trainer_options=options)
    plan = plan_sweep(opts, None if args.vram_gb is not None else True)
    space, base = plan.space, plan.base_candidate
    knobs = [
        {"name": name, "baseline": base.get(name), "values": list(space.knob(name).values)}
        for name in space.names
    ]
    return {
        "trainer": trainer,
        "config_path": str(config),
        "card": plan.card.as_setting(),
        "emulation": plan.card.emulation or None,
        "knobs": knobs,
        "held_back": {n: list(v) for n, v in plan.settings.get("held_back", {}).items()},
        "left_out": list(plan.knobs_left_out),
        "host_changes": list(plan.settings.get("host_changes", [])),
        "candidates": len(space),
        "data": plan.data_warnings(),
        "next": own_sweep_argv(args, config),
    }


def render_own_plan(plan: dict[str, Any]) -> str:
    """The plan as the user reads it: the config checked, the knobs, the command."""
    card = plan["card"]
    lines = [
        f"Trainer: {plan['trainer']} (no shipped baseline per card tier: your own config is the baseline)",
        f"Config: {plan['config_path']} (checked: read as 'autotune sweep' reads it)",
        f"Card: {card['name']} {card['vram_gb']:g} GB"
        + (f" ({plan['emulation']})" if plan["emulation"] else ""),
        f"Knobs it would sweep ({plan['candidates']} candidates; values memory-saving first, * your config's):",
    ]
    for knob in plan["knobs"]:
        shown = [f"*{v}" if v == knob["baseline"] else str(v) for v in knob["values"]]
        lines.append(f"  {knob['name']}: {', '.join(shown)}")
    for name, values in plan["held_back"].items():
        lines.append(
            f"  held back ({name}): {', '.join(map(str, values))}: memory savers your config does not use "
            "(--allow-extra-savers tries them)"
        )
    if plan["left_out"]:
        lines.append(f"  not swept (your config never passes them): {', '.join(plan['left_out'])}")
    lines += [f"Host change: {c}" for c in plan["host_changes"]]
    lines += [f"Data: {d}" for d in plan.get("data", [])]
    lines.append(f"Next: {shlex.join(plan['next'])}")
    return "\n".join(lines)
