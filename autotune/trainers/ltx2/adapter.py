"""The LTX-2 LoRA trainer (``packages/ltx-trainer`` in Lightricks/LTX-2).

A trial is the baseline YAML with the candidate's knobs and the short-run recipe
set, every other line left byte for byte, run as
``uv run python scripts/train.py CONFIG --disable-progress-bars`` in the trainer's
directory. Its numbers come from its own ``Step`` lines and statistics block
(``autotune.trainers.kit.readers.ltx2log``), with the metrics file and the hook, where present, beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.yamlconf import RoundTripConfig
from autotune.core.metrics import TrialMetrics
from autotune.core.space import from_study_value, to_study_value
from autotune.core.timing import WARMUP_STEPS
from autotune.core.yamltext import load_yaml
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.trainers.base import NO_CUDA_KEY, TrainerAdapter, TrainerTraits, read_baseline
from autotune.trainers.kit.common import (
    adapter_options,
    check_params,
    check_positive_int,
    folder_command,
    same_value,
)
from autotune.trainers.kit.readers.ltx2log import MIN_STEPS_FOR_STEP_LINES, STEP_LINE_EVERY
from autotune.trainers.kit.yamlkeys import GRAD_ACCUM_KEY as GRAD_ACCUM_KEY  # re-exported: tests
from autotune.trainers.kit.yamlkeys import KNOB_KEYS as KNOB_KEYS  # re-exported: tests
from autotune.trainers.kit.yamlkeys import STEPS_KEY as STEPS_KEY  # re-exported: tests
from autotune.trainers.kit.yamlkeys import get_dotted
from autotune.trainers.ltx2.checkout import (
    TRAIN_SCRIPT,
    TRAINER_SUBDIR,
    check_batch_fits,
    find_trainer_package,
    sample_limit,
)
from autotune.trainers.ltx2.data import data_sources
from autotune.trainers.ltx2.launch import accelerate_config_file, flag_option, package_hints
from autotune.trainers.ltx2.metrics import read_ltx2_metrics
from autotune.trainers.ltx2.recipe import (
    MIN_STEPS_FOR_VALIDATION,
    TEXT_ENCODER_8BIT_OFF,
    baseline_validates,
    no_validation_warning,
    validates_with_8bit_text_encoder,
)
from autotune.trainers.ltx2.recipe import short_run_recipe as short_run_recipe
from autotune.trainers.ltx2.recipe import trial_recipe as trial_recipe
from autotune.trainers.ltx2.view import DataView, ViewCache, samples_for_trial
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

#: The trainer's code defaults when a key is omitted (they differ from its example files).
CODE_DEFAULTS: dict[str, Any] = {
    "quantization": "none",
    "optimizer": "adamw",
    "batch_size": 2,
    "gradient_checkpointing": False,
    "gradient_accumulation_steps": 1,
}
QUANTIZATIONS = ("int8-quanto", "int4-quanto", "int2-quanto", "fp8-quanto", "fp8uz-quanto", "none")
OPTIMIZERS = ("adamw", "adamw8bit")
RUN_ENV = {"COLUMNS": "250", "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}


#: The error when no --config is given: what to pass.
NO_CONFIG = (
    "trainer {name!r} needs a config to start from: write one with "
    "'autotune plan -o plan.yaml' or pass your own with --config FILE"
)


class Ltx2Adapter(TrainerAdapter):
    """Options: ``trainer_dir`` (the LTX-2 checkout or ``packages/ltx-trainer``; found from the
    config's or the current folder when omitted), ``launcher`` (argv that runs Python, default
    ``["uv", "run", "python"]``; e.g. ``["/path/venv/bin/python"]``, the CLI's ``--trainer-python``;
    its program is checked when the adapter is made), ``accelerate_config``
    (``ddp``, ``fsdp``, a path, or ``none``; default ddp for LoRA, fsdp for full fine-tuning,
    used with several GPUs), ``hook`` (inject the trial-side hook: step times, memory, losses, real
    batches, the ``--vram-gb`` card; default on), ``trial_validation`` (give each trial the
    baseline's validation pass; default on, the CLI's ``--no-validation-in-trials`` turns it off),
    ``data_view`` (train trials on the largest latent bucket through linked samples; default on)."""

    knob_keys: ClassVar[Mapping[str, str]] = {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY}

    name: ClassVar[str] = "ltx2"
    knob_file: ClassVar[str] = "ltx2.yaml"
    #: The real trainer knows every section of the recipe, so missing ones are added.
    create_missing_sections: ClassVar[bool] = True
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="the LTX-2 trainer",
        takes_trainer_python=True,
        # Trials run the baseline's validation pass (``--no-validation-in-trials`` turns it off).
        validates_in_trials=True,
        plan_baselines=True,
        loads_model_paths=True,
        longer_input="a longer clip in the data",
        tiered=True,
        needs_tier_gate=True,
        takes_hook=True,
        peak_note=(
            "The LTX-2 trainer's own peak ('Peak GPU memory') is device-wide nvidia-smi memory, sampled "
            "only at a few points (start, first step, every 200 steps, end) and including other "
            "processes; autotune's own measure is shown beside it."
        ),
        speed_note=(
            "its Time/Step times ONE micro-step (the one that runs the optimizer step) and multiplies it "
            "by the accumulation (GA-copied lines, trainer.py:275), prints it to 2 decimals, without a "
            "CUDA synchronize and with data loading left out; a run too short for a Step line (every 20 "
            "steps, trainer.py:299) has only its Training speed, which averages the whole run in: its "
            "set-up, first steps and validation pass (trainer.py:151, 319-325)"
        ),
    )

    def __init__(self, **options: Any) -> None:
        shared = adapter_options(
            options,
            self.name,
            ("trainer_dir", "launcher", "accelerate_config", "hook", "trial_validation", "data_view"),
        )
        self.trainer_dir, self.launcher, self.hook = shared.trainer_dir, shared.launcher, shared.hook
        self.accelerate_config: str | None = options.get("accelerate_config")
        self.trial_validation = flag_option(options, "trial_validation", self.name)
        self.data_view = flag_option(options, "data_view", self.name)
        self._views = ViewCache()

    #: Without the hook a trial's speed comes from the trainer's ``Step`` lines (every 20 steps).
    times_from_step_lines: ClassVar[bool] = True

    def check_steps(self, steps: int) -> None:
        """Refuse a ``--steps`` too short for a steady step time when only ``Step`` lines time it."""
        if self.hook or not self.times_from_step_lines or steps >= MIN_STEPS_FOR_STEP_LINES:
            return
        raise UsageError(
            f"--steps {steps} is too short to time {self.traits.label} without the hook: it prints a Step line "
            f"only every {STEP_LINE_EVERY} optimizer steps, each timing one micro-step, and the lines "
            f"up to step {WARMUP_STEPS} are warm-up; a steady step time with a spread needs two lines "
            f"past it, so pass --steps {MIN_STEPS_FOR_STEP_LINES} or more (or run the trials with the "
            "trial-side hook, which times every optimizer step)"
        )

    def steps_warning(self, baseline: Baseline, steps: int) -> str | None:
        """Trials too short for their validation pass (``MIN_STEPS_FOR_VALIDATION``) run none: said
        at the sweep's start, since the validation peak then goes unmeasured."""
        if self.trial_validation and steps < MIN_STEPS_FOR_VALIDATION and baseline_validates(baseline.data):
            return no_validation_warning(steps)
        return None

    # --- baseline ------------------------------------------------------------------------------

    def load_baseline(self, config: Path | None) -> Baseline:
        return read_baseline(config, self.baseline_from_text, NO_CONFIG.format(name=self.name))

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        """A baseline from YAML text (a plan held in memory, say); the text is kept verbatim."""
        data = config_mapping(text, str(path) if path else "<config>")
        return Baseline(trainer=self.name, text=text, data=data, path=path)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for param, key in {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY}.items():
            value = get_dotted(baseline.data, key, CODE_DEFAULTS[param])
            out[param] = to_study_value(value) if param == "quantization" else value
        return out

    # --- rendering -----------------------------------------------------------------------------

    def knob_values(
        self, baseline: Baseline, params: Params, gradient_accumulation_steps: int
    ) -> list[tuple[str, Any]]:
        """(config key, YAML value) for each knob, baseline values where ``params`` leaves one out."""
        check_params(params, KNOB_KEYS, self.name)
        merged = {**self.baseline_params(baseline), **params}
        check_knob_values(
            merged, gradient_accumulation_steps, get_dotted(baseline.data, "model.training_mode", "lora")
        )
        quant_value = from_study_value(merged["quantization"])
        return [
            (KNOB_KEYS["quantization"], quant_value),
            (KNOB_KEYS["optimizer"], merged["optimizer"]),
            (KNOB_KEYS["batch_size"], merged["batch_size"]),
            (GRAD_ACCUM_KEY, gradient_accumulation_steps),
            (KNOB_KEYS["gradient_checkpointing"], merged["gradient_checkpointing"]),
        ]

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        values = self.knob_values(baseline, params, run.gradient_accumulation_steps)
        batch = dict(values)[KNOB_KEYS["batch_size"]]
        cwd = self.cwd(baseline)
        limit = self._sample_limit(baseline, cwd)
        check_batch_fits(batch, limit, baseline.num_gpus, data_sources(baseline.data))
        cfg = RoundTripConfig.from_text(baseline.text, str(baseline.path or "<baseline>"))
        edits = {k: v for k, v in values if not cfg.has(k) or not same_value(cfg.get(k), v)}
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        recipe = trial_recipe(
            baseline.data,
            run.steps,
            run.trial_dir,
            validation=self.trial_validation,
            cuda=not baseline.extra.get(NO_CUDA_KEY),
        )
        needed = samples_for_trial(
            batch * max(1, baseline.num_gpus), run.steps * run.gradient_accumulation_steps
        )
        view = self._data_view(baseline, limit, run.trial_dir, needed)
        if view is not None:
            recipe.append(("data.preprocessed_data_root", str(view.root)))
        cfg.set_many({**edits, **recipe_edits(cfg, recipe, create_sections=self.create_missing_sections)})
        config_path = run.trial_dir / "config.yaml"
        config_path.write_text(cfg.dump(), encoding="utf-8")
        record = {
            "validation_step": run.steps - 1 if dict(recipe).get("validation.interval") else None,
            "data_bucket": view.describe() if view is not None else None,
        }
        argv = self.launch_argv(baseline, config_path, progress_bars=False)
        return TrialLaunch(argv=argv, cwd=cwd, batch_size=batch, env=RUN_ENV, record=record)

    def without_cuda(self, baseline: Baseline) -> tuple[Baseline, list[str]]:
        """Trials that run the validation pass load the text encoder without 8-bit: the trainer
        refuses its 8-bit Gemma without CUDA (gemma_8bit.py:81-86), so the baseline would crash."""
        off = self.trial_validation and validates_with_8bit_text_encoder(baseline.data)
        return replace(baseline, extra={**baseline.extra, NO_CUDA_KEY: True}), [
            TEXT_ENCODER_8BIT_OFF
        ] if off else []

    def _data_view(
        self, baseline: Baseline, limit: tuple[int, Path, int] | None, trial_dir: Path, needed: int
    ) -> DataView | None:
        """The largest bucket's samples linked under the trial folder (None: data not here or unread)."""
        if not self.data_view or limit is None:
            return None
        return self._views.build(limit[1], data_sources(baseline.data), trial_dir, needed)

    def launch_argv(self, baseline: Baseline, config_path: Path, *, progress_bars: bool) -> list[str]:
        script = [*self.script_argv(config_path)]
        if not progress_bars:
            script.append("--disable-progress-bars")
        gpus = max(1, baseline.num_gpus)
        if gpus == 1:
            return [*self.python_launcher(), *script]
        argv = self.accelerate_launcher()
        accel = self._accelerate_config_file(baseline)
        argv += ["--config_file", accel] if accel else ["--multi_gpu"]
        return [*argv, "--num_processes", str(gpus), *self.accelerate_script_argv(script)]

    def script_argv(self, config_path: Path) -> list[str]:
        return [TRAIN_SCRIPT, str(config_path)]

    def accelerate_script_argv(self, script: list[str]) -> list[str]:
        return script

    def python_launcher(self) -> list[str]:
        return self.launcher if self.launcher is not None else ["uv", "run", "python"]

    def accelerate_launcher(self) -> list[str]:
        if self.launcher is None:
            return ["uv", "run", "accelerate", "launch"]
        return [*self.launcher, "-m", "accelerate.commands.launch"]

    def _accelerate_config_file(self, baseline: Baseline) -> str | None:
        return accelerate_config_file(self.accelerate_config, baseline, lambda: self.cwd(baseline))

    # --- where the trainer lives ---------------------------------------------------------------

    def cwd(self, baseline: Baseline) -> Path:
        """The trainer's package folder (holding ``scripts/train.py``), where trials run."""
        hints = [] if self.trainer_dir is not None else package_hints(baseline)
        return find_trainer_package(self.trainer_dir, hints)

    def max_batch_size(self, baseline: Baseline) -> int | None:
        try:
            limit = self._sample_limit(baseline, self.cwd(baseline))
        except UsageError:
            return None
        return limit[0] if limit else None

    def _sample_limit(self, baseline: Baseline, cwd: Path) -> tuple[int, Path, int] | None:
        """(largest per-GPU batch, data root, sample count) when the preprocessed data is here."""
        root = get_dotted(baseline.data, "data.preprocessed_data_root", None)
        return sample_limit(root, data_sources(baseline.data), cwd, baseline.num_gpus)

    # --- reading -------------------------------------------------------------------------------

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        return read_ltx2_metrics(trial_dir, output, self._trainer_order)

    def _trainer_order(self, log: TrialMetrics, file: TrialMetrics) -> list[TrialMetrics]:
        """The trainer's own readings, the better first (the hook's is not among them: ``combine``)."""
        return [log, file]

    # --- the full run --------------------------------------------------------------------------

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        cfg = RoundTripConfig.from_text(baseline.text, str(baseline.path or "<baseline>"))
        knobs = self.knob_values(baseline, params, gradient_accumulation_steps)
        cfg.set_many({k: v for k, v in knobs if not cfg.has(k) or not same_value(cfg.get(k), v)})
        return cfg.dump()

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        base = winner.baseline_or_empty(self.name)
        config_path = Path(config_path).resolve()
        argv = self.launch_argv(base, config_path, progress_bars=True)
        try:
            cwd = str(self.cwd(base))
        except UsageError:
            cwd = TRAINER_SUBDIR
        return folder_command(cwd, argv)


def check_knob_values(
    merged: Mapping[str, Any], gradient_accumulation_steps: int, training_mode: Any
) -> None:
    """A ``ConfigError`` for a knob value the LTX-2 trainer does not take (study values: ``none``
    for no quantization); ``CandidateRefused`` for quantization with full training, which it rejects."""
    quant = merged["quantization"]
    if quant not in QUANTIZATIONS and quant is not None:
        raise ConfigError(f"quantization {quant!r} is not one of {', '.join(QUANTIZATIONS)}")
    if merged["optimizer"] not in OPTIMIZERS:
        raise ConfigError(f"optimizer {merged['optimizer']!r} is not one of {', '.join(OPTIMIZERS)}")
    check_positive_int("batch_size", merged["batch_size"])
    check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
    if not isinstance(merged["gradient_checkpointing"], bool):
        raise ConfigError(
            f"gradient_checkpointing must be true or false; got {merged['gradient_checkpointing']!r}"
        )
    quant_value = from_study_value(quant)
    if quant_value is not None and training_mode == "full":
        raise CandidateRefused(
            f"quantization {quant_value} with model.training_mode 'full' is rejected by the LTX-2 "
            "trainer; sweep quantization only for LoRA training"
        )


def config_mapping(text: str, source: str) -> dict[str, Any]:
    """A config's YAML text parsed: a mapping of sections (an empty file is an empty one)."""
    data = load_yaml(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections (model:, optimization:, ...) at the top")
    return data


def recipe_edits(
    cfg: RoundTripConfig, recipe: list[tuple[str, Any]], *, create_sections: bool
) -> dict[str, Any]:
    """The recipe's keys the config does not already hold as such (a line already so stays as
    written); a key whose section the config lacks only when ``create_sections``."""
    edits: dict[str, Any] = {}
    for key, value in recipe:
        if cfg.has(key) and same_value(cfg.get(key), value):
            continue
        if create_sections or "." not in key or cfg.has(key.rsplit(".", 1)[0]):
            edits[key] = value
    return edits
