"""The one seam to the GPU driver: a thin wrapper over NVML (``pynvml``).

Everything that asks the GPU something goes through ``Nvml``; tests replace it
with a fake that implements the same methods. No driver (or no GPU) is a normal
answer: ``open_nvml`` raises ``NvmlUnavailable`` with a reason to show users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from autotune.errors import NvmlUnavailable

GIB = 1024**3


@dataclass(frozen=True)
class DeviceInfo:
    """One physical GPU as NVML numbers it (not as ``CUDA_VISIBLE_DEVICES`` renumbers it)."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int

    @property
    def memory_total_gib(self) -> float:
        return self.memory_total_bytes / GIB


class Nvml(Protocol):
    """What autotune asks the driver. Indices are NVML's physical indices."""

    def driver_version(self) -> str: ...

    def devices(self) -> list[DeviceInfo]: ...

    def memory_used_bytes(self, index: int) -> int: ...

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        """Used GPU memory per process id on that device (compute and graphics)."""
        ...


class PynvmlBackend:
    """``Nvml`` over the real ``pynvml`` (package ``nvidia-ml-py``)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - it is a dependency
            raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from exc
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(_explain(exc)) from exc

    def driver_version(self) -> str:
        try:
            return _text(self._nv.nvmlSystemGetDriverVersion())
        except self._nv.NVMLError as exc:
            raise NvmlUnavailable(_explain(exc)) from exc

    def devices(self) -> list[DeviceInfo]:
        """Every GPU the driver sees; a driver failure here is ``NvmlUnavailable`` too."""
        out = []
        try:
            for i in range(self._nv.nvmlDeviceGetCount()):
                h = self._nv.nvmlDeviceGetHandleByIndex(i)
                out.append(
                    DeviceInfo(
                        index=i,
                        uuid=_text(self._nv.nvmlDeviceGetUUID(h)),
                        name=_text(self._nv.nvmlDeviceGetName(h)),
                        memory_total_bytes=int(self._nv.nvmlDeviceGetMemoryInfo(h).total),
                    )
                )
        except self._nv.NVMLError as exc:
            raise NvmlUnavailable(_explain(exc)) from exc
        return out

    def memory_used_bytes(self, index: int) -> int:
        h = self._nv.nvmlDeviceGetHandleByIndex(index)
        return int(self._nv.nvmlDeviceGetMemoryInfo(h).used)

    def process_memory_bytes(self, index: int) -> dict[int, int]:
        h = self._nv.nvmlDeviceGetHandleByIndex(index)
        usage: dict[int, int] = {}
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = getattr(self._nv, getter)(h)
            except self._nv.NVMLError:
                continue
            for p in procs:
                used = p.usedGpuMemory
                if used is None or used < 0 or used >= 2**63:  # "not available" sentinels
                    used = 0
                usage[int(p.pid)] = max(usage.get(int(p.pid), 0), int(used))
        return usage


def open_nvml() -> Nvml:
    """The real driver; raises ``NvmlUnavailable`` with a user-facing reason."""
    return PynvmlBackend()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _explain(exc: Exception) -> str:
    name = type(exc).__name__
    if "LibraryNotFound" in name:
        return "no NVIDIA driver found (the NVML library is missing)"
    if "DriverNotLoaded" in name:
        return "the NVIDIA driver is installed but not loaded"
    if "NoPermission" in name:
        return "no permission to talk to the NVIDIA driver"
    return f"NVML failed to start: {exc}"
