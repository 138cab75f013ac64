"""``autotune`` run as a user runs it: a real process, in an environment that finds this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"


def cli_env(*, drop: Sequence[str] = (), keep_pythonpath: bool = True, **extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``.

    ``drop``: prefixes of variables left out (a fake trainer's knobs from an outer test, say), so a
    test sees only what it sets in ``extra``. ``keep_pythonpath=False``: ``PYTHONPATH`` is this
    checkout alone, as on a user's machine where nothing else is on it.
    """
    prefixes = (*drop, *(() if keep_pythonpath else ("PYTHONPATH",)))
    env = (
        {k: v for k, v in os.environ.items() if not k.startswith(prefixes)} if prefixes else dict(os.environ)
    )
    inherited = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + inherited if inherited else "")
    env.update(extra)
    return env


def autotune_argv(*args: str) -> list[str]:
    """``python -m autotune ARGS`` with this interpreter: the argv a Popen of the CLI takes."""
    return [sys.executable, "-m", "autotune", *args]


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``autotune ARGS`` to its end and capture its output (text)."""
    return subprocess.run(
        autotune_argv(*args), cwd=cwd, env=env if env is not None else cli_env(),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
