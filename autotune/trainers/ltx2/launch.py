"""How an LTX-2 trial is launched beyond its argv: the accelerate config for several GPUs, the
adapter's true/false options, and where to look for the trainer package."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.trainers.base import Baseline
from autotune.trainers.kit.yamlkeys import get_dotted


def accelerate_config_file(choice: str | None, baseline: Baseline, cwd: Callable[[], Path]) -> str | None:
    """``--config_file`` for ``accelerate launch``: the option's choice, else what ``autotune plan``
    chose, else FSDP for full training and DDP for LoRA (the checkout's ``configs/accelerate/``);
    None for plain ``--multi_gpu``."""
    if choice is None and baseline.extra.get("launch_mode") in ("ddp", "fsdp"):
        choice = str(baseline.extra["launch_mode"])  # what ``autotune plan`` chose
    if choice is None:
        choice = "fsdp" if get_dotted(baseline.data, "model.training_mode", "lora") == "full" else "ddp"
    if choice in ("none", ""):
        return None
    if choice in ("ddp", "fsdp"):
        rel = f"configs/accelerate/{choice}.yaml"
        try:
            return rel if (cwd() / rel).is_file() else None
        except UsageError:
            return rel
    return str(choice)


def flag_option(options: Mapping[str, Any], name: str, trainer: str) -> bool:
    """A true/false adapter option that is on unless turned off (a stored ``"False"`` too)."""
    value = options.get(name, True)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise UsageError(f"trainer {trainer!r}: option {name} must be true or false; got {value!r}")
    return value


def package_hints(baseline: Baseline) -> list[Path]:
    """Where to look for the trainer when no ``trainer_dir`` is given: the folders a plan
    recorded, the config's parents, then the current folder and its parents."""
    hints: list[Path] = []
    for name in ("package_dir", "trainer_dir"):  # ``Plan.to_baseline`` knows the package
        if baseline.extra.get(name):
            hints.append(Path(baseline.extra[name]))
    if baseline.path is not None:
        hints.extend(Path(baseline.path).resolve().parents)
    hints.extend([Path.cwd(), *Path.cwd().parents])
    return hints
