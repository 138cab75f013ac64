"""A fake ``Nvml`` for tests: the one seam where the GPU driver is replaced."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from autotune.errors import NvmlUnavailable
from autotune.gpu.nvml import GIB, DeviceInfo, Nvml


class FakeNvml:
    """GPUs as given; memory in GiB. ``used`` and ``processes`` may be changed by a test."""

    def __init__(self, gpus: Sequence[tuple[str, float]] = (), driver: str = "550.54.15") -> None:
        self._driver = driver
        self._devices = [
            DeviceInfo(index=i, uuid=fake_uuid(i), name=name, memory_total_bytes=int(gib * GIB))
            for i, (name, gib) in enumerate(gpus)
        ]
        self.used: dict[int, int] = {d.index: 0 for d in self._devices}
        self.processes: dict[int, dict[int, int]] = {d.index: {} for d in self._devices}

    def driver_version(self) -> str:
        return self._driver

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def memory_used_bytes(self, index: int) -> int:
        return self.used[index]

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        return dict(self.processes[index])


def fake_uuid(i: int) -> str:
    """Distinct UUIDs whose first 8 hex digits differ, like real ones; ``GPU-1111...`` share ``GPU-1``."""
    return f"GPU-{i}{i}{i}{i}{i:04d}-d72c-4106-c12f-20bd9faed9f{i % 10}"


def opener(nvml: Nvml | None = None, unavailable: str | None = None) -> Callable[[], Nvml]:
    """An ``open_nvml`` stand-in: returns ``nvml``, or raises ``NvmlUnavailable(unavailable)``."""

    def open_fn() -> Nvml:
        if unavailable is not None:
            raise NvmlUnavailable(unavailable)
        assert nvml is not None
        return nvml

    return open_fn


H100 = ("NVIDIA H100 80GB HBM3", 79.6)
A6000 = ("NVIDIA RTX A6000", 47.99)
RTX5090 = ("NVIDIA GeForce RTX 5090", 31.84)
RTX4090 = ("NVIDIA GeForce RTX 4090", 23.99)
