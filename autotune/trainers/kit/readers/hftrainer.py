"""Reading Hugging Face ``Trainer``'s printed log dicts, and its tqdm bar when it shows one.

Per logging step: ``{'loss': 4.797, 'grad_norm': 0.64, 'learning_rate': 5e-05, 'epoch': 0.0039}``
(transformers 5.x prints the values as strings: ``'loss': '4.797'``); at the end:
``{'train_runtime': ..., 'train_samples_per_second': ..., 'train_steps_per_second': ...,
'train_loss': ...}``. Those end figures are whole-run averages that include the first, slow
steps, so the step time comes from the Trainer's bar (it counts optimizer steps) when the
output has one, and from ``train_steps_per_second`` only when it does not. With
``logging_nan_inf_filter`` on (the default) a NaN loss is not printed as such; when it is
printed (``nan``/``inf``, quoted or not) the reading carries it. Pure; never raises.
"""

from __future__ import annotations

import math
import re

from autotune.core.metrics import TrialMetrics
from autotune.trainers.kit.readers.guard import NUMBER as _NUM
from autotune.trainers.kit.readers.guard import never_raises
from autotune.trainers.kit.readers.guard import to_float as _float
from autotune.trainers.kit.readers.tqdmbar import read_tqdm

_DICT = re.compile(r"\{'(?:loss|train_runtime|eval_loss)'[^{}\r\n]*\}")
_PAIR = re.compile(rf"'(\w+)':\s*'?({_NUM})'?(?=\s*[,}}])", re.IGNORECASE)


@never_raises
def read_hf_trainer(text: str) -> TrialMetrics | None:
    """Losses from the log dicts; step time from the bar, else from the final dict's rates."""
    losses: list[float] = []
    final: dict[str, float] = {}
    for m in _DICT.finditer(text):
        pairs = {k: _float(v) for k, v in _PAIR.findall(m.group(0))}
        if "train_runtime" in pairs:
            final = {k: v for k, v in pairs.items() if v is not None}
        elif "loss" in pairs and pairs["loss"] is not None:
            losses.append(pairs["loss"])
    if not losses and not final:
        return None
    if "train_loss" in final and not math.isfinite(final["train_loss"]):
        losses.append(final["train_loss"])
    metrics = TrialMetrics(source="hf-trainer", losses=losses)
    metrics.steps_per_s = _positive(final.get("train_steps_per_second"))
    bar = read_tqdm(text)
    if bar is not None and bar.step_time_s is not None:
        metrics.step_time_s, metrics.step_time_spread_s = bar.step_time_s, bar.step_time_spread_s
        metrics.step_times_s = bar.step_times_s
    else:
        metrics.samples_per_s = _positive(final.get("train_samples_per_second"))
        if metrics.steps_per_s:
            metrics.step_time_s = 1.0 / metrics.steps_per_s
    return metrics


def _positive(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value > 0 else None
