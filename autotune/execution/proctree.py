"""Finding and ending every process a trial started, even those that left its group.

A trial runs in its own session and process group, but a process can leave the
group (``setsid``) and, once its parent dies, the tree too. So three nets are
cast: the group, the process tree (sampled while the trial runs, so a
grandchild seen once is remembered), and a mark in the environment
(``AUTOTUNE_TRIAL_MARK``) that every descendant inherits and that can be read
back from ``/proc`` even after the orchestrator itself died (resume).

This is the only module that ends processes: the runner ends a running trial through a
``ProcessTree``, and a resume (``autotune.store.recovery``) ends what a dead sweep left
with ``kill_tree``. The trial's ``process.json`` (pid, mark, start) is written and read here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

#: The one environment mark of a trial's processes: every descendant inherits it.
MARK_VAR = "AUTOTUNE_TRIAL_MARK"
#: The file in the trial folder that says which processes are the trial's.
PROCESS_FILE = "process.json"
#: Seconds two start times of one pid may differ and still be the same process.
START_TOLERANCE_S = 1.0
#: Seconds to wait for processes sent SIGKILL to be gone.
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class ProcessRecord:
    """What ``process.json`` says: the trial's first process, its mark, and when it started."""

    pid: int
    mark: str
    started_at: float


def write_process_file(trial_dir: Path, record: ProcessRecord) -> None:
    """Write ``process.json`` as soon as the trial's process exists, for ending orphans on resume."""
    (Path(trial_dir) / PROCESS_FILE).write_text(
        json.dumps({"pid": record.pid, "mark": record.mark, "started_at": record.started_at}) + "\n",
        encoding="utf-8",
    )


def read_process_file(trial_dir: Path) -> ProcessRecord | None:
    """The trial's ``process.json``; ``None`` when there is none or it is incomplete."""
    try:
        info = json.loads((Path(trial_dir) / PROCESS_FILE).read_text(encoding="utf-8"))
        return ProcessRecord(int(info["pid"]), str(info["mark"]), float(info["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie holds no memory; only its parent can reap it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def marked_processes(
    mark: str | None, *, created_after: float = 0.0, pgid: int | None = None
) -> list[psutil.Process]:
    """Live processes whose environment carries ``AUTOTUNE_TRIAL_MARK=mark``, or that are in group ``pgid``."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["create_time"]):
        try:
            if proc.pid == me or (proc.info["create_time"] or 0.0) < created_after:
                continue
            in_group = pgid is not None and os.getpgid(proc.pid) == pgid
            if (in_group or (mark and proc.environ().get(MARK_VAR) == mark)) and is_alive(proc):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


class ProcessTree:
    """The processes of one trial: its root, every descendant ever seen, and marked ones.

    ``refresh`` is cheap enough to call several times a second; ``alive`` is what
    the resource monitor samples and what ``end`` signals. Thread-safe.
    """

    def __init__(self, root_pid: int, *, mark: str | None = None, started_at: float | None = None) -> None:
        self.root_pid = root_pid
        self.mark = mark
        self._started_at = (started_at if started_at is not None else time.time()) - 1.0
        self._lock = threading.Lock()
        self._known: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            self._known[root_pid] = psutil.Process(root_pid)

    def refresh(self, *, include_marked: bool = False) -> None:
        """Add descendants of the root and of every known process (orphans keep their children).

        ``include_marked`` also scans the whole system for the trial's group and mark
        (tens of ms): done when the trainer exits and before SIGKILL.
        """
        with self._lock:
            frontier = [p.pid for p in self._known.values() if is_alive(p)]
            known = set(self._known)
        children = _children_map()  # one pass over /proc, however many processes are known
        found: list[psutil.Process] = []
        seen = set(frontier)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child in seen:
                    continue
                seen.add(child)
                frontier.append(child)
                if child not in known:
                    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        found.append(psutil.Process(child))
        if include_marked:
            found.extend(marked_processes(self.mark, created_after=self._started_at, pgid=self.root_pid))
        with self._lock:
            for proc in found:
                self._known.setdefault(proc.pid, proc)

    def alive(self, *, include_root: bool = True) -> list[psutil.Process]:
        with self._lock:
            procs = list(self._known.values())
        return [p for p in procs if is_alive(p) and (include_root or p.pid != self.root_pid)]

    def pids(self) -> list[int]:
        return [p.pid for p in self.alive()]

    def seen(self) -> int:
        """How many distinct processes the trial has had (for the record)."""
        with self._lock:
            return len(self._known)

    def wait_gone(self, timeout_s: float) -> list[psutil.Process]:
        """Poll until every known process is gone (or a zombie); returns those still alive."""
        deadline = time.monotonic() + timeout_s
        while (left := self.alive()) and time.monotonic() < deadline:
            psutil.wait_procs(left, timeout=0.02)
        return left

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the root's group and to every known live process (pid-reuse safe)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root_pid, sig)
        for proc in self.alive():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                proc.send_signal(sig)

    def signal_new(self, sig: int, done: set[int]) -> None:
        """Send ``sig`` to every live known process whose pid is not in ``done``, and add it there
        (a process found after the group was signalled gets its turn, once)."""
        for proc in self.alive():
            if proc.pid not in done:
                done.add(proc.pid)
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    proc.send_signal(sig)


def kill_tree(
    pid: int | None = None,
    *,
    mark: str | None = None,
    grace_s: float = 5.0,
    started_at: float | None = None,
    pid_started: float | None = None,
    pgid: int | None = None,
) -> list[int]:
    """End a trial's processes: SIGTERM, up to ``grace_s``, then SIGKILL. Returns the pids ended.

    For resume after the orchestrator died. Only what is surely the trial's is touched:
    processes carrying ``mark`` (started after ``started_at``, less a second), and ``pid`` with
    its tree and group (``pgid``, default ``pid``) when ``pid`` is trusted: its start time
    matches ``pid_started``, or, with neither ``pid_started`` nor ``mark`` known, always (a pid
    reused since is then at risk; a mark makes it safe).
    """
    procs: dict[int, psutil.Process] = {}
    group: int | None = None
    if pid is not None and (pid_started is not None or not mark):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            root = psutil.Process(pid)
            if pid_started is None or abs(root.create_time() - pid_started) < START_TOLERANCE_S:
                procs[pid] = root
                for c in root.children(recursive=True):
                    procs[c.pid] = c
        if pid in procs or pid_started is None:
            group = pgid if pgid is not None and pgid in procs else pid
            for p in marked_processes(None, pgid=group):
                procs.setdefault(p.pid, p)
    if mark:
        for p in marked_processes(mark, created_after=(started_at - 1.0) if started_at else 0.0):
            procs[p.pid] = p
    for p in list(procs.values()):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            for c in p.children(recursive=True):
                procs.setdefault(c.pid, c)
    procs.pop(os.getpid(), None)
    targets = [p for p in procs.values() if is_alive(p)]
    _send_group(group, signal.SIGTERM)
    _send(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := [p for p in targets if is_alive(p)]) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.1)
    left = [p for p in targets if is_alive(p)]
    _send_group(group, signal.SIGKILL)
    _send(left, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while (left := [p for p in left if is_alive(p)]) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.1)
    return sorted(p.pid for p in targets)


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids. Reads /proc/*/stat directly on Linux (a third of psutil's cost)."""
    out: dict[int, list[int]] = {}
    if not os.path.isdir("/proc/self"):
        for proc in psutil.process_iter(["ppid"]):
            out.setdefault(proc.info.get("ppid") or 0, []).append(proc.pid)
        return out
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            ppid = int(data[data.rindex(b")") + 2 :].split(b" ", 2)[1])  # comm may hold spaces and ')'
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def _send(procs: Iterable[psutil.Process], sig: int) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)


def _send_group(pgid: int | None, sig: int) -> None:
    if pgid is not None and pgid != os.getpgrp():  # never our own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
