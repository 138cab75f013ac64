"""A trial's own cgroup (v2), where this host lets autotune make one: exact membership, one kill.

A process can leave its group (``setsid``), its tree (its parent exits) and its environment mark
(``execve`` with an empty environment), but not its cgroup: every process the trial starts is
born in the trial's cgroup and stays there. So where a cgroup v2 hierarchy is mounted and the
orchestrator may create a folder in its own cgroup (root, or a delegated subtree), each trial
gets ``autotune-<mark>`` beside nothing else: ``cgroup.procs`` lists every process the trial
has (the runner counts their memory and signals them), ``cgroup.kill`` ends them all at once
(nothing can fork past it), and a resume finds the folder again by the trial's mark.

Elsewhere (macOS, a read-only ``/sys/fs/cgroup``, cgroup v1 only) ``create`` returns ``None``
and the process tree's other nets (group, tree, mark, subreaper) carry on alone.
``AUTOTUNE_CGROUP=off`` turns cgroups off (the tests check both ways).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

#: ``AUTOTUNE_CGROUP=off`` (or ``0``/``no``) keeps trials out of cgroups.
ENV_SWITCH = "AUTOTUNE_CGROUP"
PREFIX = "autotune-"


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() not in {"off", "0", "no", "false"}


def own_cgroup_dir() -> Path | None:
    """This process's cgroup v2 folder (``0::/path`` in /proc/self/cgroup under the cgroup2 mount)."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
        mounts = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if rel is None:
        return None
    for line in mounts:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            mount = left.split(" ")[4]
            path = Path(mount) / rel.lstrip("/")
            return path if path.is_dir() else None
    return None


class TrialCgroup:
    """One trial's cgroup folder. Every method is safe to call after the folder is gone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def create(cls, mark: str) -> TrialCgroup | None:
        """Make ``autotune-<mark>`` in this process's cgroup; ``None`` where that is not allowed."""
        if not enabled():
            return None
        base = own_cgroup_dir()
        if base is None:
            return None
        path = base / f"{PREFIX}{mark}"
        try:
            path.mkdir()
        except FileExistsError:
            pass
        except OSError:
            return None
        if not os.access(path / "cgroup.procs", os.W_OK):
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    @classmethod
    def find(cls, mark: str) -> TrialCgroup | None:
        """The folder a trial with ``mark`` left (a dead sweep's, for resume), if it is there."""
        base = own_cgroup_dir() if enabled() else None
        if base is None or not mark:
            return None
        path = base / f"{PREFIX}{mark}"
        return cls(path) if path.is_dir() else None

    def enter_hook(self) -> Callable[[], None]:
        """A ``preexec_fn`` that moves the new child into this cgroup before it runs the trainer,
        so even what it forks in its first microsecond is born inside. It does one ``write`` on
        a descriptor opened here (nothing that could take a lock another thread holds); should
        the write fail the child runs on outside, and ``contains`` tells the runner."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        self._fd = fd
        write = os.write

        def enter() -> None:
            with contextlib.suppress(OSError):
                write(fd, b"0")

        return enter

    def close_hook(self) -> None:
        """Close the descriptor ``enter_hook`` opened (once the child started)."""
        fd = self._fd
        if fd is not None:
            self._fd = None
            with contextlib.suppress(OSError):
                os.close(fd)

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text(encoding="ascii")
        except OSError:
            return []
        return [int(x) for x in text.split()]

    def contains(self, pid: int) -> bool:
        return pid in self.pids()

    def signal(self, sig: int) -> None:
        """``sig`` to every member; SIGKILL goes through ``cgroup.kill`` (atomic, fork-proof)."""
        if sig == signal.SIGKILL:
            try:
                (self.path / "cgroup.kill").write_text("1", encoding="ascii")
                return
            except OSError:
                pass  # a kernel before 5.14: one by one
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove the folder once it is empty (waits up to ``wait_s``); False when it could not."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    return False
            time.sleep(0.02)


def available() -> bool:
    """Whether a trial started now would get its own cgroup (made and removed to find out)."""
    probe = TrialCgroup.create(f"probe-{os.getpid()}-{time.monotonic_ns()}")
    if probe is None:
        return False
    probe.remove()
    return True
