"""A trial's folder: made inside the workdir only, its launch record, and the error that names
the file when the disk refuses a write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn

from autotune.errors import TrialDirRefused, TrialOutputError
from autotune.execution.launch import LaunchSpec, redacted_env


def make_trial_dir(trial_dir: Path, root: Path) -> Path:
    """Create ``trial_dir`` under ``root`` (the resolved workdir), refusing to go through a
    symbolic link on the way (the study folder, the trial folder): a link planted there would
    have every log, config and checkpoint of the trial written outside the workdir."""
    trial_dir, root = Path(trial_dir), Path(root)
    try:
        parts = trial_dir.relative_to(root).parts
    except ValueError:
        parts = ()
        refuse_dir(trial_dir, root, "is not inside")
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink():
            refuse_dir(here, root, "is a symbolic link (to " + os.readlink(here) + "), not a folder in")
    trial_dir.mkdir(parents=True, exist_ok=True)
    if not trial_dir.resolve().is_relative_to(root.resolve()):
        refuse_dir(trial_dir, root, "leads out of")
    return trial_dir


def refuse_dir(path: Path, root: Path, why: str) -> NoReturn:
    raise TrialDirRefused(
        f"the trial folder {path} {why} the workdir {root}: autotune writes a trial's files only "
        "inside the workdir. Remove it (or pick another --workdir) and run the same command again",
        path,
        None,
    )


def output_error(exc: OSError, trial_dir: Path) -> TrialOutputError:
    """The ``TrialOutputError`` for an ``OSError`` met while writing ``trial_dir`` (names the file)."""
    where = Path(exc.filename) if exc.filename else Path(trial_dir)
    return TrialOutputError(
        f"cannot write the trial folder {where}: {exc.strerror or exc}; the trial was ended. "
        "Make room on that disk (or make it writable), or pick another --workdir, then run the "
        "same command again: the sweep resumes and runs this trial again",
        where,
        exc.errno,
    )


def write_launch_files(trial_dir: Path, spec: LaunchSpec) -> None:
    """``command.sh`` and ``env.json``: the trial's command and environment as run, secrets redacted."""
    (trial_dir / "command.sh").write_text(
        "#!/bin/sh\n# The trial's command as autotune ran it (secrets redacted).\n"
        + spec.shell_command()
        + "\n",
        encoding="utf-8",
    )
    (trial_dir / "env.json").write_text(
        json.dumps(redacted_env(spec.env), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
