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

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml

from autotune.config.shellscript import parse_launch_script
from autotune.config.yamlconf import read_config_text
from autotune.core.metrics import TrialMetrics
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError, UsageError
from autotune.execution.launch import LaunchSpec, env_prefix, is_secret_name, redacted_env
from autotune.trainers.base import Baseline, Params, TrainerAdapter
from autotune.trainers.common import (
    check_params,
    check_positive_int,
    effective_batch_of,
    hook_option,
    launcher_option,
    merge_metrics,
    metrics_env,
    read_trial_record,
    real_samples_per_s,
    take_options,
    write_trial_record,
)
from autotune.trainers.ltx2 import finish_metrics, hook_env, read_output
from autotune.trainers.readers.hookfile import HOOK_FILE_NAME, read_hook_file
from autotune.trainers.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file
from autotune.trainers.readers.runblock import real_batch
from autotune.trainers.readers.tqdmbar import read_tqdm

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


def parse_tqdm(text: str) -> tuple[float | None, list[float]]:
    """Steady seconds per step from the training bar's per-update rates, and its ``loss=`` postfixes."""
    metrics = read_tqdm(text)
    return (metrics.step_time_s, metrics.losses) if metrics is not None else (None, [])


# --- argv editing ------------------------------------------------------------------------------


def _matches(token: str, flag: str) -> bool:
    return token == flag or token.startswith(flag + "=")


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag value`` or ``--flag=value`` (the last one wins, as in argparse)."""
    value = None
    for i, token in enumerate(args):
        if token == flag and i + 1 < len(args):
            value = args[i + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def has_flag(args: Sequence[str], flag: str) -> bool:
    return any(token == flag for token in args)


def set_value_flag(args: list[str], flag: str, value: str) -> list[str]:
    """Replace the first ``flag`` in place (same style), drop repeats, append it if absent."""
    out: list[str] = []
    done = False
    i = 0
    while i < len(args):
        token = args[i]
        if _matches(token, flag):
            separate = token == flag
            if not done:
                out += [flag, value] if separate else [f"{flag}={value}"]
                done = True
            i += 2 if separate and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(token)
        i += 1
    if not done:
        out += [flag, value]
    return out


def drop_value_flag(args: list[str], flag: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        if _matches(args[i], flag):
            i += 2 if args[i] == flag and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(args[i])
        i += 1
    return out


def set_bool_flag(args: list[str], flag: str, on: bool) -> list[str]:
    present = has_flag(args, flag)
    if on:
        return args if present else [*args, flag]
    return [a for a in args if a != flag]


# --- the adapter -------------------------------------------------------------------------------


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
    label: ClassVar[str] = "the Sana trainer"
    takes_trainer_python: ClassVar[bool] = True
    #: ``final_config`` writes the training command as a shell script.
    config_suffix: ClassVar[str] = ".sh"
    takes_hook: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        take_options(options, self.name, ("launcher", "hook"))
        self.launcher: list[str] | None = launcher_option(options)
        self.hook = hook_option(options, self.name)

    def load_baseline(self, config: Path | None) -> Baseline:
        if config is None:
            raise UsageError(
                "trainer 'sana' needs your training command: pass --config FILE with either a YAML "
                "(script:, args:, optional launcher:, cwd:, env:) or a shell line like "
                "'python train_dreambooth_lora_sana.py --train_batch_size=1 ...'"
            )
        path = Path(config)
        text = read_config_text(path)
        return self.baseline_from_text(text, path)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        source = str(path) if path else "<command>"
        folder = str(Path(path).resolve().parent) if path else str(Path.cwd())
        data: Any
        try:
            data = load_yaml(text, source)
        except ConfigError:
            data = None
        if isinstance(data, dict) and ("script" in data or "args" in data):
            record = _record_from_yaml(data, source, folder)
        else:
            record = _record_from_command(text, source, folder)
        return Baseline(trainer=self.name, text=text, data=record, path=path)

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

    def render(
        self,
        baseline: Baseline,
        params: Params,
        *,
        gradient_accumulation_steps: int,
        steps: int,
        trial_dir: Path,
    ) -> LaunchSpec:
        check_positive_int("steps", steps)
        trial_dir = Path(trial_dir).resolve()
        args = self.knob_args(baseline, params, gradient_accumulation_steps)
        args = set_value_flag(args, STEPS_FLAG, str(steps))
        args = set_value_flag(args, OUTPUT_FLAG, str(trial_dir / "output"))
        for flag in DROP_VALUE_FLAGS:
            args = drop_value_flag(args, flag)
        for flag in DROP_BOOL_FLAGS:
            args = set_bool_flag(args, flag, False)
        if flag_value(args, "--checkpointing_steps") is not None:
            args = set_value_flag(args, "--checkpointing_steps", str(_NEVER))
        record = dict(baseline.data)
        argv = self._argv(record, args, max(1, baseline.num_gpus))
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "config.yaml").write_text(
            # A record for people; the env goes to the trainer only (a hub token must not reach the disk).
            yaml.safe_dump(
                {**record, "env": redacted_env(record["env"]), "args": args, "argv": argv},
                sort_keys=False,
                width=10**6,
            ),
            encoding="utf-8",
        )
        (trial_dir / "argv.json").write_text(json.dumps(argv, indent=1) + "\n", encoding="utf-8")
        batch = int_flag(args, BATCH_FLAG, 1)
        gpus = max(1, baseline.num_gpus)
        write_trial_record(
            trial_dir,
            trainer=self.name,
            batch_size=batch,
            gradient_accumulation_steps=gradient_accumulation_steps,
            num_gpus=gpus,
            effective_batch=batch * gradient_accumulation_steps * gpus,
            steps=steps,
        )
        env = {"PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled", **record["env"], **metrics_env(trial_dir)}
        if self.hook:  # after the baseline's env: its PYTHONPATH stays, behind the hook's folder
            env = hook_env(trial_dir, env, vram_gb=self.hook_vram_gb(baseline))
        return LaunchSpec(argv=tuple(argv), cwd=Path(record["cwd"]), env=env)

    def _argv(self, record: dict[str, Any], args: list[str], gpus: int) -> list[str]:
        launcher = self.launcher or record["launcher"]
        if gpus > 1:
            return [
                *launcher,
                "-m",
                "accelerate.commands.launch",
                "--num_processes",
                str(gpus),
                record["script"],
                *args,
            ]
        return [*launcher, record["script"], *args]

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        try:
            trial_dir = Path(trial_dir)
            record = read_trial_record(trial_dir)
            hook = read_hook_file(trial_dir / HOOK_FILE_NAME)
            file_metrics = read_metrics_file(trial_dir / METRICS_FILE_NAME)
            text = read_output(trial_dir, output)
            tqdm = read_tqdm(text) or TrialMetrics()  # time, spread and losses
            merged = merge_metrics(hook, file_metrics, tqdm)
            counted = real_samples_per_s(hook, file_metrics)
            batch = real_batch(text, effective_batch_of(record))  # partial batches count as partial
            return finish_metrics(merged, batch, keep_reported=False, counted=counted)
        except Exception:  # the contract: a reader never takes the sweep down
            return TrialMetrics()

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        """A runnable shell script: the baseline command with only the knob flags changed."""
        record = baseline.data
        args = self.knob_args(baseline, params, gradient_accumulation_steps)
        argv = self._argv(record, args, max(1, baseline.num_gpus))
        lines = [*SCRIPT_HEAD, *command_lines(record, argv)]
        return "\n".join(lines) + "\n"

    def training_command(
        self,
        config_path: Path,
        *,
        baseline: Baseline | None = None,
        params: Params | None = None,
        gradient_accumulation_steps: int | None = None,
    ) -> str:
        return f"bash {shlex.quote(str(config_path))}"


#: The first lines of a winning command written as a script (``final_config``).
SCRIPT_HEAD = (
    "#!/usr/bin/env bash",
    "# The training command with the winning knobs, written by autotune.",
    "set -e",
)


def command_lines(record: dict[str, Any], argv: Sequence[str]) -> list[str]:
    """The script's lines that run ``argv`` in the record's folder with its environment; secrets are
    never written (a comment names them: the script reads them from the environment it runs in)."""
    lines = []
    secret = [k for k in record["env"] if is_secret_name(k)]
    if secret:
        lines.append(f"# Not written here (secrets): export {', '.join(secret)} before running.")
    env = env_prefix(record["env"])
    lines.append(f"cd {shlex.quote(record['cwd'])} && " + (env + " " if env else "") + _wrap_argv(argv))
    return lines


def flag_number(args: Sequence[str], flag: str, default: int) -> int | str:
    """A whole-number flag's value in a baseline command, or its text as written when it is not
    one (``check_baseline_values`` then names the file, the flag and the value)."""
    value = flag_value(args, flag)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return value


def int_flag(args: Sequence[str], flag: str, default: int) -> int:
    """A whole-number flag's value in the command (``default`` when absent)."""
    value = flag_value(args, flag)
    try:
        return int(value) if value is not None else default
    except ValueError:
        raise ConfigError(f"{flag} must be a whole number; the baseline command has {value!r}") from None


def _record_from_yaml(data: dict[str, Any], source: str, folder: str) -> dict[str, Any]:
    script = data.get("script")
    if not isinstance(script, str) or not script:
        raise ConfigError(
            f"{source}: 'script:' must name the training script, like train_dreambooth_lora_sana.py"
        )
    args = data.get("args", [])
    if not isinstance(args, list):
        raise ConfigError(f"{source}: 'args:' must be a list of command-line arguments")
    launcher = data.get("launcher", data.get("python", ["python"]))
    if isinstance(launcher, str):
        launcher = shlex.split(launcher)
    if not isinstance(launcher, list) or not launcher:
        raise ConfigError(f"{source}: 'launcher:' must be a list like [python] or [/venv/bin/python]")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise ConfigError(f"{source}: 'env:' must be a mapping of NAME: value")
    cwd = data.get("cwd") or folder
    cwd = str(Path(folder) / Path(str(cwd)).expanduser())
    return {
        "script": script,
        "launcher": [str(a) for a in launcher],
        "cwd": cwd,
        "args": [_arg(a) for a in args],
        "env": {str(k): str(v) for k, v in env.items()},
    }


def _arg(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _record_from_command(text: str, source: str, folder: str) -> dict[str, Any]:
    """The record of a launcher script, read without a shell (``config.shellscript``): its
    exports are the trial's environment, ``$VAR`` is expanded, ``cd DIR`` sets the folder."""
    script = parse_launch_script(text, source, os.environ)
    command = script.argv
    script_at = next((i for i, t in enumerate(command) if t.endswith(".py")), None)
    if script_at is None:
        raise ConfigError(
            f"{source}:{script.line}: no training script (a .py file) found in the command; write it like "
            "'python train_dreambooth_lora_sana.py --train_batch_size=1 ...' or use the YAML form"
        )
    cwd = str(Path(folder) / Path(script.cwd).expanduser()) if script.cwd else folder
    return {
        "script": command[script_at],
        "launcher": command[:script_at] or ["python"],
        "cwd": cwd,
        "args": command[script_at + 1 :],
        "env": script.env,
    }


def _wrap_argv(argv: Sequence[str]) -> str:
    """One flag (and its value) per line, shell-quoted, joined with backslash continuations."""
    parts: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if (
            token.startswith("--")
            and "=" not in token
            and i + 1 < len(argv)
            and not argv[i + 1].startswith("--")
        ):
            parts.append(f"{shlex.quote(token)} {shlex.quote(argv[i + 1])}")
            i += 2
            continue
        parts.append(shlex.quote(token))
        i += 1
    return " \\\n  ".join(parts)
