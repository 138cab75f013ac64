"""Poll for a condition another process brings about, and say why when it never comes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping


def wait_for(
    predicate: Callable[[], bool],
    what: str,
    timeout_s: float = 30.0,
    *,
    processes: Mapping[str, subprocess.Popen[str]] | None = None,
    explain: Callable[[], str] | None = None,
    interval_s: float = 0.05,
) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout_s``.

    A process in ``processes`` that exits ends the wait at once (what it was waiting for may never
    come). On failure ``explain()`` is appended to the message, so a flake says why.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        exited = [name for name, proc in (processes or {}).items() if proc.poll() is not None]
        if exited or time.monotonic() > deadline:
            why = f"{', '.join(exited)} exited" if exited else f"timed out after {timeout_s}s"
            raise AssertionError(f"{why} waiting for {what}{explain() if explain else ''}")
        time.sleep(interval_s)
