"""Steady-state step time from a series of per-step times: warm-up left out, mean, spread.

One rule for every source (LTX-2 ``Step`` lines, the trial-side hook, a trainer's
metrics file), so trials measured by different readers compare fairly. The figure is the MEAN
of the steady steps: throughput is samples over the time the steps took, and a median reads a
series of alternating 3 s / 6 s steps 24 % under it. How much the steps vary is the spread, kept
beside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

#: How many optimizer steps count as warm-up when per-step times are known
#: (LTX-2 prints a Step line every 20 steps; its first window is the warm-up).
WARMUP_STEPS = 20


#: Fewer steady (post-warm-up) steps than this and a step time is rough: the trial says it was too
#: short to time, and its spread is widened to at least half the range of what it has.
MIN_STEADY_STEPS = 8


def too_short_text(steady: int, run: int | None) -> str | None:
    """``too short to time: 6 steady steps of 14 run (8 needed)``; ``None`` when there are enough."""
    if steady >= MIN_STEADY_STEPS:
        return None
    of = f" of {run} run" if run is not None else ""
    return (
        f"too short to time: {steady} steady step{'' if steady == 1 else 's'}{of} ({MIN_STEADY_STEPS} "
        "needed past the warm-up); its speed is rough, the spread says how rough"
    )


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]


def warmup_count(n: int, window: int = WARMUP_STEPS) -> int:
    """Per-step samples to skip: the first window, but never more than half of a short run."""
    return min(window, n // 2)


def steady_state(
    samples: Sequence[float], skip: int, center: Callable[[Sequence[float]], float] = statistics.fmean
) -> tuple[float | None, float | None]:
    """Mean of ``samples[skip:]`` and its spread (half the IQR from 4 samples, else the stdev;
    below ``MIN_STEADY_STEPS`` samples at least half their range, so a short window's spread is
    never smaller than what it saw).

    ``center``: the mean for per-step times; a progress bar's samples are smoothed rate snapshots
    at irregular moments, not steps, and take the median (``tqdmbar``).

    With nothing left after ``skip`` the warm-up samples are used rather than
    nothing: a rough number beats none, and the spread then shows it.
    """
    values = finite(samples)
    steady = values[skip:] or values
    if not steady:
        return None, None
    mean = center(steady)
    if len(steady) >= 4:
        q = statistics.quantiles(steady, n=4, method="inclusive")
        spread: float | None = (q[2] - q[0]) / 2
    elif len(steady) >= 2:
        spread = statistics.stdev(steady)
    else:
        spread = None
    if spread is not None and len(steady) < MIN_STEADY_STEPS:
        spread = max(spread, (max(steady) - min(steady)) / 2)
    return mean, spread


def warmup_by_step(steps: Sequence[int], window: int = WARMUP_STEPS) -> int:
    """Samples to skip when each sample carries its step number (a log printed every k steps):
    those within the first ``window`` steps of the run, but never more than half of them."""
    if not steps:
        return 0
    first = steps[0]
    return min(sum(1 for s in steps if s < first + window), len(steps) // 2)
