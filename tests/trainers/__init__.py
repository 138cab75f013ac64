"""One folder per trainer, each with a ``case.py`` whose ``CASE`` says how to build that trainer's
adapter and baseline for the contract suite (``tests/trainers/test_trainer_contract.py``): a new trainer adds
its folder here and nothing else there."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.trainers import Baseline, TrainerAdapter

HERE = Path(__file__).resolve().parent


@dataclass
class Case:
    """One trainer in the contract suite: its name, how to make its adapter and baseline in a
    folder, params that change every knob, and output in the trainer's own format."""

    name: str
    make: Callable[[Path], tuple[TrainerAdapter, Baseline]]
    params: dict[str, Any]
    output: str
    yaml_config: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    trial_config: str = "config.yaml"


def cases() -> list[Case]:
    """Every ``tests/trainers/*/case.py``'s ``CASE``, in folder order."""
    found = []
    for path in sorted(HERE.glob("*/case.py")):
        module = importlib.import_module(f"{__name__}.{path.parent.name}.case")
        found.append(module.CASE)
    return found
