"""Command-line-flag trainers of the diffusers family (Sana's ``train_dreambooth_lora_sana.py``).

The baseline is the user's command, in either of two forms:

* a YAML record::

      script: train_dreambooth_lora_sana.py   # relative to cwd
      launcher: [python]                      # argv that runs Python (default: python on PATH)
      cwd: /path/to/diffusers/examples/dreambooth   # default: the YAML file's folder
      args: [--pretrained_model_name_or_path=..., --train_batch_size=1, --mixed_precision=bf16]
      env: {HF_HOME: /data/hf}                # optional

* a launcher script as READMEs write it (``export MODEL_NAME=...`` lines, ``$MODEL_NAME``,
  ``cd DIR &&``, ``VAR=value`` prefixes, backslash continuations, comments), read without a
  shell by ``autotune.config.shellscript``: its exports become the trial's environment, and
  what needs a shell is refused naming the line. It is also what ``final_config`` writes:
  the trainer's own format is its command.

These trainers print no memory figures: peak VRAM and step times come from the
trial-side hook; the step time may also come from tqdm's rate, the loss from its postfix.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from autotune.core.metrics import TrialMetrics
from autotune.errors import ConfigError
from autotune.trainers.base import TrainerAdapter, TrainerTraits, read_baseline
from autotune.trainers.kit.argv import (
    drop_flags,
    flag_number,
    flag_value,
    has_flag,
    int_flag,
    set_bool_flag,
    set_value_flag,
)
from autotune.trainers.kit.common import adapter_options, check_params, check_positive_int
from autotune.trainers.kit.launchscript import (
    SCRIPT_HEAD,
    command_lines,
    python_argv,
    read_launch_record,
    write_launch_files,
)
from autotune.trainers.kit.output import read_trial_metrics
from autotune.trainers.kit.readers.runblock import real_batch
from autotune.trainers.kit.readers.tqdmbar import read_tqdm
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

KNOBS = ("offload", "cache_latents", "optimizer", "batch_size", "gradient_checkpointing")
#: Boolean knob -> the store_true flag that turns it on.
BOOL_FLAGS = {
    "offload": "--offload",
    "cache_latents": "--cache_latents",
    "gradient_checkpointing": "--gradient_checkpointing",
}
ADAM8_FLAG = "--use_8bit_adam"
BATCH_FLAG = "--train_batch_size"
GRAD_ACCUM_FLAG = "--gradient_accumulation_steps"
STEPS_FLAG = "--max_train_steps"
OUTPUT_FLAG = "--output_dir"
#: The script's argparse defaults, for flags the baseline leaves out.
SCRIPT_DEFAULTS = {"batch_size": 4, "gradient_accumulation_steps": 1}
#: Short-run recipe: flags removed (value-taking or store_true) so a trial does only training.
DROP_VALUE_FLAGS = ("--validation_prompt", "--resume_from_checkpoint", "--hub_model_id")
DROP_BOOL_FLAGS = ("--push_to_hub",)
_NEVER = 10**9  # checkpointing_steps for a trial: never


# --- the adapter -------------------------------------------------------------------------------


#: The error when no --config is given: what to pass.
NO_CONFIG = (
    "trainer 'sana' needs your training command: pass --config FILE with either a YAML "
    "(script:, args:, optional launcher:, cwd:, env:) or a shell line like "
    "'python train_dreambooth_lora_sana.py --train_batch_size=1 ...'"
)


class SanaAdapter(TrainerAdapter):
    """Options: ``launcher`` (argv that runs Python; overrides the baseline's), ``hook``
    (inject the trial-side hook: step times, memory, losses, real batches, the ``--vram-gb`` card;
    default on)."""

    knob_keys: ClassVar[Mapping[str, str]] = {
        "batch_size": BATCH_FLAG,
        "gradient_accumulation_steps": GRAD_ACCUM_FLAG,
        **BOOL_FLAGS,
    }

    name: ClassVar[str] = "sana"
    knob_file: ClassVar[str] = "sana.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="the Sana trainer",
        takes_trainer_python=True,
        # ``final_config`` writes the training command as a shell script.
        config_suffix=".sh",
        takes_hook=True,
    )

    def __init__(self, **options: Any) -> None:
        shared = adapter_options(options, self.name, ("launcher", "hook"))
        self.launcher, self.hook = shared.launcher, shared.hook

    def load_baseline(self, config: Path | None) -> Baseline:
        return read_baseline(config, self.baseline_from_text, NO_CONFIG)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        return Baseline(trainer=self.name, text=text, data=read_launch_record(text, path), path=path)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        args = baseline.data["args"]
        return {
            "offload": has_flag(args, BOOL_FLAGS["offload"]),
            "cache_latents": has_flag(args, BOOL_FLAGS["cache_latents"]),
            "optimizer": "adamw8bit" if has_flag(args, ADAM8_FLAG) else "adamw",
            "batch_size": flag_number(args, BATCH_FLAG, SCRIPT_DEFAULTS["batch_size"]),
            "gradient_checkpointing": has_flag(args, BOOL_FLAGS["gradient_checkpointing"]),
            "gradient_accumulation_steps": flag_number(
                args, GRAD_ACCUM_FLAG, SCRIPT_DEFAULTS["gradient_accumulation_steps"]
            ),
        }

    def knob_args(self, baseline: Baseline, params: Params, gradient_accumulation_steps: int) -> list[str]:
        """The baseline's args with the knob flags set (order kept; new flags at the end)."""
        check_params(params, KNOBS, self.name)
        merged = {**self.baseline_params(baseline), **params}
        check_positive_int("batch_size", merged["batch_size"])
        check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
        if merged["optimizer"] not in ("adamw", "adamw8bit"):
            raise ConfigError(f"optimizer {merged['optimizer']!r} is not one of adamw8bit, adamw")
        args = list(baseline.data["args"])
        args = set_value_flag(args, BATCH_FLAG, str(merged["batch_size"]))
        args = set_value_flag(args, GRAD_ACCUM_FLAG, str(gradient_accumulation_steps))
        args = set_bool_flag(args, ADAM8_FLAG, merged["optimizer"] == "adamw8bit")
        for knob, flag in BOOL_FLAGS.items():
            if not isinstance(merged[knob], bool):
                raise ConfigError(f"{knob} must be true or false; got {merged[knob]!r}")
            args = set_bool_flag(args, flag, merged[knob])
        return args

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        args = self.knob_args(baseline, params, run.gradient_accumulation_steps)
        args = set_value_flag(args, STEPS_FLAG, str(run.steps))
        args = set_value_flag(args, OUTPUT_FLAG, str(run.trial_dir / "output"))
        args = drop_flags(args, DROP_VALUE_FLAGS, DROP_BOOL_FLAGS)
        if flag_value(args, "--checkpointing_steps") is not None:
            args = set_value_flag(args, "--checkpointing_steps", str(_NEVER))
        record = dict(baseline.data)
        argv = self._argv(record, args, max(1, baseline.num_gpus))
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        env = write_launch_files(run.trial_dir, record, args, argv)
        return TrialLaunch(
            argv=argv, cwd=Path(record["cwd"]), batch_size=int_flag(args, BATCH_FLAG, 1), env=env
        )

    def _argv(self, record: dict[str, Any], args: list[str], gpus: int) -> list[str]:
        return python_argv(self.launcher or record["launcher"], record["script"], args, gpus)

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        # The bar gives the time, its spread and the losses; partial batches count as partial.
        return read_trial_metrics(
            trial_dir, output, lambda text, _: read_tqdm(text), own_rate=False, real_batch=real_batch
        )

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        """A runnable shell script: the baseline command with only the knob flags changed."""
        record = baseline.data
        args = self.knob_args(baseline, params, gradient_accumulation_steps)
        argv = self._argv(record, args, max(1, baseline.num_gpus))
        lines = [*SCRIPT_HEAD, *command_lines(record, argv)]
        return "\n".join(lines) + "\n"

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        return f"bash {shlex.quote(str(config_path))}"
