"""Leaving the card clean between trials.

A killed trial's memory can outlive it for a while (driver teardown) or for
good (an orphaned DataLoader worker, another user's job). Running the next
trial into that memory gives a false OOM, so the sweep records used memory
before each trial and, after it, waits until NVML shows it back near that
level; if it does not come back, it stops with the processes that hold it named.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import psutil

from autotune.errors import GpuBusyError
from autotune.gpu.nvml import GIB, Nvml

__all__ = ["DEFAULT_TOLERANCE_BYTES", "GpuBusyError", "used_bytes", "wait_for_drain"]

DEFAULT_TOLERANCE_BYTES = (
    512 * 1024**2
)  # driver bookkeeping wobbles by tens of MiB; a CUDA context is ~500 MiB


def used_bytes(nvml: Nvml, device_indices: Iterable[int]) -> dict[int, int]:
    """Used memory per device right now: take it before a trial as the drain baseline."""
    return {i: nvml.memory_used_bytes(i) for i in device_indices}


def wait_for_drain(
    nvml: Nvml,
    device_indices: Sequence[int],
    baseline_used_bytes: Mapping[int, int] | int,
    timeout_s: float,
    *,
    tolerance_bytes: int = DEFAULT_TOLERANCE_BYTES,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until every device is back within ``tolerance_bytes`` of its baseline.

    ``baseline_used_bytes`` is per device (from ``used_bytes``) or one total over
    ``device_indices``. Returns the seconds waited; raises ``GpuBusyError`` naming
    the processes that still hold memory when ``timeout_s`` passes.
    """
    start = clock()
    while True:
        now_used = used_bytes(nvml, device_indices)
        over = _over_baseline(now_used, baseline_used_bytes, tolerance_bytes)
        if not over:
            return clock() - start
        if clock() - start >= timeout_s:
            raise GpuBusyError(_busy_message(nvml, device_indices, now_used, baseline_used_bytes, timeout_s))
        sleep(poll_s)


def _over_baseline(
    now_used: Mapping[int, int], baseline: Mapping[int, int] | int, tolerance: int
) -> dict[int, int]:
    if isinstance(baseline, int):
        extra = sum(now_used.values()) - baseline
        return {-1: extra} if extra > tolerance else {}
    return {
        i: used - baseline.get(i, 0) for i, used in now_used.items() if used - baseline.get(i, 0) > tolerance
    }


def _busy_message(
    nvml: Nvml,
    device_indices: Sequence[int],
    now_used: Mapping[int, int],
    baseline: Mapping[int, int] | int,
    timeout_s: float,
) -> str:
    if isinstance(baseline, int):
        where = (
            f"GPU(s) {', '.join(map(str, device_indices))} still use {sum(now_used.values()) / GIB:.2f} GiB, "
            f"{baseline / GIB:.2f} GiB before the trial"
        )
    else:
        where = "; ".join(
            f"GPU {i} uses {now_used[i] / GIB:.2f} GiB, {baseline.get(i, 0) / GIB:.2f} GiB before the trial"
            for i in device_indices
            if now_used[i] - baseline.get(i, 0) > 0
        )
    holders = describe_holders(nvml, device_indices)
    who = "; ".join(holders) if holders else "NVML names no process (it may be in another container)"
    return (
        f"GPU memory did not drain within {timeout_s:g} s after the trial: {where}. "
        f"Processes holding the card: {who}. Running on would give false OOMs. "
        "End those processes (kill PID) or wait for them, then run the same sweep command again to resume."
    )


def describe_holders(nvml: Nvml, device_indices: Sequence[int]) -> list[str]:
    """'pid 123 python (4.00 GiB on GPU 0): python train.py ...' for each process on the devices."""
    out = []
    for i in device_indices:
        try:
            usage = nvml.process_memory_bytes(i)
        except Exception:  # the driver may refuse; the message must still be written
            continue
        for pid, used in sorted(usage.items(), key=lambda kv: -kv[1]):
            try:
                proc = psutil.Process(pid)
                name = proc.name()
                cmd = " ".join(proc.cmdline())[:120]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                name, cmd = "?", "not visible from here (another container or user?)"
            out.append(f"pid {pid} {name} ({used / GIB:.2f} GiB on GPU {i}): {cmd}")
    return out
