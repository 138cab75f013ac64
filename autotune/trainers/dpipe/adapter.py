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

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.tomledit import TomlConfig, load_toml_data
from autotune.core.metrics import TrialMetrics
from autotune.errors import UsageError
from autotune.trainers.base import TrainerAdapter, TrainerTraits, read_baseline
from autotune.trainers.dpipe.config import (
    GRAD_ACCUM_KEY,
    KNOB_KEYS,
    check_config,
    check_knob_values,
    check_swap,
    find_checkout,
    knob_spelling,
    optimizer_family,
    optimizer_spelling,
    read_dataset,
    table,
    within_family,
)
from autotune.trainers.dpipe.data import describe
from autotune.trainers.dpipe.fullrun import global_batch, run_warnings, trial_view
from autotune.trainers.dpipe.models import (
    BLOCK_SWAP_MODELS,
    TRANSFORMER_DTYPE_MODELS,
    swap_limit,
)
from autotune.trainers.dpipe.recipe import (
    CONFIG_NAME,
    DATASET_NAME,
    recipe_edits,
)
from autotune.trainers.kit.common import (
    adapter_options,
    check_params,
    check_positive_int,
    folder_command,
    same_value,
)
from autotune.trainers.kit.output import read_trial_metrics
from autotune.trainers.kit.readers.dslog import read_deepspeed_steps
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

#: Study param -> the config key it sets (dotted: ``model.transformer_dtype`` is ``[model]``'s).
RUN_ENV = {"PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}


#: The error when no --config is given: what to pass.
NO_CONFIG = (
    "diffusion-pipe needs your training config: pass it with --config FILE.toml "
    "(its `dataset = '...'` names the dataset config)"
)


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
        drops_data=True,
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
        shared = adapter_options(options, self.name, ("trainer_dir", "launcher", "hook"))
        self.trainer_dir, self.launcher, self.hook = shared.trainer_dir, shared.launcher, shared.hook

    # --- baseline ------------------------------------------------------------------------------

    def load_baseline(self, config: Path | None) -> Baseline:
        return read_baseline(config, self.baseline_from_text, NO_CONFIG)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        source = str(path) if path else "<config>"
        data = load_toml_data(text, source)
        check_config(data, source)
        return Baseline(trainer=self.name, text=text, data=data, path=path)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        data = baseline.data
        model = table(data, "model")
        optimizer = table(data, "optimizer")
        swap = data.get("blocks_to_swap", 0)
        limit = self._swap_limit(baseline)
        if isinstance(swap, int) and not isinstance(swap, bool) and limit is not None and swap >= 0:
            swap = min(swap, limit)  # the knob's range: the model's own maximum (below 0 is refused)
        return {
            "blocks_to_swap": swap,
            "transformer_dtype": model.get("transformer_dtype", model.get("dtype", "bfloat16")),
            "activation_checkpointing": data.get("activation_checkpointing", False),
            "optimizer": knob_spelling(optimizer.get("type")),
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
        return swap_limit(table(baseline.data, "model"), self._cwd_or_none(baseline))

    def knob_file_data(self, baseline: Baseline, data: Any) -> Any:
        """The optimizer knob narrowed to the family of the config's own optimizer (``OPTIMIZER_FAMILIES``)."""
        return within_family(data, optimizer_family(self.baseline_params(baseline).get("optimizer")))

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
        check_knob_values(merged)
        swap = merged["blocks_to_swap"]
        if swap and params.get("blocks_to_swap"):
            check_swap(baseline.data, swap, self._swap_limit(baseline))
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
            KNOB_KEYS["optimizer"]: optimizer_spelling(baseline.data, merged["optimizer"]),
            KNOB_KEYS["batch_size"]: merged["batch_size"],
            GRAD_ACCUM_KEY: gradient_accumulation_steps,
        }

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        knobs = self.knob_values(baseline, params, run.gradient_accumulation_steps)
        cwd = self.cwd(baseline)
        source = str(baseline.path or "<baseline>")
        dataset = read_dataset(baseline.data, source, cwd)
        batch_size, dp = knobs[KNOB_KEYS["batch_size"]], self.data_parallel(baseline)
        batch = global_batch(baseline.data, batch_size, run.gradient_accumulation_steps, dp)
        bucket, note = trial_view(dataset, table(baseline.data, "model"), cwd, batch)
        cfg = TomlConfig(baseline.text, source)
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        (run.trial_dir / DATASET_NAME).write_text(dataset.text, encoding="utf-8")
        edits = {**knobs, **recipe_edits(baseline.data, run.steps, run.trial_dir)}
        for key, value in edits.items():
            if value is None or not same_value(cfg.get(key), value):
                cfg.set(key, value)
        config_path = run.trial_dir / CONFIG_NAME
        config_path.write_text(cfg.text, encoding="utf-8")
        return TrialLaunch(
            argv=self.launch_command(baseline, config_path),
            cwd=cwd,
            batch_size=batch_size,
            env=RUN_ENV,
            record={"data_bucket": describe(bucket), **({"data_note": note} if note else {})},
        )

    def data_warnings(
        self,
        baseline: Baseline,
        *,
        batch_size: int,
        gradient_accumulation_steps: int,
        data_parallel: int,
        max_batch_size: int | None = None,
    ) -> list[str]:
        """What the full run at this batch drops of the user's data (``dpipe.fullrun``)."""
        cwd = self._cwd_or_none(baseline) or Path.cwd()
        return run_warnings(
            baseline, cwd, batch_size, gradient_accumulation_steps, data_parallel, max_batch_size
        )

    def launch_command(self, baseline: Baseline, config_path: Path) -> list[str]:
        """README.md:118: ``deepspeed --num_gpus=N train.py --deepspeed --config CONFIG``."""
        runner = (
            ["deepspeed"] if self.launcher is None else [*self.launcher, "-m", "deepspeed.launcher.runner"]
        )
        gpus = max(1, baseline.num_gpus)
        return [*runner, f"--num_gpus={gpus}", "train.py", "--deepspeed", "--config", str(config_path)]

    # --- where the trainer lives ---------------------------------------------------------------

    def cwd(self, baseline: Baseline) -> Path:
        """The diffusion-pipe checkout (holding ``train.py``), where trials run."""
        return find_checkout(self.trainer_dir, baseline.path)

    def _cwd_or_none(self, baseline: Baseline) -> Path | None:
        try:
            return self.cwd(baseline)
        except UsageError:
            return None

    # --- reading -------------------------------------------------------------------------------

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        # DeepSpeed's samples/sec is micro batch x accumulation x data-parallel ranks over the
        # step (engine.py:399-400): the trainer's own figure, kept beside the hook's timing.
        return read_trial_metrics(
            trial_dir, output, lambda text, _: read_deepspeed_steps(text), own_rate=True, log_first=True
        )

    # --- the full run --------------------------------------------------------------------------

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        cfg = TomlConfig(baseline.text, str(baseline.path or "<baseline>"))
        for key, value in self.knob_values(baseline, params, gradient_accumulation_steps).items():
            if value is None or not same_value(cfg.get(key), value):
                if value is None and cfg.get(key) is None:
                    continue
                cfg.set(key, value)
        return cfg.text

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        base = winner.baseline_or_empty(self.name)
        argv = self.launch_command(base, Path(config_path).resolve())
        cwd = self._cwd_or_none(base)
        return folder_command(cwd or "diffusion-pipe", argv)
