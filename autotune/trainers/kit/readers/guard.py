"""The readers' shared promise: output text in, a reading or ``None`` out, never an exception.

Why one decorator: a trial's output is whatever the trainer printed (truncated by a kill,
garbled by a crash, not text at all); a reader that raised would lose the trial's record.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_by_step

P = ParamSpec("P")
R = TypeVar("R")


def never_raises(read: Callable[Concatenate[str, P], R | None]) -> Callable[Concatenate[Any, P], R | None]:
    """``read(text, ...)``, with ``None`` for anything but text and for any error inside it."""

    @functools.wraps(read)
    def guarded(text: Any, /, *args: P.args, **kwargs: P.kwargs) -> R | None:
        if not isinstance(text, str):
            return None
        try:
            return read(text, *args, **kwargs)
        except Exception:
            return None

    return guarded


#: A number as trainers print one, NaN and inf included (a diverged loss must read as one).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"


def to_float(text: str) -> float | None:
    """``float(text)``, or ``None`` for what is not a number."""
    try:
        return float(text)
    except (TypeError, ValueError, OverflowError):
        return None


def numbered_metrics(source: str, losses: dict[int, float], times: dict[int, float]) -> TrialMetrics:
    """A reading from figures keyed by step number (the order they ran in): the losses, and the
    steady step time with the warm-up steps (by number) left out."""
    metrics = TrialMetrics(source=source, losses=[losses[n] for n in sorted(losses)])
    if times:
        steps = sorted(times)
        metrics.step_times_s = [times[n] for n in steps]
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(
            metrics.step_times_s, warmup_by_step(steps)
        )
    return metrics
