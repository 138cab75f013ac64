"""Flag-driven trainers' baselines (a YAML ``script:``/``args:`` form or a launcher script) as a
launch record, and a winning command written back as a script."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from autotune.config.shellscript import parse_launch_script
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError
from autotune.execution.launch import env_prefix, is_secret_name, redacted_env

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


def read_launch_record(text: str, path: Path | None) -> dict[str, Any]:
    """The launch record of a baseline's text, in the YAML form (``script:``, ``args:``...) or a
    launcher script; relative folders start at ``path``'s folder (no path: the current one)."""
    source = str(path) if path else "<command>"
    folder = str(Path(path).resolve().parent) if path else str(Path.cwd())
    data: Any
    try:
        data = load_yaml(text, source)
    except ConfigError:
        data = None
    if isinstance(data, dict) and ("script" in data or "args" in data):
        return record_from_yaml(data, source, folder)
    return record_from_command(text, source, folder)


#: What a flag-driven trial runs with besides the inherited environment and the record's own.
RUN_ENV = {"PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}


def python_argv(python: Sequence[str], script: str, args: Sequence[str], gpus: int) -> list[str]:
    """``PYTHON SCRIPT ARGS``, for several GPUs through ``-m accelerate.commands.launch --num_processes N``
    (what ``accelerate launch`` runs, with the Python given)."""
    accelerate = ["-m", "accelerate.commands.launch", "--num_processes", str(gpus)] if gpus > 1 else []
    return [*python, *accelerate, script, *args]


def write_launch_files(
    trial_dir: Path, record: Mapping[str, Any], args: list[str], argv: list[str]
) -> dict[str, str]:
    """Beside a flag-driven trial: ``config.yaml``, its launch record for people and for
    ``load_baseline`` (secrets in the env redacted: they go to the trainer only, a hub token must
    not reach the disk), and ``argv.json``. Returns the env the trial adds to the inherited one."""
    kept = {key: record[key] for key in ("script", "launcher", "cwd")}
    (trial_dir / "config.yaml").write_text(
        yaml.safe_dump(
            {**kept, "args": args, "env": redacted_env(record["env"]), "argv": argv},
            sort_keys=False,
            width=10**6,
        ),
        encoding="utf-8",
    )
    (trial_dir / "argv.json").write_text(json.dumps(argv, indent=1) + "\n", encoding="utf-8")
    return {**RUN_ENV, **record["env"]}


def record_from_yaml(data: dict[str, Any], source: str, folder: str) -> dict[str, Any]:
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


def record_from_command(text: str, source: str, folder: str) -> dict[str, Any]:
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
