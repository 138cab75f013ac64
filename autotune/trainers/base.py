"""The adapter contract: what autotune needs to know about one trainer.

An adapter turns the study's params (``quantization``, ``optimizer``,
``batch_size``, ``gradient_checkpointing``, or the trainer's own knob set) plus a
derived gradient accumulation into the trainer's own config and launch command,
and reads the trainer's own numbers back.

Contract (tested against every adapter in ``tests/test_trainer_contract.py``):
- ``render`` is pure apart from writing files under ``trial_dir``; it never touches
  the baseline file and never writes outside the trial folder.
- ``read_metrics`` never raises on a missing, truncated or garbage log: it returns
  what it could read (possibly an empty ``TrialMetrics``).
- ``baseline_params`` reads the knob values the baseline config already has, so the
  sweep can start from the trainer's own choice.
- ``render`` raises ``CandidateRefused`` (not a ``ConfigError``) for a candidate the trainer
  cannot run at all (say, a batch larger than the dataset), before anything runs; the
  message says why. ``max_batch_size`` tells the sweep that limit up front.
- Every launch env sets ``AUTOTUNE_METRICS_FILE=<trial_dir>/trainer-metrics.json``.
- Adapters take their options as keyword arguments (``get_adapter("ltx2",
  trainer_dir=..., launcher=[...])``); an unknown option is a ``UsageError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from autotune.core.metrics import TrialMetrics
from autotune.execution.launch import LaunchSpec

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


class TrainerAdapter(ABC):
    """One trainer. Subclasses set ``name`` and are listed in ``autotune.trainers.registry``."""

    name: ClassVar[str]
    #: File under ``configs/knobs/`` that lists this trainer's knobs, saving -> hungry.
    knob_file: ClassVar[str]

    @abstractmethod
    def load_baseline(self, config: Path | None) -> Baseline:
        """Read the config to sweep from (``None``: the adapter's own default, if it has one)."""

    @abstractmethod
    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        """The knob values the baseline already has, plus ``gradient_accumulation_steps``."""

    @abstractmethod
    def render(
        self,
        baseline: Baseline,
        params: Params,
        *,
        gradient_accumulation_steps: int,
        steps: int,
        trial_dir: Path,
    ) -> LaunchSpec:
        """Write the trial's config under ``trial_dir`` and return how to launch it."""

    @abstractmethod
    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        """Read what the trial reported (``output``: its stdout and stderr text)."""

    @abstractmethod
    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        """The winning config in the trainer's own format: the baseline with only the knobs changed."""

    @abstractmethod
    def training_command(
        self,
        config_path: Path,
        *,
        baseline: Baseline | None = None,
        params: Params | None = None,
        gradient_accumulation_steps: int | None = None,
    ) -> str:
        """The shell command that runs the full training with ``config_path`` (``final_config`` written there).

        Flag-driven trainers need ``baseline`` and ``params`` to spell the command out;
        YAML-driven ones only the path.
        """

    def max_batch_size(self, baseline: Baseline) -> int | None:
        """The largest per-GPU batch the trainer can run with this baseline (None: no known limit)."""
        return None

    def knob_path(self) -> Path:
        """This trainer's knob file (``configs/knobs/<trainer>.yaml``)."""
        from configs import config_file

        return Path(str(config_file("knobs", self.knob_file)))
