"""``autotune probe`` and ``autotune plan``: the card and the trainer's baseline for it.

The flags and their help texts, and handlers that call ``autotune.gpu.probe`` and
``autotune.plan.baseline`` and print what they return.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.cli.base import EXIT_OK, TrainerFlag, positive_int, vram_gb

# --- probe -------------------------------------------------------------------------------------


def add_probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "probe",
        help="list the GPUs, their memory and the VRAM tier",
        description=(
            "List the GPUs this process can use (NVML, honouring CUDA_VISIBLE_DEVICES by index or UUID), "
            "their memory and driver, and the VRAM tier of the smallest card, which decides the baseline. "
            "No driver or no GPU is a normal answer (exit 0): plan for a card with 'autotune plan --vram-gb N', "
            "or run the CPU demo with 'autotune sweep'."
        ),
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object instead of text (keys include "available", "gpus", "tier", "vram_gb")',
    )
    p.set_defaults(handler=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> int:
    import json

    from autotune.gpu.probe import probe

    result = probe()
    print(json.dumps(result.to_json(), indent=2) if args.json else result.render_text())
    return EXIT_OK


# --- plan --------------------------------------------------------------------------------------


def add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="the trainer's baseline config for this card's tier, paths patched",
        description=(
            "Pick the VRAM tier of your card (from the probe, or --vram-gb), read the trainer's own shipped "
            "config for that tier from your checkout (LTX-2: t2v_lora_low_vram.yaml below 80 GB, t2v_lora.yaml "
            "from 80 GB), check its keys, patch only the paths (made absolute and checked), and write it. "
            "Cards below 32 GB are refused unless --force. "
            "Example: autotune plan --trainer-dir ~/LTX-2 --model ~/models/ltx-2.safetensors "
            "--text-encoder ~/models/gemma --data ~/data/preprocessed --output-dir ~/runs/lora"
        ),
    )
    p.add_argument(
        "--trainer",
        default="ltx2",
        action=TrainerFlag,
        plans=True,
        metavar="NAME",
        help="whose baselines to plan from (default: ltx2); any other trainer of 'autotune sweep --help' "
        "ships none per card tier: give your own --config FILE and the plan checks it, prints the knobs "
        "the sweep would try and the sweep command to run",
    )
    p.add_argument(
        "--trainer-dir",
        type=Path,
        metavar="DIR",
        help="your LTX-2 checkout: the repo root or its packages/ltx-trainer; without it the plan names "
        "the tier and baseline only",
    )
    p.add_argument(
        "--trainer-python",
        type=Path,
        metavar="PATH",
        help="the Python of the environment the trainer is installed in (a trainer installed without "
        "uv): the launch line and the next sweep command use it instead of 'uv run'",
    )
    p.add_argument(
        "--vram-gb",
        type=vram_gb,
        metavar="N",
        help="plan for a card of N GB instead of probing (e.g. 32, 48, 79.6, 141)",
    )
    p.add_argument(
        "--gpus",
        type=positive_int("--gpus"),
        metavar="N",
        help="number of GPUs to train on (default: the visible cards of one model, or 1 with --vram-gb)",
    )
    p.add_argument(
        "--config",
        metavar="NAME",
        help="another shipped config by name instead of the tier's (e.g. i2v_lora), or a path to your own YAML",
    )
    p.add_argument("--model", type=str, metavar="FILE", help="local model checkpoint (.safetensors, no URL)")
    p.add_argument(
        "--text-encoder",
        type=str,
        metavar="PATH",
        help="local Gemma text encoder directory (or packed .safetensors)",
    )
    p.add_argument(
        "--data",
        type=str,
        metavar="DIR",
        help="preprocessed dataset folder (with latents/, conditions/, ...)",
    )
    p.add_argument(
        "--output-dir",
        type=str,
        metavar="DIR",
        help="where training writes checkpoints (default: the shipped output_dir, made absolute)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="plan for a card below 32 GB anyway (the low-VRAM config, at your own risk)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write the planned config (default: autotune-runs/plan.yaml)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"tier", "vram_gb", "baseline", "config_path", "launch", "warnings", ...}',
    )
    p.unknown_hints = {
        "--cmd": "'autotune plan' has nothing for a --cmd template (it writes a trainer's shipped baseline "
        "for the card's tier, or checks your --config): run 'autotune sweep --cmd TEMPLATE' instead"
    }
    p.set_defaults(handler=cmd_plan)


#: ``autotune plan``'s options that ``make_plan`` takes, under the same names.
PLAN_FLAGS = (
    "trainer", "trainer_dir", "vram_gb", "gpus", "config", "model", "text_encoder", "data", "output_dir",
    "force", "output", "trainer_python",
)  # fmt: skip


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from autotune.plan.baseline import make_plan, write_plan
    from autotune.trainers import adapter_class, adapter_names

    if args.trainer in adapter_names() and not adapter_class(args.trainer).traits.plan_baselines:
        from autotune.cli.plan_own import own_config_plan, render_own_plan

        own = own_config_plan(args)
        print(json.dumps(own, indent=2) if args.json else render_own_plan(own))
        return EXIT_OK

    plan = make_plan(**{name: getattr(args, name) for name in PLAN_FLAGS})
    if plan.text is not None:
        write_plan(plan)
    print(json.dumps(plan.to_json(), indent=2) if args.json else plan.render_text())
    return EXIT_OK
