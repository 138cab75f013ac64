"""The GPUs this process would train on, their memory, and the tier of the smallest.

Everything comes through the ``Nvml`` seam. ``CUDA_VISIBLE_DEVICES`` is applied as
CUDA applies it: entries are indices, full UUIDs or UUID prefixes (``GPU-8932f937``);
the first entry that matches no GPU (or repeats one) ends the list; an empty value
hides every GPU. No library, no driver or no GPU is a normal answer, with advice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import NvmlUnavailable
from autotune.gpu.nvml import GIB, DeviceInfo, Nvml, open_nvml
from autotune.gpu.tiers import TierInfo, classify

ADVICE_NO_GPU = (
    "autotune plan --vram-gb 48 ...   plan for a card you do not have here (32, 48, 80, 141...)",
    "autotune sweep                   the demo: the built-in reference trainer runs on CPU",
)


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU this process can use: ``cuda_index`` as CUDA numbers it, ``nvml_index`` as NVML does."""

    cuda_index: int
    nvml_index: int
    uuid: str
    name: str
    memory_total_bytes: int

    @property
    def memory_total_gib(self) -> float:
        return self.memory_total_bytes / GIB

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.cuda_index,
            "nvml_index": self.nvml_index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_total_gib": round(self.memory_total_gib, 2),
            "nominal_gb": classify(self.memory_total_gib).nominal_gb if self.memory_total_bytes else None,
        }


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found. ``available`` is False when NVML could not be used at all."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    cuda_visible_devices: str | None = None
    gpus: tuple[VisibleGpu, ...] = ()
    total_on_machine: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def smallest(self) -> VisibleGpu | None:
        """The card with the least memory: it decides the tier for all of them."""
        return min(self.gpus, key=lambda g: (g.memory_total_bytes, g.cuda_index)) if self.gpus else None

    @property
    def models(self) -> list[str]:
        return sorted({g.name for g in self.gpus})

    @property
    def mixed(self) -> bool:
        """More than one model, or one model name in different memory sizes."""
        return len({(g.name, g.memory_total_bytes) for g in self.gpus}) > 1

    @property
    def tier(self) -> TierInfo | None:
        s = self.smallest
        return classify(s.memory_total_gib) if s is not None and s.memory_total_bytes > 0 else None

    def to_json(self) -> dict[str, Any]:
        s, tier = self.smallest, self.tier
        return {
            "available": self.available,
            "reason": self.reason,
            "driver_version": self.driver_version,
            "cuda_visible_devices": self.cuda_visible_devices,
            "count": self.count,
            "total_on_machine": self.total_on_machine,
            "gpus": [g.to_json() for g in self.gpus],
            "mixed": self.mixed,
            "smallest": s.to_json() if s else None,
            "tier": tier.tier if tier else None,
            "vram_gb": round(s.memory_total_gib, 2) if s else None,
            "tier_info": tier.to_json() if tier else None,
            "notes": list(self.notes),
            "advice": list(ADVICE_NO_GPU) if not self.gpus else [],
        }

    def render_text(self) -> str:
        """The human answer: GPUs, the tier of the smallest, the gate, and what to do next."""
        lines: list[str] = []
        cvd = (
            f"CUDA_VISIBLE_DEVICES={self.cuda_visible_devices!r}"
            if self.cuda_visible_devices is not None
            else ""
        )
        if not self.available:
            lines.append(f"No NVIDIA GPU available: {self.reason}.")
        elif not self.gpus:
            why = f" ({cvd} hides all {self.total_on_machine})" if cvd and self.total_on_machine else ""
            lines.append(f"NVIDIA driver {self.driver_version} is loaded, but no GPU is visible{why}.")
        else:
            n = self.count
            where = f"; {cvd}, {self.total_on_machine} on the machine" if cvd else ""
            lines.append(
                f"NVIDIA driver {self.driver_version}; {n} GPU{'s' if n != 1 else ''} visible{where}:"
            )
            width = max(len(g.name) for g in self.gpus)
            for g in self.gpus:
                lines.append(
                    f"  cuda:{g.cuda_index}  {g.name:<{width}}  {g.memory_total_gib:6.1f} GiB"
                    f"  (NVML index {g.nvml_index}, {g.uuid})"
                )
            s, tier = self.smallest, self.tier
            if s is not None and tier is not None:
                lines.append(
                    f"Smallest card: {s.name}, {s.memory_total_gib:.1f} GiB -> {tier.label()} -> tier {tier.tier}"
                )
                lines.append(f"  baseline: {tier.baseline_file('ltx2')} ({tier.note})")
                lines.extend(f"  note: {n}" for n in tier.notes)
                if not tier.supported:
                    lines.append(
                        "  gate: plan and sweep refuse this card for LTX-2 unless you pass --force; "
                        "the demo (autotune sweep) still runs"
                    )
            if self.mixed:
                lines.append(
                    f"Mixed cards ({', '.join(self.models)}): the smallest decides the tier, and multi-GPU "
                    "training wants cards of one model; pick them with CUDA_VISIBLE_DEVICES."
                )
        lines.extend(f"Note: {n}" for n in self.notes)
        if not self.gpus:
            lines.append("That is a normal answer. What you can do:")
            lines.extend(f"  {a}" for a in ADVICE_NO_GPU)
        return "\n".join(lines)


def select_visible(
    devices: Sequence[DeviceInfo], cuda_visible_devices: str | None
) -> tuple[list[DeviceInfo], list[str]]:
    """The devices CUDA would expose, in CUDA's order, and notes on ignored entries.

    ``None`` (unset): all, in NVML order. ``""``: none. Otherwise each comma-separated
    entry is an index or a ``GPU-`` UUID (a unique prefix is enough); the first entry
    that is invalid, matches no device, matches several, or repeats one ends the list,
    as it does for CUDA.
    """
    if cuda_visible_devices is None:
        return list(devices), []
    value = cuda_visible_devices.strip()
    if not value:
        return [], ["CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU"]
    chosen: list[DeviceInfo] = []
    notes: list[str] = []
    entries = [e.strip() for e in value.split(",")]
    for pos, entry in enumerate(entries):
        problem, match = _resolve(entry, devices)
        if match is not None and match in chosen:
            problem = f"repeats GPU {match.index}"
        if problem or match is None:
            dropped = entries[pos:]
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} {problem}: CUDA stops at it, so "
                f"{', '.join(repr(d) for d in dropped)} {'is' if len(dropped) == 1 else 'are'} ignored"
            )
            break
        chosen.append(match)
    return chosen, notes


def _resolve(entry: str, devices: Sequence[DeviceInfo]) -> tuple[str, DeviceInfo | None]:
    if entry.isdigit():
        idx = int(entry)
        for d in devices:
            if d.index == idx:
                return "", d
        return f"is index {idx}, but the machine has {len(devices)} GPU(s)", None
    if entry.upper().startswith("MIG-"):
        return "names a MIG instance, which autotune cannot size through NVML", None
    if entry.upper().startswith("GPU-") and len(entry) > 4:
        hits = [d for d in devices if d.uuid.lower().startswith(entry.lower())]
        if len(hits) == 1:
            return "", hits[0]
        return ("matches no GPU's UUID" if not hits else f"is a UUID prefix shared by {len(hits)} GPUs"), None
    return "is neither an index nor a GPU- UUID", None


def probe(
    open_fn: Callable[[], Nvml] | None = None,
    env: Mapping[str, str] | None = None,
) -> ProbeResult:
    """Ask the driver (``open_fn``, default ``open_nvml``) which GPUs this process can use.

    Never raises for a missing library, driver or GPU: that is ``available=False`` or no GPUs.
    """
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    try:
        nvml = (open_fn or open_nvml)()
        driver = nvml.driver_version()
        devices = nvml.devices()
    except NvmlUnavailable as exc:
        return ProbeResult(available=False, reason=str(exc), cuda_visible_devices=cvd)
    visible, notes = select_visible(devices, cvd)
    gpus = tuple(
        VisibleGpu(
            cuda_index=i,
            nvml_index=d.index,
            uuid=d.uuid,
            name=d.name,
            memory_total_bytes=d.memory_total_bytes,
        )
        for i, d in enumerate(visible)
    )
    if (
        len({(g.name, g.memory_total_bytes) for g in gpus}) > 1
        and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    ):
        notes.append(
            "with mixed cards CUDA numbers the fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; "
            "the cuda:N numbers above assume PCI order, so set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return ProbeResult(
        available=True,
        driver_version=driver,
        cuda_visible_devices=cvd,
        gpus=gpus,
        total_on_machine=len(devices),
        notes=tuple(notes),
    )
