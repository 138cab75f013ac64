"""Was the host busy while a trial ran? Other processes on its GPU, or CPU load beyond its own.

A step time measured beside someone else's job is not the config's step time: the same
command measured 17.8 samples/s in one trial and 255 in another, and nothing said why.
The resource monitor feeds ``HostLoad`` every sample; ``verdict`` names the reason, or
``None`` for a quiet host. The trial is still ranked: the flag tells the user (progress
line, report) which figures to distrust, and what to re-run.

**GPU**: a process NVML lists on the trial's cards that is not in the trial's process tree
and is not this sweep. A pid counts as another's when it was on the card before the trial
started (the trial had no process yet), or when it is a live process of this machine that
is not the trial's. In a container NVML may report host pids that exist nowhere here: such
a pid appearing after the start is most likely the trial's own, seen under its host pid, and
is not flagged (the memory monitor's "device" fallback covers the same case).

**CPU**: system-wide busy CPU time (``psutil.cpu_times``: user, nice, system, irq, softirq,
steal) less the trial tree's own user+system time and this sweep's own, over the run, as an
average number of cores. Steal counts as others' load: a hypervisor giving the core to a
neighbour slows the trial just the same.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psutil

from autotune.gpu.nvml import GIB

#: Others' CPU load (average cores over the run) that flags a trial: at least half a core, and at
#: least a tenth of the host's logical cores. Why: a GPU trainer's step is fed by a few CPU
#: threads (the Python thread that queues kernels, data-loader workers); a foreign thread that is
#: runnable half the time preempts them regularly on a machine whose cores are in use, and on a
#: large host a tenth of its cores taken elsewhere shares caches and memory bandwidth with the
#: trainer. Below that is background (daemons, a shell, this sweep's own sampling), which the
#: 1.5 % noise floor of the verdict already absorbs. Sustained load is what matters: the step time
#: is a median, robust to a burst, so the average over the run is what is compared.
MIN_BUSY_CORES = 0.5
BUSY_CORE_FRACTION = 0.1

_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def busy_threshold_cores(cores: int) -> float:
    """Average cores of others' load that make a host busy for a trial (see ``MIN_BUSY_CORES``)."""
    return max(MIN_BUSY_CORES, BUSY_CORE_FRACTION * max(1, cores))


def cpu_verdict(others_cores: float, cores: int) -> str | None:
    """The reason a trial's host was busy on CPU, or ``None`` below the threshold."""
    if others_cores < busy_threshold_cores(cores):
        return None
    return f"other processes used {others_cores:.1f} of {cores} CPU cores on average while it ran"


def gpu_verdict(others: Mapping[int, tuple[str, int]]) -> str | None:
    """The reason a trial's GPU was shared (``others``: pid -> (name, peak bytes)), or ``None``."""
    if not others:
        return None
    shown = sorted(others.items(), key=lambda kv: -kv[1][1])[:3]
    names = ", ".join(
        f"pid {pid}" + (f" ({name})" if name else "") + (f" {used / GIB:.2f} GiB" if used else "")
        for pid, (name, used) in shown
    )
    more = f" and {len(others) - len(shown)} more" if len(others) > len(shown) else ""
    return f"other processes on its GPU: {names}{more}"


def _system_busy_s() -> float:
    times = psutil.cpu_times()
    return sum(float(getattr(times, f, 0.0) or 0.0) for f in _BUSY_FIELDS)


def _cpu_s(proc: psutil.Process) -> float | None:
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        t = proc.cpu_times()
        return float(t.user + t.system)
    return None


@dataclass
class HostLoad:
    """Others' load during one trial: ``start``, then ``sample`` each monitor tick, then ``verdict``.

    The trial's own CPU time is the last user+system time seen of each of its processes (a
    process that ends between two samples loses at most one interval of its time, which then
    counts as others': a small over-count, far below the threshold for a normal trainer).
    """

    cores: int = field(default_factory=lambda: psutil.cpu_count() or 1)
    _me: psutil.Process = field(default_factory=psutil.Process)
    _t0: float | None = None
    _t_last: float | None = None
    _busy0: float = 0.0
    _busy_last: float = 0.0
    _me0: float = 0.0
    _me_last: float = 0.0
    _tree_cpu: dict[int, float] = field(default_factory=dict)
    _gpu_before: set[int] = field(default_factory=set)
    _gpu_others: dict[int, tuple[str, int]] = field(default_factory=dict)

    def start(self, gpu_pids: Iterable[int] = ()) -> None:
        """Take the pre-trial readings; ``gpu_pids``: the processes already on the trial's cards."""
        self._tree_cpu.clear()
        self._gpu_others.clear()
        self._gpu_before = set(gpu_pids) - {os.getpid()}
        self._t0 = self._t_last = time.monotonic()
        self._busy0 = self._busy_last = _system_busy_s()
        self._me0 = self._me_last = _cpu_s(self._me) or 0.0

    def sample(self, tree: Iterable[psutil.Process], gpu_usage: Mapping[int, int] | None = None) -> None:
        """One tick: the trial's processes now, and NVML's pid -> bytes on its cards (if known)."""
        if self._t0 is None:
            return
        procs = list(tree)
        for p in procs:
            cpu = _cpu_s(p)
            if cpu is not None:
                self._tree_cpu[p.pid] = max(cpu, self._tree_cpu.get(p.pid, 0.0))
        self._t_last = time.monotonic()
        self._busy_last = _system_busy_s()
        self._me_last = _cpu_s(self._me) or self._me_last
        if gpu_usage:
            mine = {p.pid for p in procs} | set(self._tree_cpu) | {os.getpid()}
            for pid, used in gpu_usage.items():
                if pid in mine or not (pid in self._gpu_before or psutil.pid_exists(pid)):
                    continue
                name, peak = self._gpu_others.get(pid, ("", 0))
                if not name:
                    with contextlib.suppress(psutil.Error):
                        name = psutil.Process(pid).name()
                self._gpu_others[pid] = (name, max(peak, int(used)))

    def _span(self) -> float | None:
        if self._t0 is None or self._t_last is None:
            return None
        span = self._t_last - self._t0
        return span if span >= 1.0 else None  # shorter: too short to tell load from sampling jitter

    def own_cpu_s(self) -> float:
        """CPU seconds the trial's processes used, as last seen (this sweep's not included)."""
        return sum(self._tree_cpu.values())

    def others_cores(self) -> float | None:
        """Others' CPU load over the run, in average cores; ``None`` before a second of data."""
        span = self._span()
        if span is None:
            return None
        own = self.own_cpu_s() + (self._me_last - self._me0)
        return max(0.0, (self._busy_last - self._busy0 - own) / span)

    def verdict(self) -> str | None:
        """Why the host was busy for this trial (GPU first, then CPU), or ``None``."""
        reasons = [gpu_verdict(self._gpu_others)]
        others = self.others_cores()
        if others is not None:
            reasons.append(cpu_verdict(others, self.cores))
        found = [r for r in reasons if r]
        return "; ".join(found) if found else None
