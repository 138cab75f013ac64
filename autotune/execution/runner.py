"""One trial subprocess: launched, watched, limited, ended, recorded.

Every trial ends, and ends completely: it runs in its own session and process
group, and in its own cgroup where the host allows one; a wall-clock limit, a stall limit
(no output), an OOM text in its output and the ``stop`` event (Ctrl-C) all lead to SIGTERM
to the group, a grace period, then SIGKILL to the cgroup, the group and every descendant
seen (see ``autotune.execution.proctree``: the tree is sampled while the trial runs,
descendants are marked through the environment and orphans come back to the orchestrator
as their subreaper, so double-forked daemons die too). When the trainer exits, whatever it
left running gets a short grace and then SIGKILL: nothing a trial started outlives it.

Output streams to ``stdout.log``/``stderr.log`` through one select loop that
keeps only a bounded tail in memory (plus the few lines that decide the
outcome), so 100 MB of output neither deadlocks the pipes nor grows autotune.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal as _signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from autotune.errors import LaunchError
from autotune.execution import hookseal
from autotune.execution.cgroup import TrialCgroup
from autotune.execution.launch import LaunchSpec
from autotune.execution.monitor import ResourceMonitor
from autotune.execution.output import TAIL_BYTES, Stream, TrialOutput
from autotune.execution.proctree import (
    MARK_VAR,
    ProcessRecord,
    ProcessTree,
    become_subreaper,
    spawning,
    write_process_file,
)
from autotune.execution.trialdir import make_trial_dir, output_error, refuse_dir, write_launch_files

POLL_S = 0.05  # how quickly limits and the stop event are noticed
TREE_REFRESH_S = 0.25  # how often the process tree is walked for new descendants (one /proc pass)
OOM_KILL_GRACE_S = 2.0  # after an OOM the trainer already had oom_grace_s to exit on its own
LEFTOVER_GRACE_S = 2.0  # for descendants still alive after the trainer exited by itself
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for processes to disappear
DRAIN_S = 2.0  # after every process is gone, how long to wait for the pipes to close


__all__ = ["TAIL_BYTES", "RunLimits", "RunResult", "make_trial_dir", "output_error", "run_trial"]


@dataclass(frozen=True)
class RunLimits:
    """When to end a trial. ``None`` disables a limit; seconds otherwise.

    ``grace_s`` is the time between SIGTERM and SIGKILL; ``oom_grace_s`` the time a
    trainer gets to exit on its own after printing an OOM (then SIGTERM, at most
    ``OOM_KILL_GRACE_S``, SIGKILL: an OOM that hangs ends within about 7 s).
    """

    wall_timeout_s: float | None
    stall_timeout_s: float | None
    grace_s: float = 10.0
    oom_grace_s: float = 5.0
    #: End the trial when its process tree's RSS passes this (GB): a block-swapping trainer that
    #: outgrows host RAM must not bring the kernel's OOM killer down on the orchestrator too.
    host_ram_limit_gb: float | None = None

    def __post_init__(self) -> None:
        for name in ("wall_timeout_s", "stall_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(
                    f"RunLimits.{name} must be a positive number of seconds or None; got {value!r}"
                )
        for name in ("grace_s", "oom_grace_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"RunLimits.{name} must be zero or more seconds; got {value!r}")


@dataclass(frozen=True)
class RunResult:
    """What happened. ``returncode`` is Popen's (negative when a signal ended it); ``signal`` that signal."""

    returncode: int | None
    signal: int | None
    timed_out: bool
    stalled: bool
    interrupted: bool
    oom_seen: bool
    wall_s: float
    stdout_path: Path
    stderr_path: Path
    output_tail: str
    measured_peak_vram_gb: float | None
    peak_host_rss_gb: float
    timeline_path: Path | None
    pid: int
    end_reason: str | None = (
        None  # why autotune ended it ("wall timeout", "stall", "oom", "host ram", "stop")
    )
    vram_source: str | None = None  # "process" or "device" (see autotune.execution.monitor)
    processes_seen: int = 1
    survivors: tuple[int, ...] = ()  # pids that outlived SIGKILL (uninterruptible sleep); normally empty
    busy: str | None = None  # why the host was busy while it ran (see autotune.execution.busy), else None
    hook_lines_rejected: int = (
        0  # lines of hook.jsonl the hook did not sign (see autotune.execution.hookseal)
    )


def run_trial(
    spec: LaunchSpec,
    trial_dir: Path,
    limits: RunLimits,
    *,
    monitor: ResourceMonitor | None = None,
    stop: threading.Event | None = None,
    on_output: Callable[[str], None] | None = None,
    on_start: Callable[[ProcessRecord], None] | None = None,
) -> RunResult:
    """Run one trial to its end and record it in ``trial_dir``.

    Writes ``command.sh``, ``env.json`` (added env, secrets redacted),
    ``process.json`` (pid and environment mark, for ending orphans on resume),
    ``stdout.log``, ``stderr.log`` and ``memory.csv``. ``on_output`` gets each
    output line (both streams) as it arrives; ``on_start`` the started process, once,
    right after ``process.json`` is written (on the runner's thread: keep it quick,
    it delays the reading of the trial's output). Without ``monitor``, host memory
    alone is sampled. Raises ``LaunchError`` when the command cannot start, and
    ``TrialOutputError`` when the trial folder cannot be written (the trial's
    processes are ended first).
    """
    trial_dir = Path(trial_dir)
    try:
        return _Trial(spec, trial_dir, limits, monitor or ResourceMonitor(), stop, on_output, on_start).run()
    except OSError as exc:  # Popen's own errors are LaunchError; this is the folder
        raise output_error(exc, trial_dir) from exc


class _Trial:
    """One run of one trial: the files, the process, the select loop, the limits and the ending."""

    def __init__(
        self,
        spec: LaunchSpec,
        trial_dir: Path,
        limits: RunLimits,
        monitor: ResourceMonitor,
        stop: threading.Event | None,
        on_output: Callable[[str], None] | None,
        on_start: Callable[[ProcessRecord], None] | None = None,
    ) -> None:
        self.spec, self.dir, self.limits, self.monitor = spec, trial_dir, limits, monitor
        self.stop = stop or threading.Event()
        self.on_start = on_start
        self.output = TrialOutput(on_output)
        self.end_reason: str | None = None
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.killed_at: float | None = None
        self.termed: set[int] = set()  # pids sent SIGTERM (one each; later finds get theirs too)

    # --- the whole run ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        if self.dir.is_symlink():
            refuse_dir(self.dir, self.dir.parent, "is a symbolic link, not a folder in")
        self.dir.mkdir(parents=True, exist_ok=True)
        # The caller's mark (the sweep records it on the trial) or a fresh one: the trial's only mark.
        mark = self.spec.env.get(MARK_VAR) or uuid.uuid4().hex
        write_launch_files(self.dir, self.spec)
        stdout_path, stderr_path = self.dir / "stdout.log", self.dir / "stderr.log"
        hook_path = self.spec.env.get(hookseal.HOOK_FILE_VAR)
        hook_key = hookseal.new_key() if hook_path else None  # never written: env.json has spec.env only
        env = {**os.environ, **self.spec.env, MARK_VAR: mark}
        if hook_key is not None:
            env[hookseal.HOOK_KEY_VAR] = hook_key
        else:
            env.pop(hookseal.HOOK_KEY_VAR, None)
        started_wall = time.time()
        become_subreaper()
        cgroup = TrialCgroup.create(mark)
        # Unbuffered: a full disk fails the write that met it (and names the file), never a later flush.
        with stdout_path.open("wb", buffering=0) as out_log, stderr_path.open("wb", buffering=0) as err_log:
            with spawning():
                try:
                    proc = subprocess.Popen(
                        list(self.spec.argv),
                        cwd=self.spec.cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        start_new_session=True,
                        bufsize=0,
                        preexec_fn=cgroup.enter_hook() if cgroup is not None else None,
                    )
                except OSError as exc:
                    if cgroup is not None:
                        cgroup.remove()
                    raise LaunchError(
                        f"could not start the trial command {self.spec.argv[0]!r} in {self.spec.cwd}: "
                        f"{exc}. Check that the program exists and is executable and that the folder "
                        "exists."
                    ) from exc
                finally:
                    if cgroup is not None:
                        cgroup.close_hook()
                tree = ProcessTree(proc.pid, mark=mark, started_at=started_wall, cgroup=cgroup)
            t0 = time.monotonic()
            self.last_output = t0
            record = ProcessRecord(proc.pid, mark, _start_time(proc.pid, default=started_wall))
            write_process_file(self.dir, record)
            assert proc.stdout is not None and proc.stderr is not None
            streams = [Stream(proc.stdout, out_log, stdout_path), Stream(proc.stderr, err_log, stderr_path)]
            self.monitor.start(tree, self.dir / "memory.csv")
            survivors: list[int] = []
            try:
                if self.on_start is not None:  # inside: a callback that raises leaves no process behind
                    self.on_start(record)
                survivors = self._loop(proc, tree, streams, t0)
            finally:
                if proc.poll() is None or tree.alive():  # an exception (Ctrl-C) in the loop: leave nothing
                    tree.refresh(include_marked=True)
                    tree.signal_all(_signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=KILL_WAIT_S)
                    tree.wait_gone(KILL_WAIT_S)
                tree.close()
                summary = self.monitor.stop()
                for s in streams:
                    s.pipe.close()
            wall_s = time.monotonic() - t0
        # Every process of the trial has ended: nothing can write the hook's file any more.
        rejected = hookseal.seal(
            Path(hook_path) if hook_path else self.dir / hookseal.HOOK_FILE_NAME, hook_key
        )
        rc = proc.returncode
        return RunResult(
            returncode=rc,
            signal=-rc if rc is not None and rc < 0 else None,
            timed_out=self.end_reason == "wall timeout",
            stalled=self.end_reason == "stall",
            interrupted=self.end_reason == "stop",
            oom_seen=self.output.oom_at is not None,
            wall_s=wall_s,
            stdout_path=stdout_path,
            stderr_path=stderr_path,
            output_tail=self.output.tail_text(),
            measured_peak_vram_gb=summary.peak_vram_gb,
            peak_host_rss_gb=summary.peak_host_rss_gb,
            timeline_path=summary.timeline_path,
            pid=proc.pid,
            end_reason=self.end_reason,
            vram_source=summary.vram_source,
            processes_seen=tree.seen(),
            survivors=tuple(survivors),
            busy=summary.busy,
            hook_lines_rejected=rejected,
        )

    def _loop(
        self, proc: subprocess.Popen[bytes], tree: ProcessTree, streams: list[Stream], t0: float
    ) -> list[int]:
        sel = selectors.DefaultSelector()
        for s in streams:
            sel.register(s.fd, selectors.EVENT_READ, s)
        next_refresh = t0
        exited_at: float | None = None
        final_scan = False
        drain_until: float | None = None
        try:
            while True:
                for key, _ in sel.select(timeout=POLL_S):
                    stream: Stream = key.data
                    arrived = stream.pump(self.output)
                    if arrived is None:
                        sel.unregister(stream.fd)
                    else:
                        self.last_output = arrived
                now = time.monotonic()
                if exited_at is None and proc.poll() is None:
                    if now >= next_refresh:
                        tree.refresh()
                        next_refresh = now + TREE_REFRESH_S
                    if self.end_reason is None:
                        self._check_limits(now, t0)
                    if self.end_reason is not None:
                        self._escalate(tree, now)
                    continue
                if exited_at is None:  # the trainer just ended: look for what it left behind
                    exited_at = now
                    tree.refresh(include_marked=True)
                leftovers = tree.alive(include_root=False)
                if leftovers:
                    if self.term_at is None:  # it exited by itself; its leftovers get a short grace
                        self.term_at, self.kill_at = now, now + min(self.limits.grace_s, LEFTOVER_GRACE_S)
                        tree.signal_all(_signal.SIGTERM)
                        self.termed.update(p.pid for p in leftovers)
                    self._escalate(tree, now)
                    if self.killed_at is not None and now - self.killed_at > KILL_WAIT_S:
                        return [p.pid for p in leftovers]  # uninterruptible: report, do not hang
                    continue
                if not final_scan:  # one more look for marked processes spawned meanwhile
                    final_scan = True
                    tree.refresh(include_marked=True)
                    continue
                if drain_until is None:
                    drain_until = now + DRAIN_S
                if not sel.get_map() or now >= drain_until:
                    return []
        finally:
            for s in streams:
                if s.pending:
                    self.output.scan(s.pending, now=time.monotonic())
                    s.pending = b""
            sel.close()

    # --- limits and ending -----------------------------------------------------------------------
    def _check_limits(self, now: float, t0: float) -> None:
        grace = self.limits.grace_s
        if self.stop.is_set():
            self.end_reason = "stop"
        elif self.limits.wall_timeout_s is not None and now - t0 >= self.limits.wall_timeout_s:
            self.end_reason = "wall timeout"
        elif (
            self.limits.stall_timeout_s is not None and now - self.last_output >= self.limits.stall_timeout_s
        ):
            self.end_reason = "stall"
        elif self.output.oom_at is not None and now - self.output.oom_at >= self.limits.oom_grace_s:
            self.end_reason = "oom"
            grace = min(grace, OOM_KILL_GRACE_S)
        elif (
            self.limits.host_ram_limit_gb is not None
            and self.monitor.peak_host_rss_gb > self.limits.host_ram_limit_gb
        ):
            self.end_reason = "host ram"
            grace = min(grace, OOM_KILL_GRACE_S)
        if self.end_reason is not None:
            self.term_at, self.kill_at = None, now + grace

    def _escalate(self, tree: ProcessTree, now: float) -> None:
        """SIGTERM once, SIGKILL at ``kill_at`` and again to anything found after that."""
        if self.term_at is None:
            self.term_at = now
            tree.signal_all(_signal.SIGTERM)
            self.termed.update(p.pid for p in tree.alive())
        else:  # found since the SIGTERM (a setsid grandchild seen once its parent died): its turn
            tree.signal_new(_signal.SIGTERM, self.termed)
        assert self.kill_at is not None
        if now >= self.kill_at:
            if self.killed_at is None:
                self.killed_at = now
                tree.refresh(include_marked=True)
            tree.signal_all(_signal.SIGKILL)


def _start_time(pid: int, *, default: float) -> float:
    """The kernel's start time of our child ``pid`` (what a resume compares a reused pid with).

    Read before the child can be reaped (it stays a zombie until we wait), so even a trial that
    already ended has one; ``default`` only where the platform will not say.
    """
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return default
