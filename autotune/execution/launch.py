"""What it takes to start one trial: an argv list (never a shell), added env, a cwd."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import UsageError

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted>"


@dataclass(frozen=True)
class LaunchSpec:
    """A trial's command. ``env`` holds only what autotune adds to the inherited environment."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)

    def shell_command(self) -> str:
        """A copy-pasteable command line (cd, added env, argv), secrets redacted."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in redacted_env(self.env).items())
        argv = shlex.join(self.argv)
        return f"cd {shlex.quote(str(self.cwd))} && {env + ' ' if env else ''}{argv}"


def is_secret_name(name: str) -> bool:
    """Environment names whose values must never be written to disk or reports."""
    return bool(_SECRET_NAME.search(name))


def redacted_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def env_prefix(env: Mapping[str, str]) -> str:
    """``NAME=value ...`` for a shell line (empty for no env). A secret is never written: the line
    reads it from the shell it runs in, and stops with a message when it is not exported."""
    return " ".join(
        f'{k}="${{{k}:?export {k} first}}"' if is_secret_name(k) else f"{k}={shlex.quote(str(v))}"
        for k, v in env.items()
    )


def check_program(program: str, what: str) -> str:
    """The program a trial starts, checked before any trial runs (a typo would otherwise fail
    every trial): a path must be an executable file, a bare name must be on ``PATH``. Returns a
    path made absolute but never resolved: a venv's ``bin/python`` is a link, and only through
    that link does Python find the venv."""
    if os.sep not in program and not program.startswith("~"):
        if shutil.which(program) is None:
            raise UsageError(f"{what} {program!r}: no such program on PATH; give its full path")
        return program
    path = Path(program).expanduser().absolute()
    if not path.exists():
        why = "no such file"
    elif path.is_dir():
        why = "a folder, not a program"
    elif not os.access(path, os.X_OK):
        why = "not executable (chmod +x it)"
    else:
        return str(path)
    raise UsageError(
        f"{what} {program}: {why}; give the Python of the environment the trainer is installed in, "
        "like /path/to/venv/bin/python"
    )
