"""Reading ``iter N: loss X, time Yms``-style lines (nanoGPT's) and ``step N ... loss X ... time``
variants.

nanoGPT prints, every ``log_interval`` iterations (karpathy/nanoGPT, ``train.py`` line 327):
``print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")``,
where ``dt`` is that one iteration's wall time (all its micro-steps), and at each evaluation
(line 265) ``step {iter_num}: train loss ..., val loss ...``. Other loops print ``step 120/500 |
loss=0.41 | time: 0.23s`` and the like. Each timed line is one optimizer step's time; the
steps within the first warm-up window are left out. A ``val``/``eval``/``test`` loss is not
the training loss. Pure; never raises.
"""

from __future__ import annotations

import math
import re

from autotune.core.metrics import TrialMetrics
from autotune.trainers.kit.readers.guard import never_raises, numbered_metrics
from autotune.trainers.kit.readers.guard import to_float as _float

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf(?:inity)?"
_STEP = re.compile(
    r"(?<![\w/])(?:iter|iteration|step)\s*[:=#]?\s*(\d+)(?:\s*/\s*\d+)?(?![\w.])", re.IGNORECASE
)
_LOSS = re.compile(
    rf"(?<![\w/])((?:val|eval|valid|validation|test)[_ ])?(?:train[_ ])?loss\s*[:=]?\s*({_NUM})(?![\w.])",
    re.IGNORECASE,
)
_TIME = re.compile(
    rf"(?<![\w/])(?:time|dt|step[_ ]time|time/step)\s*[:=]?\s*({_NUM})\s*(ms|s|sec|seconds)?(?![\w])",
    re.IGNORECASE,
)


@never_raises
def read_iter_lines(text: str) -> TrialMetrics | None:
    """Steady step time (warm-up steps left out) and the training losses from the lines."""
    times: dict[int, float] = {}
    losses: dict[int, float] = {}
    for line in re.split(r"\r\n|\r|\n", text):
        step = _STEP.search(line)
        if step is None:
            continue
        rest = line[step.end() :]
        loss = next((m for m in _LOSS.finditer(rest) if not m.group(1)), None)
        if loss is None:
            continue
        n = int(step.group(1))
        value = _float(loss.group(2))
        if value is not None:
            losses[n] = value
        timed = _TIME.search(rest)
        seconds = _float(timed.group(1)) if timed else None
        if timed and seconds is not None and math.isfinite(seconds) and seconds > 0:
            times[n] = seconds / 1000.0 if (timed.group(2) or "").lower() == "ms" else seconds
    if not losses:
        return None
    return numbered_metrics("iter-lines", losses, times)
