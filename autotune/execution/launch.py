"""What it takes to start one trial: an argv list (never a shell), added env, a cwd."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
