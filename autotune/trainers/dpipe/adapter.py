"""diffusion-pipe (tdrussell/diffusion-pipe): one TOML config plus a dataset TOML, run by DeepSpeed.

Facts from the trainer's source at 8f83dbf (``train.py`` unless named):
- launch: ``deepspeed --num_gpus=1 train.py --deepspeed --config CONFIG`` from the checkout
  (README.md:118); ``deepspeed`` is ``python -m deepspeed.launcher.runner`` (DeepSpeed bin/ds @
  38327e0), so ``--trainer-python PATH`` runs that module with the checkout's Python;
- the config is TOML (train.py:282-284), its ``dataset`` key a path to the dataset TOML opened from
  the working folder (train.py:393);
- knobs: ``blocks_to_swap`` (train.py:576, LoRA only :578, ``pipeline_stages = 1`` only :577; at most
  the model's blocks - 2, e.g. models/wan/wan.py:389-392), ``[model] transformer_dtype`` (a
  ``DTYPE_MAP`` name, train.py:109-110 and utils/common.py:14-21; absent means ``[model] dtype``,
  models/wan/wan.py:216), ``activation_checkpointing`` (``true``, ``'unsloth'``, default false:
  train.py:97-101, 587-598), ``[optimizer] type`` (case-insensitive, train.py:654-697),
  ``micro_batch_size_per_gpu`` (default 1, train.py:396-400) and ``gradient_accumulation_steps``
  (default 1, train.py:425).
The short-run recipe lives in ``dpipe.recipe``, the largest data bucket in ``dpipe.data``; the
numbers come from DeepSpeed's step lines (``readers/dslog``) and the hook.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.tomledit import TomlConfig, load_toml_data
from autotune.config.yamlconf import read_config_text
from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.verdict import combine
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.trainers.base import Baseline, Params, TrainerAdapter, TrainerTraits, TrialLaunch
from autotune.trainers.dpipe.data import describe, keep_largest_bucket
from autotune.trainers.dpipe.models import (
    BLOCK_SWAP_MODELS,
    CHECKPOINTING,
    DTYPES,
    TRANSFORMER_DTYPE_MODELS,
    swap_limit,
)
from autotune.trainers.dpipe.recipe import (
    CONFIG_NAME,
    DATASET_NAME,
    recipe_edits,
)
from autotune.trainers.kit.common import (
    check_params,
    check_positive_int,
    effective_batch_of,
    hook_option,
    launcher_option,
    read_trial_record,
    same_value,
    take_options,
)
from autotune.trainers.kit.output import read_output, trainer_reading
from autotune.trainers.kit.readers.dslog import read_deepspeed_steps
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME, read_hook_file
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file

#: Study param -> the config key it sets (dotted: ``model.transformer_dtype`` is ``[model]``'s).
KNOB_KEYS: dict[str, str] = {
    "blocks_to_swap": "blocks_to_swap",
    "transformer_dtype": "model.transformer_dtype",
    "activation_checkpointing": "activation_checkpointing",
    "optimizer": "optimizer.type",
    "batch_size": "micro_batch_size_per_gpu",
}
GRAD_ACCUM_KEY = "gradient_accumulation_steps"
RUN_ENV = {"PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}


class DiffusionPipeAdapter(TrainerAdapter):
    """Options: ``trainer_dir`` (the diffusion-pipe checkout, holding ``train.py``; found from the
    config's folder or the current one when omitted), ``launcher`` (argv that runs Python, the CLI's
    ``--trainer-python``: trials then run ``PYTHON -m deepspeed.launcher.runner``; default the
    ``deepspeed`` command), ``hook`` (inject the trial-side hook; default on)."""

    knob_keys: ClassVar[Mapping[str, str]] = {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY}

    name: ClassVar[str] = "diffusion-pipe"
    knob_file: ClassVar[str] = "diffusion-pipe.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="diffusion-pipe",
        takes_hook=True,
        takes_trainer_python=True,
        config_suffix=".toml",
        longer_input="a larger resolution or longer frame bucket in the data",
        report_notes=(
            "diffusion-pipe's own step time is DeepSpeed's 'iter time (s)' (one optimizer step, every "
            "micro-batch of the accumulation in it); its samples/sec is micro batch x accumulation x "
            "data-parallel GPUs over that time.",
        ),
    )

    def __init__(self, **options: Any) -> None:
        take_options(options, self.name, ("trainer_dir", "launcher", "hook"))
        trainer_dir = options.get("trainer_dir")
        self.trainer_dir = Path(trainer_dir) if trainer_dir else None
        self.launcher: list[str] | None = launcher_option(options)
        self.hook = hook_option(options, self.name)

    # --- baseline ------------------------------------------------------------------------------

    def load_baseline(self, config: Path | None) -> Baseline:
        if config is None:
            raise UsageError(
                "diffusion-pipe needs your training config: pass it with --config FILE.toml "
                "(its `dataset = '...'` names the dataset config)"
            )
        path = Path(config)
        return self.baseline_from_text(read_config_text(path), path=path)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        source = str(path) if path else "<config>"
        data = load_toml_data(text, source)
        batch = data.get(KNOB_KEYS["batch_size"], 1)
        if isinstance(batch, list):  # train.py:399-400: per-resolution batch sizes
            raise ConfigError(
                f"{source}: micro_batch_size_per_gpu is a per-resolution list ({batch!r}); autotune sweeps "
                "one batch size: set micro_batch_size_per_gpu = N (the trials train the largest "
                "resolution only) and run again"
            )
        if not isinstance(data.get("model"), dict) or not isinstance(data.get("optimizer"), dict):
            raise ConfigError(
                f"{source}: not a diffusion-pipe config: it needs a [model] and an [optimizer] table "
                "(see examples/main_example.toml in the diffusion-pipe checkout)"
            )
        # The trainer reads these without a default (train.py:107, 310, 655): name them now.
        for table, key, example in (
            ("model", "type", "'wan'"),
            ("model", "dtype", "'bfloat16'"),
            ("optimizer", "type", "'adamw_optimi'"),
        ):
            if not isinstance(data[table].get(key), str):
                raise ConfigError(
                    f"{source}: [{table}] has no {key} (like {key} = {example}); diffusion-pipe needs one"
                )
        return Baseline(trainer=self.name, text=text, data=data, path=path)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        data = baseline.data
        model = _table(data, "model")
        optimizer = _table(data, "optimizer")
        swap = data.get("blocks_to_swap", 0)
        limit = self._swap_limit(baseline)
        if isinstance(swap, int) and not isinstance(swap, bool) and limit is not None and swap >= 0:
            swap = min(swap, limit)  # the knob's range: the model's own maximum (below 0 is refused)
        return {
            "blocks_to_swap": swap,
            "transformer_dtype": model.get("transformer_dtype", model.get("dtype", "bfloat16")),
            "activation_checkpointing": data.get("activation_checkpointing", False),
            "optimizer": _knob_spelling(optimizer.get("type")),
            "batch_size": data.get(KNOB_KEYS["batch_size"], 1),
            "gradient_accumulation_steps": data.get(GRAD_ACCUM_KEY, 1),
        }

    def knobs_in_play(self, baseline: Baseline, names: Any) -> list[str]:
        """The knobs this config can turn: block swap only where the model has it and the run
        trains a LoRA on one pipeline stage (train.py:576-578); the transformer's dtype only for
        models that read it and when the config's own is one the knob file lists; the optimizer
        only when the config's is one of the knob file's."""
        data = baseline.data
        model_type = str((data.get("model") or {}).get("type", ""))
        params = self.baseline_params(baseline)
        listed = self._knob_values()
        out = []
        for name in names:
            if name == "blocks_to_swap" and (
                model_type not in BLOCK_SWAP_MODELS
                or "adapter" not in data
                or data.get("pipeline_stages", 1) != 1
            ):
                continue
            if name == "transformer_dtype" and (
                model_type not in TRANSFORMER_DTYPE_MODELS or params[name] not in listed.get(name, ())
            ):
                continue
            if name == "optimizer" and params[name] not in listed.get(name, ()):
                continue
            out.append(name)
        return out

    def data_parallel(self, baseline: Baseline) -> int:
        """The GPUs split into ``pipeline_stages`` stages per model copy: DeepSpeed's global batch
        is micro batch x accumulation x the data-parallel world, GPUs / stages (train.py:605, 632)."""
        stages = baseline.data.get("pipeline_stages", 1)
        stages = stages if isinstance(stages, int) and not isinstance(stages, bool) and stages > 0 else 1
        return max(1, max(1, baseline.num_gpus) // stages)

    def knob_limits(self, baseline: Baseline) -> dict[str, int]:
        limit = self._swap_limit(baseline)
        return {} if limit is None else {"blocks_to_swap": limit}

    def _swap_limit(self, baseline: Baseline) -> int | None:
        return swap_limit(_table(baseline.data, "model"), self._cwd_or_none(baseline))

    def knob_file_data(self, baseline: Baseline, data: Any) -> Any:
        """The optimizer knob narrowed to the family of the config's own optimizer
        (``OPTIMIZER_FAMILIES``), the family's full-precision AdamW preferred: an 8-bit baseline
        relaxes to its own family's AdamW and never costs a trial of the other's; a config whose
        optimizer is in no family keeps the knob out of play (``knobs_in_play``)."""
        family = optimizer_family(self.baseline_params(baseline).get("optimizer"))
        if family is None or not isinstance(data, dict) or not isinstance(data.get("knobs"), list):
            return data
        knobs = [
            {**k, "values": [v for v in k["values"] if v in family]}
            if isinstance(k, dict) and k.get("name") == "optimizer" and isinstance(k.get("values"), list)
            else k
            for k in data["knobs"]
        ]
        fidelity = data.get("fidelity")
        if isinstance(fidelity, dict) and "optimizer" in fidelity:
            fidelity = {**fidelity, "optimizer": family[-1]}
        return {**data, "knobs": knobs, **({"fidelity": fidelity} if fidelity is not None else {})}

    def _knob_values(self) -> dict[str, tuple[Any, ...]]:
        from autotune.config.knobs import read_knob_file

        try:
            data = read_knob_file(self.knob_path())
            return {k["name"]: tuple(k.get("values", ())) for k in data["knobs"]}
        except Exception:
            return {}

    # --- rendering -----------------------------------------------------------------------------

    def knob_values(
        self, baseline: Baseline, params: Params, gradient_accumulation_steps: int
    ) -> dict[str, Any]:
        """Config key -> TOML value for each knob (the baseline's where ``params`` leaves one out)."""
        check_params(params, KNOB_KEYS, self.name)
        merged = {**self.baseline_params(baseline), **params}
        check_positive_int("batch_size", merged["batch_size"])
        check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
        if merged["transformer_dtype"] not in DTYPES:
            raise ConfigError(
                f"transformer_dtype {merged['transformer_dtype']!r} is not one diffusion-pipe maps "
                f"(utils/common.py DTYPE_MAP: {', '.join(DTYPES)})"
            )
        if merged["activation_checkpointing"] not in CHECKPOINTING or (
            isinstance(merged["activation_checkpointing"], int)
            and not isinstance(merged["activation_checkpointing"], bool)
        ):
            raise ConfigError(
                f"activation_checkpointing must be true, false or 'unsloth'; got {merged['activation_checkpointing']!r}"
            )
        if not isinstance(merged["optimizer"], str) or not merged["optimizer"]:
            raise ConfigError(
                f"the [optimizer] type must be a name like 'adamw_optimi'; got {merged['optimizer']!r}"
            )
        swap = merged["blocks_to_swap"]
        if isinstance(swap, bool) or not isinstance(swap, int) or swap < 0:
            raise ConfigError(f"blocks_to_swap must be a whole number >= 0; got {swap!r}")
        if swap and params.get("blocks_to_swap"):
            self._check_swap(baseline, swap)
        dtype_key = KNOB_KEYS["transformer_dtype"]
        model = baseline.data.get("model") or {}
        # No ``transformer_dtype`` means ``[model] dtype`` (wan.py:216): leave it out while equal.
        dtype = (
            None
            if "transformer_dtype" not in model and merged["transformer_dtype"] == model.get("dtype")
            else merged["transformer_dtype"]
        )
        checkpointing = merged["activation_checkpointing"]
        return {
            # 0 swaps nothing (train.py:576): the key goes, unless the config itself says 0.
            KNOB_KEYS["blocks_to_swap"]: swap or (0 if baseline.data.get("blocks_to_swap") == 0 else None),
            dtype_key: dtype,
            KNOB_KEYS["activation_checkpointing"]: (
                None
                if checkpointing is False and "activation_checkpointing" not in baseline.data
                else checkpointing
            ),
            KNOB_KEYS["optimizer"]: self._optimizer_spelling(baseline, merged["optimizer"]),
            KNOB_KEYS["batch_size"]: merged["batch_size"],
            GRAD_ACCUM_KEY: gradient_accumulation_steps,
        }

    def _check_swap(self, baseline: Baseline, swap: int) -> None:
        data = baseline.data
        if "adapter" not in data:
            raise CandidateRefused(
                f"blocks_to_swap {swap}: diffusion-pipe swaps blocks only when training a LoRA "
                "(train.py:578 asserts an [adapter] table)"
            )
        if data.get("pipeline_stages", 1) != 1:
            raise CandidateRefused(
                f"blocks_to_swap {swap}: diffusion-pipe swaps blocks only with pipeline_stages = 1 (train.py:577)"
            )
        limit = self._swap_limit(baseline)
        if limit is not None and swap > limit:
            raise CandidateRefused(
                f"blocks_to_swap {swap}: this model swaps at most {limit} blocks (its block count less 2; "
                "the trainer asserts it in enable_block_swap)"
            )

    @staticmethod
    def _optimizer_spelling(baseline: Baseline, value: str) -> str:
        """The config's own spelling when it names the same optimizer (train.py:656 lowercases it)."""
        own = (baseline.data.get("optimizer") or {}).get("type")
        return own if isinstance(own, str) and own.lower() == value.lower() else value

    def write_trial(
        self,
        baseline: Baseline,
        params: Params,
        *,
        gradient_accumulation_steps: int,
        steps: int,
        trial_dir: Path,
    ) -> TrialLaunch:
        knobs = self.knob_values(baseline, params, gradient_accumulation_steps)
        cwd = self.cwd(baseline)
        source = str(baseline.path or "<baseline>")
        dataset_path = self._dataset_path(baseline, cwd)
        try:
            dataset_text = dataset_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{source}: dataset = {str(baseline.data.get('dataset'))!r}: cannot read {dataset_path} "
                f"({exc.strerror or exc}); a relative path is read from the diffusion-pipe checkout {cwd}"
            ) from None
        dataset = TomlConfig(dataset_text, str(dataset_path))
        bucket = keep_largest_bucket(dataset)
        cfg = TomlConfig(baseline.text, source)
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / DATASET_NAME).write_text(dataset.text, encoding="utf-8")
        edits = {**knobs, **recipe_edits(baseline.data, steps, trial_dir)}
        for key, value in edits.items():
            if value is None or not same_value(cfg.get(key), value):
                cfg.set(key, value)
        config_path = trial_dir / CONFIG_NAME
        config_path.write_text(cfg.text, encoding="utf-8")
        return TrialLaunch(
            argv=self.launch_command(baseline, config_path),
            cwd=cwd,
            batch_size=knobs[KNOB_KEYS["batch_size"]],
            env=RUN_ENV,
            record={"data_bucket": describe(bucket)},
        )

    def launch_command(self, baseline: Baseline, config_path: Path) -> list[str]:
        """README.md:118: ``deepspeed --num_gpus=N train.py --deepspeed --config CONFIG``."""
        runner = (
            ["deepspeed"] if self.launcher is None else [*self.launcher, "-m", "deepspeed.launcher.runner"]
        )
        gpus = max(1, baseline.num_gpus)
        return [*runner, f"--num_gpus={gpus}", "train.py", "--deepspeed", "--config", str(config_path)]

    def _dataset_path(self, baseline: Baseline, cwd: Path) -> Path:
        dataset = baseline.data.get("dataset")
        if not isinstance(dataset, str) or not dataset:
            raise ConfigError(
                f"{baseline.path or '<config>'}: no `dataset = 'path/to/dataset.toml'` (train.py:393 reads it)"
            )
        path = Path(dataset).expanduser()
        return path if path.is_absolute() else cwd / path

    # --- where the trainer lives ---------------------------------------------------------------

    def cwd(self, baseline: Baseline) -> Path:
        """The diffusion-pipe checkout (holding ``train.py``), where trials run."""
        if self.trainer_dir is not None:
            root = self.trainer_dir.expanduser().resolve()
            if not (root / "train.py").is_file():
                raise UsageError(
                    f"--trainer-dir {self.trainer_dir}: no train.py in {root}; give the diffusion-pipe checkout"
                )
            return root
        hints = [*(Path(baseline.path).resolve().parents if baseline.path else []), Path.cwd()]
        for hint in hints:
            if (hint / "train.py").is_file() and (hint / "utils" / "dataset.py").is_file():
                return hint
        raise UsageError(
            "cannot find the diffusion-pipe checkout (a folder with train.py and utils/dataset.py) "
            "above the config or here; pass --trainer-dir DIR"
        )

    def _cwd_or_none(self, baseline: Baseline) -> Path | None:
        try:
            return self.cwd(baseline)
        except UsageError:
            return None

    # --- reading -------------------------------------------------------------------------------

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        try:
            trial_dir = Path(trial_dir)
            record = read_trial_record(trial_dir)
            log = read_deepspeed_steps(read_output(trial_dir, output)) or TrialMetrics()
            file_metrics = read_metrics_file(trial_dir / METRICS_FILE_NAME)
            hook = read_hook_file(trial_dir / HOOK_FILE_NAME)
            # DeepSpeed's samples/sec is micro batch x accumulation x data-parallel ranks over the
            # step (engine.py:399-400): the trainer's own figure, kept beside the hook's timing.
            own = trainer_reading(log, file_metrics, own_rate=True)
            return combine(Readings(hook=hook, trainer=own, effective_batch=effective_batch_of(record)))
        except Exception:  # the contract: a reader never takes the sweep down
            return TrialMetrics()

    # --- the full run --------------------------------------------------------------------------

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        cfg = TomlConfig(baseline.text, str(baseline.path or "<baseline>"))
        for key, value in self.knob_values(baseline, params, gradient_accumulation_steps).items():
            if value is None or not same_value(cfg.get(key), value):
                if value is None and cfg.get(key) is None:
                    continue
                cfg.set(key, value)
        return cfg.text

    def training_command(
        self,
        config_path: Path,
        *,
        baseline: Baseline | None = None,
        params: Params | None = None,
        gradient_accumulation_steps: int | None = None,
    ) -> str:
        base = baseline or Baseline(trainer=self.name, text="", data={})
        argv = self.launch_command(base, Path(config_path).resolve())
        cwd = self._cwd_or_none(base)
        return f"cd {shlex.quote(str(cwd or 'diffusion-pipe'))} && {shlex.join(argv)}"


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


#: The optimizer families the knob turns within, each 8-bit states first, then its full AdamW
#: (train.py:668-687): optimi's AdamW8bitKahan (optimizers/adamw_8bit.py) and optimi.AdamW;
#: bitsandbytes' AdamW8bit and torch's AdamW.
OPTIMIZER_FAMILIES: tuple[tuple[str, ...], ...] = (("AdamW8bitKahan", "adamw_optimi"), ("adamw8bit", "adamw"))


def optimizer_family(value: Any) -> tuple[str, ...] | None:
    """The family of an optimizer type as the knob file spells it, or ``None``."""
    return next((f for f in OPTIMIZER_FAMILIES if value in f), None)


def _knob_spelling(value: Any) -> Any:
    """An optimizer type as the knob file spells it (the trainer matches it case-insensitively)."""
    if not isinstance(value, str):
        return value
    for known in ("AdamW8bitKahan", "adamw_optimi", "adamw8bit", "adamw"):
        if value.lower() == known.lower():
            return known
    return value
