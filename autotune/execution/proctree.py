"""Finding and ending every process a trial started, even those that left its group.

A trial runs in its own session and process group, but a process can leave the
group (``setsid``), the tree (its parent exits: a double fork) and its environment
mark (``execve`` with an empty environment). So the nets are:

- the trial's cgroup (``autotune.execution.cgroup``), where the host allows one: exact, a
  process cannot leave it, and ``cgroup.kill`` ends every member at once;
- the orchestrator as a *subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): an orphan of a trial
  is re-parented to the orchestrator instead of init, so it is found as an adopted child
  (told from the orchestrator's own children by its session) and counted and ended with
  the trial; with several trials at once in one process, an orphan that names no known
  process of one trial as its session or group is counted with each of them;
- the group, the process tree (sampled while the trial runs, so a grandchild seen once is
  remembered), and a mark in the environment (``AUTOTUNE_TRIAL_MARK``) that every
  descendant inherits and that can be read back from ``/proc`` even after the orchestrator
  itself died (resume).

This is the only module that ends processes: the runner ends a running trial through a
``ProcessTree``, and a resume (``autotune.store.recovery``) ends what a dead sweep left
with ``kill_tree``. The trial's ``process.json`` (pid, mark, start) is written and read here.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from autotune.execution.cgroup import TrialCgroup

#: The one environment mark of a trial's processes: every descendant inherits it.
MARK_VAR = "AUTOTUNE_TRIAL_MARK"
#: The file in the trial folder that says which processes are the trial's.
PROCESS_FILE = "process.json"
#: Seconds two start times of one pid may differ and still be the same process.
START_TOLERANCE_S = 1.0
#: Seconds to wait for processes sent SIGKILL to be gone.
KILL_WAIT_S = 5.0
#: ``prctl`` option that makes the calling process the reaper of its descendants' orphans.
PR_SET_CHILD_SUBREAPER = 36

_subreaper: bool | None = None
_live_trees: weakref.WeakSet[ProcessTree] = weakref.WeakSet()
_live_lock = threading.RLock()  # also held while a trial's root is started (``spawning``)


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux 3.4+); False elsewhere.

    Process-wide and for good: it only changes whose child an orphan becomes (ours, not init's),
    and adopted orphans of a trial are reaped by its ``ProcessTree``.
    """
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _subreaper


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


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Hold while starting a trial's root and making its ``ProcessTree``: until the tree is
    registered, the new root is a child of ours in a session of its own, which another trial's
    tree would otherwise take for an orphan of its own."""
    with _live_lock:
        yield


class ProcessTree:
    """The processes of one trial: its root, every descendant ever seen, its cgroup's members,
    the orphans it left with us (subreaper), and marked ones.

    ``refresh`` is cheap enough to call several times a second; ``alive`` is what
    the resource monitor samples and what ``end`` signals; ``close`` when the trial is over.
    Thread-safe.
    """

    def __init__(
        self,
        root_pid: int,
        *,
        mark: str | None = None,
        started_at: float | None = None,
        cgroup: TrialCgroup | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.mark = mark
        self.cgroup = cgroup
        self._started_at = (started_at if started_at is not None else time.time()) - 1.0
        self._lock = threading.Lock()
        self._known: dict[int, psutil.Process] = {}
        self._adopted: set[int] = set()  # orphans re-parented to us: ours to reap
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            self._known[root_pid] = psutil.Process(root_pid)
        with _live_lock:
            _live_trees.add(self)

    def refresh(self, *, include_marked: bool = False) -> None:
        """Add the cgroup's members, the trial's orphans adopted by us, and descendants of the
        root and of every known process (orphans keep their children).

        ``include_marked`` also scans the whole system for the trial's group and mark
        (tens of ms): done when the trainer exits and before SIGKILL.
        """
        children = _children_map()  # one pass over /proc, however many processes are known
        with self._lock:
            known = set(self._known)
        found: list[psutil.Process] = []
        for pid in [*(self.cgroup.pids() if self.cgroup else ()), *self._orphans(children, known)]:
            if pid not in known:
                known.add(pid)
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    found.append(psutil.Process(pid))
        with self._lock:
            for proc in found:
                self._known.setdefault(proc.pid, proc)
            frontier = [p.pid for p in self._known.values() if is_alive(p)]
        found = []
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

    def _orphans(self, children: dict[int, list[int]], known: set[int]) -> list[int]:
        """Our adopted children that are this trial's: not in our session (every trial has its
        own), not a trial's root, started after the trial; and, when several trials run, in a
        session or group led by a known process of this one, or of none of them."""
        me = os.getpid()
        mine = children.get(me, [])
        if not mine or not _subreaper:
            return []
        with _live_lock:
            trees = [t for t in _live_trees if t is not self]
            roots = {t.root_pid for t in trees} | {self.root_pid}
            return self._attribute(mine, roots, trees, known)

    def _attribute(
        self, mine: list[int], roots: set[int], trees: list[ProcessTree], known: set[int]
    ) -> list[int]:
        own_session = os.getsid(0)
        out = []
        for pid in mine:
            if pid in roots:
                continue
            try:
                sid, pgid = os.getsid(pid), os.getpgid(pid)
                if sid == own_session or psutil.Process(pid).create_time() < self._started_at:
                    continue
            except (OSError, psutil.Error):
                continue
            linked = bool({pid, sid, pgid} & known)
            if linked or not any({sid, pgid, pid} & t.known_pids() for t in trees):
                out.append(pid)
        with self._lock:
            self._adopted.update(out)
        return out

    def known_pids(self) -> set[int]:
        with self._lock:
            return set(self._known)

    def reap(self) -> None:
        """Collect the exit status of adopted orphans that ended (else they stay zombies of ours)."""
        with self._lock:
            adopted = list(self._adopted)
        for pid in adopted:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                with self._lock:
                    self._adopted.discard(pid)

    def close(self, wait_s: float = KILL_WAIT_S) -> None:
        """The trial is over: reap its orphans, remove its cgroup once empty, stop adopting."""
        self.reap()
        if self.cgroup is not None:
            self.cgroup.remove(wait_s=wait_s if self.cgroup.pids() else 0.5)
        with _live_lock:
            _live_trees.discard(self)

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
            self.reap()
        return left

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the cgroup, the root's group and every known live process (pid-reuse safe)."""
        if self.cgroup is not None:
            self.cgroup.signal(sig)
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
    cgroup = TrialCgroup.find(mark) if mark else None
    if mark:
        for p in marked_processes(mark, created_after=(started_at - 1.0) if started_at else 0.0):
            procs[p.pid] = p
        for cpid in cgroup.pids() if cgroup else ():  # the trial's cgroup: exact, whatever they did
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                procs.setdefault(cpid, psutil.Process(cpid))
    for p in list(procs.values()):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            for c in p.children(recursive=True):
                procs.setdefault(c.pid, c)
    procs.pop(os.getpid(), None)
    targets = [p for p in procs.values() if is_alive(p)]
    _send_group(group, signal.SIGTERM)
    _send(targets, signal.SIGTERM)
    if cgroup is not None:
        cgroup.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := [p for p in targets if is_alive(p)]) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.1)
    left = [p for p in targets if is_alive(p)]
    if cgroup is not None:
        cgroup.signal(signal.SIGKILL)
    _send_group(group, signal.SIGKILL)
    _send(left, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while (left := [p for p in left if is_alive(p)]) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.1)
    if cgroup is not None:
        cgroup.remove(wait_s=KILL_WAIT_S)
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
