"""The adapter contract: what autotune needs to know about one trainer.

An adapter turns the study's params (``quantization``, ``optimizer``,
``batch_size``, ``gradient_checkpointing``, or the trainer's own knob set) plus a
derived gradient accumulation into the trainer's own config and launch command,
and reads the trainer's own numbers back.

Contract (tested against every adapter in ``tests/trainers/test_trainer_contract.py``):
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
- Adapters whose trials run PyTorch (``takes_hook``) take the ``hook`` option (default on): the
  trial-side hook (``trials/hook``) goes first on the trial's ``PYTHONPATH`` and, with ``--vram-gb``,
  emulates that card (``hook_vram_gb``).
- ``traits`` (one ``TrainerTraits``: ``needs_tier_gate``, ``label``...) and the hooks (``emulated_vram_gb``,
  ``with_emulated_vram``, ``launch_argv``) answer what the sweep, the plan, the CLI and the
  report need to know about a trainer: nothing outside ``trainers/`` tests a trainer's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from autotune.core.metrics import TrialMetrics, effective_batch
from autotune.errors import UsageError
from autotune.execution.launch import LaunchSpec
from autotune.trainers.kit.common import check_positive_int, hook_env, metrics_env, write_trial_record
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

#: ``Baseline.extra`` key: the card (GB) the trial-side hook emulates (set by ``with_emulated_vram``).
HOOK_VRAM_KEY = "hook_emulated_vram_gb"
#: ``Baseline.extra`` key: the trials run where no CUDA device is seen (set by ``without_cuda``).
NO_CUDA_KEY = "no_cuda"


@dataclass(frozen=True)
class TrainerTraits:
    """What the sweep, the plan, the CLI and the report need to know about a trainer, answered
    without making an adapter (``adapter_class(name).traits``): one value per adapter class."""

    #: How messages name the trainer ("the LTX-2 trainer").
    label: str = "the trainer"
    #: The trainer runs a command template (``--cmd``); ``--cmd`` with any other trainer is a usage error.
    takes_template: bool = False
    #: ``autotune plan`` knows this trainer's baseline config per VRAM tier (``configs/tiers.yaml`` names
    #: the files); the others sweep the user's own ``--config``.
    plan_baselines: bool = False
    #: The folder under ``configs/`` where this trainer's tier baselines ship with autotune; ``None``:
    #: they are read from the user's trainer checkout (``--trainer-dir``).
    bundled_baselines: str | None = None
    #: Top-level sections this trainer's config holds beyond the LTX-2 schema (not unknown keys).
    config_sections: tuple[str, ...] = ()
    #: The trainer loads its model, text encoder and data from the config's paths, so a plan warns
    #: about each one still as shipped.
    loads_model_paths: bool = False
    #: One training run uses one device: a plan for several GPUs plans one.
    single_device: bool = False
    #: The trainer refuses a card in a tier the tier table marks unsupported (below 32 GB), so the
    #: sweep refuses such a card too unless ``--force``.
    needs_tier_gate: bool = False
    #: The trainer enforces an emulated card size itself (on CPU, or capped on a larger GPU): with
    #: ``--vram-gb N`` the card is one it emulates (``with_emulated_vram``), not one it needs.
    emulates_vram: bool = False
    #: The trials run PyTorch, so the trial-side hook can be injected (the ``hook`` option, default on).
    takes_hook: bool = False
    #: The trainer's configs come in VRAM tiers (``configs/tiers.yaml``), so the report names the
    #: card's tier; to any other trainer a tier like ``below-32GB`` means nothing.
    tiered: bool = False
    #: What in this trainer's data can make a longer run peak higher than a short trial (the
    #: report's short-runs warning): a video trainer's clips, anyone's larger samples.
    longer_input: str = "a longer or larger sample in the data"
    #: Warnings the report adds about how this trainer measures itself (one sentence each).
    report_notes: tuple[str, ...] = ()
    #: How the trainer's own peak figure is taken, for the report when the winner has one (a CPU
    #: run of a trainer that prints 0.00 GB has none: then the note would explain nothing).
    peak_note: str = ""
    #: Why this trainer's own step time may differ from the hook's (the report, past 10 %).
    speed_note: str = (
        "a trainer's own step figure may time one micro-step times the accumulation, be rounded, "
        "be taken without a CUDA synchronize, or average the warm-up in"
    )
    #: The file suffix that suits ``final_config``'s text (``best-config<suffix>``).
    config_suffix: str = ".yaml"
    #: The adapter takes a ``launcher`` option, the argv that runs Python (``--trainer-python PATH``).
    takes_trainer_python: bool = False
    #: Trials run the baseline's validation pass (``--no-validation-in-trials`` turns it off).
    validates_in_trials: bool = False
    #: The full run may drop some of the user's data at a batch (``data_warnings`` says what), so
    #: the report reads the baseline again to ask; the others drop nothing.
    drops_data: bool = False


def read_baseline(
    config: Path | None, from_text: Callable[[str, Path | None], Baseline], missing: str
) -> Baseline:
    """The baseline in the file ``config``, parsed by the adapter's ``from_text``; ``missing`` is the
    error (what to pass) when no ``--config`` was given."""
    from autotune.config.yamlconf import read_config_text  # here: the CLI imports base, not ruamel

    if config is None:
        raise UsageError(missing)
    path = Path(config)
    return from_text(read_config_text(path), path)


class TrainerAdapter(ABC):
    """One trainer. Subclasses set ``name`` and are listed in ``autotune.trainers.registry``."""

    name: ClassVar[str]
    #: File under ``configs/knobs/`` that lists this trainer's knobs, saving -> hungry.
    knob_file: ClassVar[str]
    #: Param -> where the baseline config writes it (a dotted key or a flag), for messages.
    knob_keys: ClassVar[Mapping[str, str]] = {}

    def knob_location(self, baseline: Baseline, param: str) -> str:
        """``FILE: key`` of ``param`` in the baseline, for an error that says where to fix it."""
        return f"{baseline.path or '<config>'}: {self.knob_keys.get(param, param)}"

    @abstractmethod
    def load_baseline(self, config: Path | None) -> Baseline:
        """Read the config to sweep from (``None``: the adapter's own default, if it has one)."""

    @abstractmethod
    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        """The knob values the baseline already has, plus ``gradient_accumulation_steps``."""

    def render(
        self,
        baseline: Baseline,
        params: Params,
        *,
        gradient_accumulation_steps: int,
        steps: int,
        trial_dir: Path,
    ) -> LaunchSpec:
        """Write the trial's config under ``trial_dir`` and return how to launch it.

        The skeleton every trainer shares: the steps check, the trial folder, the trial record, the
        metrics-file env and the hook. What differs (the knob values, the data view, the config and
        the argv) is the adapter's ``write_trial``."""
        check_positive_int("steps", steps)
        trial_dir = Path(trial_dir).resolve()
        trial = self.write_trial(baseline, params, TrialRun(steps, gradient_accumulation_steps, trial_dir))
        gpus = trial.num_gpus if trial.num_gpus is not None else max(1, baseline.num_gpus)
        data_parallel = trial.num_gpus if trial.num_gpus is not None else self.data_parallel(baseline)
        write_trial_record(
            trial_dir,
            trainer=self.name,
            batch_size=trial.batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps,
            num_gpus=gpus,
            effective_batch=effective_batch(trial.batch_size, gradient_accumulation_steps, data_parallel),
            steps=steps,
            **trial.record,
        )
        env = {**trial.env, **metrics_env(trial_dir)}
        if self.hook:  # after the adapter's env: a baseline's PYTHONPATH stays, behind the hook's folder
            env = hook_env(trial_dir, env, vram_gb=self.hook_vram_gb(baseline))
        return LaunchSpec(argv=tuple(trial.argv), cwd=trial.cwd, env=env)

    @abstractmethod
    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        """Write the trial's config under ``run.trial_dir`` (absolute; made here, after any
        ``CandidateRefused``) and say how to launch it (``render`` does the rest)."""

    @abstractmethod
    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        """Read what the trial reported (``output``: its stdout and stderr text)."""

    @abstractmethod
    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        """The winning config in the trainer's own format: the baseline with only the knobs changed."""

    @abstractmethod
    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        """The shell command that runs the full training with ``config_path`` (``final_config`` written there).

        Flag-driven trainers spell the command out from ``winner``'s baseline and params;
        YAML-driven ones need only the path.
        """

    def check_steps(self, steps: int) -> None:
        """Raise ``UsageError`` when trials of ``steps`` optimizer steps are too short for this
        trainer's numbers to give a steady step time (the message says how many are needed).
        By default any number will do."""
        return None

    def steps_warning(self, baseline: Baseline, steps: int) -> str | None:
        """A line for the sweep's start when trials of ``steps`` cannot run as asked (a command
        template with no ``{steps}``: they run the trainer's own length; too few steps for a phase a
        trial runs). ``None``: they can."""
        return None

    def data_warnings(
        self,
        baseline: Baseline,
        *,
        batch_size: int,
        gradient_accumulation_steps: int,
        data_parallel: int,
        max_batch_size: int | None = None,
    ) -> list[str]:
        """Sentences on what the FULL run at this batch trains differently from the user's data (a
        trainer that drops samples short of a global batch), and with ``max_batch_size`` (the plan:
        the sweep's largest) the batch past which it would: the plan and the report show them."""
        return []

    def max_batch_size(self, baseline: Baseline) -> int | None:
        """The largest per-GPU batch the trainer can run with this baseline (None: no known limit)."""
        return None

    def knob_limits(self, baseline: Baseline) -> dict[str, int]:
        """Per-baseline maxima of ``type: count`` knobs (the blocks a model has to swap: 39 for
        Wan 14B, fewer for 1.3B), overriding the knob file's ``max``; empty: the file's."""
        return {}

    def knob_file_data(self, baseline: Baseline, data: Any) -> Any:
        """The parsed knob file as this baseline sweeps it (an adapter may narrow a knob's values to
        the family the baseline's own value belongs to); the default: the file as written."""
        return data

    def knob_path(self) -> Path:
        """This trainer's knob file (``configs/knobs/<knob_file>``, or ``knob_file`` when absolute)."""
        from autotune.config.knobs import knob_path

        return knob_path(self.knob_file)

    #: What the rest of autotune asks of this trainer without options (``adapter_class(name).traits``),
    #: so nothing outside ``trainers/`` branches on a trainer's name.
    traits: ClassVar[TrainerTraits] = TrainerTraits()
    #: This adapter injects the hook (set from the ``hook`` option by adapters that take it).
    hook: bool = False

    def knobs_in_play(self, baseline: Baseline, names: Sequence[str]) -> list[str]:
        """Which of the knob file's ``names`` this trainer really receives with this baseline: the
        sweep varies, shows and judges only those (a template trainer names its own; the others
        receive them all)."""
        return list(names)

    def launch_folder(self) -> Path | None:
        """The folder this adapter's trials run in when it is fixed by how the adapter was made
        (``--cmd``'s working folder), recorded so the report's launch command runs there too;
        ``None``: the folder follows from the baseline (the adapter's own ``render``)."""
        return None

    def emulates_card(self) -> bool:
        """With ``--vram-gb N`` trials run on an emulated N GB card: the trainer's own (``emulates_vram``)
        or the trial-side hook's (``hook``): counted on CPU, capped on a larger GPU."""
        return self.traits.emulates_vram or self.hook

    def emulated_vram_gb(self, baseline: Baseline) -> float | None:
        """The card size (GB) the baseline tells the trainer (or the hook) to emulate; ``None``: none."""
        return self.hook_vram_gb(baseline)

    def with_emulated_vram(self, baseline: Baseline, vram_gb: float) -> Baseline:
        """The baseline set to emulate a ``vram_gb`` card (unchanged where nothing emulates one).

        Here: the hook's card, kept in ``baseline.extra`` (the trainer's config is left as it is);
        a trainer that emulates a card itself overrides this to write its own config."""
        if not self.hook or self.hook_vram_gb(baseline) == vram_gb:
            return baseline
        return replace(baseline, extra={**baseline.extra, HOOK_VRAM_KEY: float(vram_gb)})

    def hook_vram_gb(self, baseline: Baseline) -> float | None:
        """The card the trial-side hook emulates in this baseline's trials (sent to it as env)."""
        value = baseline.extra.get(HOOK_VRAM_KEY) if self.hook else None
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def data_parallel(self, baseline: Baseline) -> int:
        """How many copies of the model train side by side, each on its own batch: what the
        effective batch (batch x accumulation x this) counts. Here: every GPU of the baseline."""
        return max(1, baseline.num_gpus)

    def without_cuda(self, baseline: Baseline) -> tuple[Baseline, list[str]]:
        """The baseline for trials on a host without a CUDA device (no GPU seen), and what that
        changes in every trial, one sentence each (the sweep prints them, the report warns).
        Here: nothing changes; a trainer with a setting that needs CUDA turns it off in trials."""
        return baseline, []

    def launch_argv(self, baseline: Baseline, config_path: Path, *, progress_bars: bool) -> list[str]:
        """The argv that trains ``config_path`` (a config in this trainer's format) on
        ``baseline.num_gpus`` GPUs, run from the trainer's folder: what a trial and ``autotune plan``
        launch. Only trainers driven by a config file have one (``plan_baselines`` needs it)."""
        raise UsageError(f"trainer {self.name!r} is not launched from a config file alone")
