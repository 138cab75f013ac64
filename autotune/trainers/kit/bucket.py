"""The one bucket type adapters' largest-bucket data views share: a trial trains on the largest."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Bucket:
    """One training bucket: the width x height it trains at (diffusion-pipe: the configured area)
    and the frame count (1 for images)."""

    width: int
    height: int
    frames: int

    @property
    def volume(self) -> int:
        """What activation memory grows with: pixels times frames."""
        return self.width * self.height * self.frames

    def label(self) -> str:
        return f"{self.width}x{self.height}, {self.frames} frame(s)"
