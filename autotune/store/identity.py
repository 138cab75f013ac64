"""Who runs a trial or holds a claim: one process, told apart from any other, anywhere.

Why a module of its own: a resume must tell whether the sweep that left a trial RUNNING is
still alive, and a worker whether the holder of a claim is; both are the same question about
a process. A pid alone is not an identity (pids are reused), so it comes with its start time;
and a pid can only be looked up where it lives, so it comes with its place: the boot id and
pid namespace of its machine (``host``, the name people know it by, where no place was
recorded).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: Seconds two start times of one pid may differ and still be the same process (a reused pid
#: starts later than that: its predecessor had to end first).
START_TOLERANCE_S = 1.0


def current_place() -> str:
    """This process's pid space: the boot id and pid namespace (a pid means the same inside one)."""
    return f"{_boot_id()}/{_pid_namespace()}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "no-boot-id:" + socket.gethostname()


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "no-pidns"


def start_time(pid: int) -> float:
    """When process ``pid`` started (seconds since the epoch, to the millisecond)."""
    return round(psutil.Process(pid).create_time(), 3)


def process_runs(pid: int, started: float | None = None) -> bool:
    """True when ``pid`` runs here (not a zombie) and, given ``started``, is the process that
    started then (a reused pid is not it). A process we may not inspect counts as running:
    ending or reaping it on a guess would be worse than waiting."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) < START_TOLERANCE_S
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


@dataclass(frozen=True)
class ProcessIdentity:
    """A process: its pid, its start time, and where it runs.

    Two identities are the same process when pid, host and start time agree; ``name`` (for
    people: "host pid 123 gpu 0") and ``place`` do not take part.
    """

    pid: int
    host: str
    started: float
    place: str = field(default="", compare=False)
    name: str = field(default="", compare=False)

    @classmethod
    def current(cls, label: str = "") -> ProcessIdentity:
        """This process; ``label`` is added to its name (``gpu 0``)."""
        pid, host = os.getpid(), socket.gethostname()
        name = f"{host} pid {pid}" + (f" {label}" if label else "")
        return cls(pid=pid, host=host, started=start_time(pid), place=current_place(), name=name)

    def same_machine(self, other: ProcessIdentity) -> bool:
        """Whether the two share a pid space: by place where both have one, else by host name."""
        if self.place and other.place:
            return self.place == other.place
        return self.host == other.host

    def alive(self) -> bool:
        """True when this process still runs; a process of another machine is assumed alive
        (we cannot tell from here)."""
        here = self.place == current_place() if self.place else self.host == socket.gethostname()
        if not here:
            return True
        return process_runs(self.pid, self.started)

    def as_attrs(self) -> dict[str, Any]:
        """As a trial's or study's user attrs (the orchestrator of a sweep)."""
        return {
            "orchestrator_pid": self.pid,
            "orchestrator_host": self.host,
            "orchestrator_start": self.started,
            "orchestrator_place": self.place,
        }

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> ProcessIdentity | None:
        """The inverse of ``as_attrs``; ``None`` when the attrs name no process."""
        try:
            return cls(
                int(attrs["orchestrator_pid"]),
                str(attrs["orchestrator_host"]),
                float(attrs["orchestrator_start"]),
                place=str(attrs.get("orchestrator_place") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None
