"""The values that pass between autotune and a trainer adapter: the baseline a sweep starts from,
what a trial is asked to run and how it is launched, and the winner to launch the full run of."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A candidate's knob values, by knob name (the study's params).
Params = Mapping[str, Any]


@dataclass
class Baseline:
    """The config a sweep starts from: the trainer's shipped config (paths patched) or the user's.

    ``text`` is the file as written, comments included, so a winning config can be
    written back in the trainer's own format with only the knobs changed.
    """

    trainer: str
    text: str
    data: dict[str, Any]
    path: Path | None = None
    num_gpus: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialRun:
    """What ``render`` asks an adapter's ``write_trial`` for: a run of ``steps`` optimizer steps of
    ``gradient_accumulation_steps`` micro-steps each, written under ``trial_dir`` (absolute)."""

    steps: int
    gradient_accumulation_steps: int
    trial_dir: Path


@dataclass(frozen=True)
class TrialLaunch:
    """What an adapter's ``write_trial`` wrote, for ``render`` to finish: how to launch it, the
    per-GPU batch it trains, and what the trial record holds besides the common fields."""

    argv: Sequence[str]
    cwd: Path
    batch_size: int
    #: What the trainer needs added to the inherited environment (the metrics file and hook come after).
    env: Mapping[str, str] = field(default_factory=dict)
    #: GPUs one step spans (``None``: the baseline's ``num_gpus``).
    num_gpus: int | None = None
    #: More for the trial record (``data_bucket``, ``argv``...).
    record: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Winner:
    """The winner to launch, as the report knows it: what ``training_command`` may spell out. A
    trainer driven by its config file needs none of it, a flag-driven one the baseline, a template
    trainer all of it (its placeholders are filled from it)."""

    baseline: Baseline | None = None
    params: Params | None = None
    gradient_accumulation_steps: int | None = None
    #: The full run's step count (``None``: the baseline config's own).
    steps: int | None = None
    #: The winning trial's folder.
    trial_dir: Path | None = None
    #: A placeholder the command would leave unfilled is an error (the report prints no command with a hole).
    complete: bool = False

    def baseline_or_empty(self, trainer: str) -> Baseline:
        """The winner's baseline, else an empty one of ``trainer`` (the adapter's own defaults)."""
        return self.baseline or Baseline(trainer=trainer, text="", data={})


#: No winner known: the command from the config path alone.
NO_WINNER = Winner()
