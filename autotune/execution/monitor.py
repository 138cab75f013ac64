"""autotune's own measure of a trial's memory, independent of what the trainer prints.

Several times a second, the monitor sums NVML's per-process used memory over
the trial's process tree (the trainer's own figure is device-wide and sparse),
and the tree's host RSS, and writes a timeline ``memory.csv`` (t_s, vram_gb,
host_rss_gb). The same samples feed ``HostLoad`` (``autotune.execution.busy``): whether
other processes shared the trial's GPU or its host's CPUs, so a trial measured on a busy
host is flagged (``MemorySummary.busy``). In a container NVML may report host-namespace pids that match
none of ours; then the device-wide rise over the pre-trial level stands in,
and ``vram_source`` says so. Without NVML the timeline is host memory only.
"""

from __future__ import annotations

import contextlib
import csv
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import psutil

from autotune.execution.busy import HostLoad
from autotune.execution.proctree import ProcessTree
from autotune.gpu.nvml import GIB, Nvml


@dataclass(frozen=True)
class MemorySummary:
    """Peaks over the run. ``vram_source``: "process" (NVML per pid), "device" (rise over baseline) or None."""

    peak_vram_gb: float | None
    peak_host_rss_gb: float
    samples: int
    timeline_path: Path | None
    vram_source: str | None
    busy: str | None = None  # why the host was busy while it ran (``autotune.execution.busy``), or None


class ResourceMonitor:
    """Samples one trial at a time; ``start`` then ``stop`` (run_trial does both)."""

    def __init__(
        self, nvml: Nvml | None = None, device_indices: Sequence[int] = (), *, interval_s: float = 0.2
    ) -> None:
        self.nvml = nvml
        self.device_indices = list(device_indices) if nvml is not None else []
        self.interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reset()

    def _reset(self) -> None:
        self._peak_vram: int | None = None
        self._peak_rss = 0
        self._samples = 0
        self._used_process_source = False
        self._baseline: dict[int, int] = {}
        self._t0 = time.monotonic()
        self._file: TextIO | None = None
        self._writer: Any = None
        self._path: Path | None = None
        self._tree: ProcessTree | None = None
        self._load = HostLoad()

    def start(self, tree: ProcessTree, csv_path: Path | None) -> None:
        """Begin sampling ``tree`` (root included) in a background thread."""
        self._reset()
        self._tree = tree
        self._stop.clear()
        on_gpu: set[int] = set()
        for i in self.device_indices:
            with contextlib.suppress(Exception):
                self._baseline[i] = self.nvml.memory_used_bytes(i) if self.nvml else 0
            with contextlib.suppress(Exception):
                on_gpu.update(self.nvml.process_memory_bytes(i) if self.nvml else {})
        self._load.start(on_gpu)
        if csv_path is not None:
            self._path = csv_path
            self._file = csv_path.open("w", newline="", encoding="utf-8")
            self._writer = csv.writer(self._file)
            self._writer.writerow(["t_s", "vram_gb", "host_rss_gb"])
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="autotune-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> MemorySummary:
        """Stop sampling, close the timeline and return the peaks."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._file is not None:
            with contextlib.suppress(OSError):  # the last lines of a timeline on a full disk
                self._file.close()
            self._file = None
        source = None
        if self._peak_vram is not None:
            source = "process" if self._used_process_source else "device"
        return MemorySummary(
            peak_vram_gb=None if self._peak_vram is None else self._peak_vram / GIB,
            peak_host_rss_gb=self._peak_rss / GIB,
            samples=self._samples,
            timeline_path=self._path,
            vram_source=source,
            busy=self._load.verdict(),
        )

    @property
    def peak_host_rss_gb(self) -> float:
        """The trial tree's host RSS peak so far (the runner ends a trial past its host RAM line)."""
        return self._peak_rss / GIB

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        tree = self._tree
        if tree is None:
            return
        procs = tree.alive()
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                rss += p.memory_info().rss
        usage: dict[int, int] = {}
        vram = self._vram({p.pid for p in procs}, usage) if self.nvml is not None else None
        self._load.sample(procs, usage)
        if not rss and vram is None:
            # Nothing of the trial could be read: it has exited, is a zombie, or is mid-exec (the
            # kernel shows 0 resident bytes while execve swaps its memory). No sample, rather
            # than a timeline row that says the trial held 0 bytes.
            return
        self._samples += 1
        self._peak_rss = max(self._peak_rss, rss)
        if vram is not None:
            self._peak_vram = vram if self._peak_vram is None else max(self._peak_vram, vram)
        if self._writer is not None:
            t = time.monotonic() - self._t0
            try:
                self._writer.writerow(
                    [f"{t:.3f}", "" if vram is None else f"{vram / GIB:.6f}", f"{rss / GIB:.6f}"]
                )
            except OSError:  # a full or read-only disk: the peaks still count, the timeline stops
                self._writer = None

    def _vram(self, pids: set[int], usage: dict[int, int]) -> int | None:
        """The tree's VRAM now; fills ``usage`` with every process NVML lists on the cards."""
        assert self.nvml is not None
        total = 0
        matched = False
        rise = 0
        try:
            for i in self.device_indices:
                for pid, used in self.nvml.process_memory_bytes(i).items():
                    usage[pid] = usage.get(pid, 0) + used
                    if pid in pids:
                        matched = True
                        total += used
                rise += max(0, self.nvml.memory_used_bytes(i) - self._baseline.get(i, 0))
        except Exception:  # a driver hiccup loses one sample, not the trial
            return None
        if matched:
            self._used_process_source = True
            return total
        return rise if not self._used_process_source else 0
