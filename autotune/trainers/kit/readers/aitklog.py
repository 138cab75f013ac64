"""Reading ai-toolkit's (ostris/ai-toolkit) printed output: its training bar and its OOM banners.

The training loop's bar is a ``tqdm`` subclass drawn with ``smoothing=0.7`` (an exponential
moving average weighted to the latest step), labelled with the job's name and showing the loss as
a postfix string: ``my_lora_v1:  40%|####      | 4/10 [00:12<00:18,  3.02s/it, lr: 1.0e-04 loss:
1.234e-01]`` (toolkit/progress_bar.py:9, jobs/process/BaseSDTrainProcess.py:2484-2490 and
:2693-2698 @ 27a03a9). Each rate shown is that smoothed per-step rate, so the step times are read
as ``read_tqdm`` reads any smoothed bar. Sampling and saving pause the bar (progress_bar.py:14-24),
so their time is not in the rates. The bar is found by the job's name, since a name like
``sample_test`` would look to ``training_bar`` like a sampling bar. Pure; never raises.
"""

from __future__ import annotations

import re

from autotune.core.metrics import TrialMetrics
from autotune.trainers.kit.readers.guard import NUMBER as _NUM
from autotune.trainers.kit.readers.guard import never_raises
from autotune.trainers.kit.readers.tqdmbar import bar_metrics, parse_bars, training_bar

#: The postfix BaseSDTrainProcess.py:2693-2695 builds: ``lr: {lr:.1e}`` then `` {key}: {value:.3e}``
#: per loss (SDTrainer.py:2311 names the one loss ``loss``), after the bar's ``n/total [...``.
_POSTFIX_LOSS = re.compile(
    rf"\|\s*(?P<n>\d+)/\d+\s*\[[^\]\r\n]*?,\s*lr:\s*(?:{_NUM})[^\]\r\n]*?\bloss:\s*(?P<loss>{_NUM})[\s\]]",
    re.IGNORECASE,
)


@never_raises
def read_aitk_output(text: str, job_name: str | None = None) -> TrialMetrics | None:
    """Step times from the job's bar (warm-up left out) and the losses it showed; None: no bar."""
    bars = parse_bars(text)
    label = re.sub(r"\d+", "N", job_name.strip()) if job_name else None
    bar = next((b for b in bars if label is not None and b.desc == label), None) or training_bar(bars)
    if bar is None:
        return None
    metrics = bar_metrics(bar, source="ai-toolkit-bar")
    losses: dict[int, float] = {}
    for m in _POSTFIX_LOSS.finditer(text):
        if int(m.group("n")) > 0:
            losses[int(m.group("n"))] = float(m.group("loss"))
    metrics.losses = [losses[n] for n in sorted(losses)]
    if not (metrics.step_times_s or metrics.losses):
        return None
    return metrics
