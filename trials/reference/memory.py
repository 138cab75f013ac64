"""Device memory for the reference trainer: real on CUDA, counted exactly and enforced on CPU.

On CPU there is no card, so we emulate one: ``EmulatedCard`` (``trials/hook/autotune_emulated_card.py``,
the one counter the trial-side hook uses too) counts every live tensor storage and raises torch's
own ``OutOfMemoryError`` past the card's size.
"""

from __future__ import annotations

import torch

from trials.hook.autotune_emulated_card import GIB, EmulatedCard, format_size

__all__ = ["GIB", "DeviceMemory", "EmulatedCard", "format_size"]


class DeviceMemory:
    """One face for both devices: ``start()`` once the model is placed, ``peak_gb()`` at the end."""

    def __init__(self, device: torch.device, emulated_vram_gb: float | None) -> None:
        self.device = device
        self.emulated_vram_gb = emulated_vram_gb
        self.card: EmulatedCard | None = None
        self.counting = False
        self.note = ""
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            if emulated_vram_gb is not None:
                fraction = emulated_vram_gb * GIB / total
                if fraction < 1.0:
                    torch.cuda.set_per_process_memory_fraction(fraction, device)
                    self.note = f"emulating a {emulated_vram_gb:g} GiB card on a {total / GIB:.1f} GiB GPU"
                else:
                    self.note = f"reference.emulated_vram_gb {emulated_vram_gb:g} >= the GPU's {total / GIB:.1f} GiB: not limited"
        else:
            capacity = None if emulated_vram_gb is None else int(emulated_vram_gb * GIB)
            self.card = EmulatedCard(capacity)
            self.note = (
                f"emulated card on CPU: {emulated_vram_gb:g} GiB"
                if emulated_vram_gb is not None
                else "CPU: counting tensor memory, no card size set"
            )

    def start(self, model: torch.nn.Module) -> None:
        """Count the model (already on the device) and start counting every allocation."""
        if self.card is not None:
            self.card.__enter__()
            self.counting = True
            self.card.adopt_module(model)
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    def stop(self) -> None:
        """Stop counting on CPU (the peak so far stays); a no-op on CUDA and when already stopped."""
        if self.card is not None and self.counting:
            self.counting = False
            self.card.__exit__(None, None, None)

    def peak_bytes(self) -> int:
        if self.card is not None:
            return self.card.peak
        return int(torch.cuda.max_memory_reserved(self.device))

    def allocated_peak_bytes(self) -> int:
        if self.card is not None:
            return self.card.peak
        return int(torch.cuda.max_memory_allocated(self.device))

    def peak_gb(self) -> float:
        return self.peak_bytes() / GIB
