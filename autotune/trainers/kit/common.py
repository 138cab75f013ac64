"""Pieces every adapter shares: the trial record, the metrics and hook env, merging readings."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.metrics import merge_metrics as merge_metrics  # re-exported: the adapters, tests
from autotune.errors import ConfigError, UsageError
from autotune.execution.hookseal import HOOK_FILE_VAR
from autotune.execution.launch import check_program, env_prefix
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME
from autotune.trainers.kit.readers.metricsfile import METRICS_ENV, METRICS_FILE_NAME

#: What an adapter writes beside the trial's config so ``read_metrics`` knows the batch.
TRIAL_RECORD = "adapter.json"


def metrics_env(trial_dir: Path) -> dict[str, str]:
    return {METRICS_ENV: str(trial_dir / METRICS_FILE_NAME)}


#: Where the trial-side hook writes its lines (``trials/hook/sitecustomize.py``).
HOOK_FILE_ENV = HOOK_FILE_VAR
#: The card the hook emulates (GiB): counted on CPU, a memory-fraction cap on a larger GPU.
EMULATED_VRAM_ENV = "AUTOTUNE_EMULATED_VRAM_GB"


def hook_dir() -> Path | None:
    """``trials/hook`` (found without importing ``trials``), or None when not shipped."""
    spec = importlib.util.find_spec("trials")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "hook"
    return path if path.is_dir() else None


def hook_env(trial_dir: Path, env: Mapping[str, str], *, vram_gb: float | None = None) -> dict[str, str]:
    """``env`` (what the adapter adds to the inherited environment) with the trial-side hook added.

    The hook's folder goes FIRST on ``PYTHONPATH`` (Python runs the first ``sitecustomize`` it
    finds; the hook then runs any later one), before the ``PYTHONPATH`` that ``env`` sets (a
    baseline's exports), else the inherited one: what the user or the baseline set is kept.
    ``vram_gb``: the card the hook emulates.
    """
    out = dict(env)
    where = hook_dir()
    if where is None:
        return out
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    out["PYTHONPATH"] = str(where) + (os.pathsep + inherited if inherited else "")
    out[HOOK_FILE_ENV] = str(trial_dir / HOOK_FILE_NAME)
    if vram_gb is not None:
        out[EMULATED_VRAM_ENV] = f"{vram_gb:g}"
    return out


def hook_option(options: Mapping[str, Any], trainer: str) -> bool:
    """The adapters' ``hook`` option: on unless turned off (``--no-hook``)."""
    value = options.get("hook", True)
    if not isinstance(value, bool):
        raise UsageError(f"trainer {trainer!r}: option hook must be true or false; got {value!r}")
    return value


def write_trial_record(trial_dir: Path, **record: Any) -> None:
    (trial_dir / TRIAL_RECORD).write_text(
        json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def read_trial_record(trial_dir: Path) -> dict[str, Any]:
    """The record ``render`` wrote (empty if missing or unreadable: reading never raises)."""
    try:
        data = json.loads((trial_dir / TRIAL_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def effective_batch_of(record: Mapping[str, Any]) -> int | None:
    value = record.get("effective_batch")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_params(params: Mapping[str, Any], known: Iterable[str], trainer: str) -> None:
    """Unknown study params are a mistake in the knob file or the caller: name them."""
    known = list(known)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(
            f"trainer {trainer!r} has no knob(s) {', '.join(unknown)}; its knobs are {', '.join(known)} "
            f"(see configs/knobs/{trainer}.yaml)"
        )


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a whole number >= 1; got {value!r}")
    return value


def take_options(options: dict[str, Any], trainer: str, known: Iterable[str]) -> None:
    """Refuse adapter options nobody reads (a typo would otherwise be silently ignored)."""
    known = sorted(known)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"trainer {trainer!r} takes no option(s) {', '.join(unknown)}; "
            f"its options are {', '.join(known) or '(none)'}"
        )


def launcher_option(options: Mapping[str, Any]) -> list[str] | None:
    """The adapters' ``launcher`` option (``--trainer-python PATH``): the argv that runs Python, its
    program checked to exist; ``None`` when not given."""
    launcher = options.get("launcher")
    if launcher is None:
        return None
    if isinstance(launcher, str) or not launcher or not all(isinstance(a, str) for a in launcher):
        raise UsageError(
            f"launcher must be a non-empty list of strings, like ['/path/venv/bin/python']; got {launcher!r}"
        )
    return [check_program(launcher[0], "trainer python"), *launcher[1:]]


@dataclass(frozen=True)
class AdapterOptions:
    """The options adapters share, read and checked in one place (``adapter_options``)."""

    #: The argv that runs Python (``--trainer-python PATH``); ``None``: the adapter's own default.
    launcher: list[str] | None
    #: Inject the trial-side hook (``--no-hook`` turns it off).
    hook: bool
    #: The trainer's checkout (``--trainer-dir``), as given; ``None``: not given.
    trainer_dir: Path | None


def adapter_options(options: dict[str, Any], trainer: str, known: Iterable[str]) -> AdapterOptions:
    """``options`` refused unless ``known`` (``take_options``), and the shared ones read: what an
    adapter's ``__init__`` starts with, before the options of its own."""
    take_options(options, trainer, known)
    trainer_dir = options.get("trainer_dir")
    return AdapterOptions(
        launcher=launcher_option(options),
        hook=hook_option(options, trainer),
        trainer_dir=Path(trainer_dir) if trainer_dir else None,
    )


def folder_command(folder: Path | str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``cd FOLDER && [NAME=value ...] ARGV``, shell-quoted: a full run's command as the report prints it."""
    prefix = env_prefix(env or {})
    return f"cd {shlex.quote(str(folder))} && {prefix + ' ' if prefix else ''}{shlex.join(argv)}"


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same kind (``True`` is not ``1`` in a config)."""
    return type(a) is type(b) and a == b
