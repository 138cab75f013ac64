"""Every GPU of a machine: one single-GPU trial per card at once, each pinned to its card.

Results are only comparable on identical cards (peak memory and speed are the card's),
so a machine with mixed models is refused, with the command that picks one model.
Each worker's lines go to the one terminal with the card in front, whole lines only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from autotune.errors import UsageError

if TYPE_CHECKING:  # the CLI reads DEFAULT_LEASE_S from here while it builds its parser: stay light
    from autotune.gpu.probe import VisibleGpu

#: A worker that sent no heartbeat for this long is taken for dead and its trial run again.
#: Long enough to ride out a database failover or a stalled NFS mount; a dead worker on the
#: same machine is noticed at once (its process is gone), without waiting for the lease.
DEFAULT_LEASE_S = 60.0


def card_model(gpu: VisibleGpu) -> str:
    """A card model as results depend on it: the name and the memory (to 0.1 GiB)."""
    return f"{gpu.name} ({gpu.memory_total_gib:.1f} GiB)"


def cards_for_parallel(gpus: Sequence[VisibleGpu]) -> list[VisibleGpu]:
    """The cards to run one worker each on: all visible ones, which must be of one model.

    Raises ``UsageError`` for no GPU, and for mixed models naming each model's cards and
    the ``CUDA_VISIBLE_DEVICES`` that selects them.
    """
    if not gpus:
        raise UsageError(
            "--parallel runs one trial per GPU at once, and no GPU is visible here (NVML found none, or "
            "CUDA_VISIBLE_DEVICES hides them all); run without --parallel, or on a machine with GPUs"
        )
    by_model: dict[str, list[VisibleGpu]] = {}
    for g in gpus:
        by_model.setdefault(card_model(g), []).append(g)
    if len(by_model) == 1:
        return list(gpus)
    choices = "; ".join(
        f"{model}: CUDA_VISIBLE_DEVICES={','.join(g.uuid for g in cards)}"
        for model, cards in by_model.items()
    )
    raise UsageError(
        f"this machine mixes {len(by_model)} GPU models, and a sweep's results (peak memory, speed) are only "
        f"comparable on identical cards. Run one study per model, each on its own cards: {choices} "
        "(with a different --study for each)"
    )


class LinePrefixer:
    """A text stream for one worker: whole lines, each prefixed, written under a shared lock.

    Not a terminal (``isatty()`` is False), so live redraws are left to a single-worker run.
    """

    def __init__(self, out: TextIO, prefix: str, lock: threading.Lock) -> None:
        self._out, self._prefix, self._lock = out, prefix, lock
        self._partial = ""

    def write(self, text: str) -> int:
        data = (self._partial + text).replace("\r", "\n")
        *lines, self._partial = data.split("\n")
        if lines:
            with self._lock:
                for line in lines:
                    if line.strip():
                        self._out.write(f"{self._prefix}{line}\n")
                self._out.flush()
        return len(text)

    def flush(self) -> None:
        if self._partial.strip():
            with self._lock:
                self._out.write(f"{self._prefix}{self._partial}\n")
                self._out.flush()
        self._partial = ""

    def isatty(self) -> bool:
        return False
