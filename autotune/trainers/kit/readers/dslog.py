"""Reading DeepSpeed's pipeline-engine step lines (what diffusion-pipe prints while it trains).

diffusion-pipe trains through DeepSpeed's ``PipelineEngine.train_batch``, which prints on rank 0
every ``steps_per_print`` optimizer steps (microsoft/DeepSpeed ``deepspeed/runtime/pipe/engine.py``
lines 396-406 @ 38327e0)::

    steps: {global_steps} loss: {agg_train_loss:0.4f} [{name}: {value:0.4f} ...]iter time (s): {iter_time:0.3f} samples/sec: {tput:0.3f}

``iter time`` is the wall time since the last printed line over ``steps_per_print`` (one optimizer
step's time, every micro-batch of the accumulation in it); ``samples/sec`` is
``train_batch_size()`` (micro batch x accumulation x data-parallel ranks) over it: the honest
samples per second. diffusion-pipe passes ``steps_per_print`` from its config (train.py:428 @
8f83dbf); the trials set it to 1 so every step is timed. Pure; never raises.
"""

from __future__ import annotations

import math
import re

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_by_step
from autotune.trainers.kit.readers.guard import NUMBER as _NUM
from autotune.trainers.kit.readers.guard import never_raises
from autotune.trainers.kit.readers.guard import to_float as _float

_LINE = re.compile(
    rf"(?:^|\s|\])steps: (\d+) loss: ({_NUM}) (?:\S+: (?:{_NUM}) )*"
    rf"iter time \(s\): ({_NUM}) samples/sec: ({_NUM})",
    re.IGNORECASE,
)


@never_raises
def read_deepspeed_steps(text: str) -> TrialMetrics | None:
    """Steady optimizer-step time and samples/s (warm-up steps left out) and the losses."""
    times: dict[int, float] = {}
    rates: dict[int, float] = {}
    losses: dict[int, float] = {}
    for line in re.split(r"\r\n|\r|\n", text):
        match = _LINE.search(line)
        if match is None:
            continue
        step = int(match.group(1))
        loss, seconds, rate = (_float(match.group(i)) for i in (2, 3, 4))
        if loss is not None:
            losses[step] = loss
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            times[step] = seconds
            if rate is not None and math.isfinite(rate) and rate > 0:
                rates[step] = rate
    if not losses:
        return None
    metrics = TrialMetrics(source="deepspeed-steps", losses=[losses[n] for n in sorted(losses)])
    if times:
        steps = sorted(times)
        skip = warmup_by_step(steps)
        metrics.step_times_s = [times[n] for n in steps]
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(metrics.step_times_s, skip)
        rated = [n for n in steps if n in rates]
        steady = rated[warmup_by_step(rated) :] or rated
        if steady:  # samples over the steps' time (a mean of the rates reads 3 s / 6 s steps 12 % fast)
            metrics.samples_per_s = sum(rates[n] * times[n] for n in steady) / sum(times[n] for n in steady)
    return metrics
