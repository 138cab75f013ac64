"""Reading tqdm progress bars: the training bar's per-update rates, never another bar's.

A bar line looks like ``Steps:  40%|████      | 4/10 [00:02<00:03,  1.95it/s, loss=0.123]``.
The rate tqdm shows on each update is its smoothed rate over the latest updates; the line
it prints when the bar closes shows the whole-run average instead (tqdm's ``close()``
drops the smoothing), and a script may close its bar long after training (diffusers'
Sana script loads the whole pipeline first). So the step time is the steady state of the
rates shown when ``n`` first reached each value, warm-up updates left out; the final
``n == total`` line is dropped when it is the only one, since it may be the close line.
Other bars (``Loading weights``, ``Loading pipeline components...``, evaluation) are
never read. Lightning's bar (``Epoch 0: ...| 50/50 [00:10<00:00, 4.8it/s, v_num=0,
train_loss=...]``) counts batches, not optimizer steps: ``read_lightning`` reads it.
Pure functions over text; they never raise.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import steady_state, warmup_by_step
from autotune.trainers.kit.readers.guard import NUMBER as _NUM
from autotune.trainers.kit.readers.guard import never_raises
from autotune.trainers.kit.readers.guard import to_float as _float

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BAR = re.compile(
    r"(?P<pct>\d{1,3})%\|[^|\r\n]{0,200}\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<left>[\d:?]+),\s*(?P<rate>\d+(?:\.\d+)?|\?)\s*(?P<unit>it/s|s/it)"
    r"(?P<postfix>[^\]\r\n]{0,1000})\]"
)
#: ``loss=`` (diffusers), ``train_loss=``/``loss_step=`` (Lightning), ``avr_loss=`` (musubi-tuner's moving
#: average, src/musubi_tuner/training/trainer_base.py:2116-2118 @ 30c658c); never ``val_loss=``.
_LOSS = re.compile(rf"(?<![\w])(?:train_|avr_)?loss(?:_step)?=\s*({_NUM})(?![\w.])", re.IGNORECASE)
#: Bars that are not the training loop: model loading, downloads, data preparation, evaluation.
_OTHER = re.compile(
    r"\b(?:load|fetch|download|shard|map\b|generat|filter|token|evaluat|validat|predict|test|sampl|infer)",
    re.IGNORECASE,
)
#: Labels that name the training loop, preferred over an unlabelled bar (a pipeline's inference bar).
_TRAINING = re.compile(r"\b(?:step|train|epoch|iter)", re.IGNORECASE)
_DESC_MAX = 200  # a label longer than this is not a bar's
_LIGHTNING = re.compile(r"^Epoch \d+$")


@dataclass
class Bar:
    """One bar's updates: ``(n, seconds per update)`` where ``n`` first appeared, and its losses."""

    desc: str
    total: int = 0
    updates: list[tuple[int, float]] = field(default_factory=list)
    step_losses: dict[int, float] = field(default_factory=dict)  # the last loss shown at each n
    lightning: bool = False
    last_lines: int = 0  # how many lines showed the last update's ``n``
    offset: int = 0  # steps before the current round (Lightning restarts ``n`` every epoch)
    first_at: int = -1  # where in the output the bar was first and last drawn
    last_at: int = -1
    starts: list[int] = field(default_factory=list)  # per update: the steps before its round began


def parse_bars(text: str) -> list[Bar]:
    """Every bar in the output, keyed by its description (digits in it stand for any number)."""
    bars: dict[str, Bar] = {}
    rounds: dict[str, str] = {}  # the description of each bar's current round ("Epoch 3")
    if not isinstance(text, str):
        return []
    text = _ANSI.sub("", text)
    for m in _BAR.finditer(text):
        desc = _description(text, m.start())
        label = re.sub(r"\d+", "N", desc)
        n, total = int(m.group("n")), int(m.group("total"))
        key = f"{label}#{total}"  # an evaluation bar with the same label counts something else
        postfix = m.group("postfix")
        lightning = bool(_LIGHTNING.match(desc)) and "v_num=" in postfix
        bar = bars.setdefault(key, Bar(desc=label, lightning=lightning))
        bar.lightning = bar.lightning or lightning
        bar.first_at = m.start() if bar.first_at < 0 else bar.first_at
        bar.last_at = m.start()
        if rounds.setdefault(key, desc) != desc:  # a new round: its n starts again
            rounds[key] = desc
            bar.offset = bar.updates[-1][0] if bar.updates else bar.offset
        step = bar.offset + n
        loss = _LOSS.search(postfix)
        value = _float(loss.group(1)) if loss else None
        if value is not None and n > 0:
            bar.step_losses[step] = value
        seconds = _seconds(m.group("rate"), m.group("unit"))
        if bar.updates and bar.updates[-1][0] == step:
            bar.last_lines += 1
        elif seconds is not None and n > 0:
            bar.updates.append((step, seconds))
            bar.starts.append(bar.offset)
            bar.last_lines = 1
            bar.total = bar.offset + total
    return list(bars.values())


def training_bar(bars: list[Bar], lightning: bool = False) -> Bar | None:
    """The training loop's bar: not a loading/evaluation one; one labelled as training first,
    then the one drawn over the longest stretch of output (evaluation and loading bars come
    and go inside or before it)."""
    candidates = [b for b in bars if b.lightning == lightning and not _OTHER.search(b.desc)]
    if not candidates:
        return None
    return max(
        candidates, key=lambda b: (bool(_TRAINING.search(b.desc)), b.last_at - b.first_at, len(b.updates))
    )


def bar_metrics(bar: Bar, updates_per_step: int = 1, source: str = "tqdm") -> TrialMetrics:
    """Steady step time and spread from the bar's per-update rates (warm-up updates left out)."""
    updates = list(bar.updates)
    if len(updates) > 1 and updates[-1][0] == bar.total and bar.last_lines == 1:
        updates = updates[:-1]  # may be the close line: the whole-run average
    scale = max(1, updates_per_step)
    times = [t * scale for _, t in updates]
    metrics = TrialMetrics(source=source, losses=[bar.step_losses[n] for n in sorted(bar.step_losses)])
    if times:
        metrics.step_times_s = times
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(
            times, warmup_by_step([n for n, _ in updates]), center=statistics.median
        )
    return metrics


def lightning_metrics(bar: Bar, batches_per_step: int = 1) -> TrialMetrics:
    """Lightning sets ``n`` without ``update()``, so each rate shown is ``n / elapsed`` since the
    epoch began: see ``cumulative_metrics``."""
    return cumulative_metrics(bar, batches_per_step, source="lightning")


def cumulative_metrics(bar: Bar, batches_per_step: int = 1, source: str = "tqdm-cumulative") -> TrialMetrics:
    """Per-update times from a bar whose rate is the mean since its round began (Lightning's, or
    ``tqdm(..., smoothing=0)`` as musubi-tuner draws it): elapsed is recovered as ``n * s/it`` (the
    shown rate has more digits than the ``[mm:ss`` clock) and a step's time is the difference
    between successive updates of one round, divided by the steps between them."""
    samples: list[tuple[int, float]] = []
    previous: tuple[int, int, float] | None = None  # (round, step, elapsed)
    for (step, seconds), start in zip(bar.updates, bar.starts, strict=False):
        elapsed = (step - start) * seconds
        if previous is not None and previous[0] == start and step > previous[1]:
            per_batch = (elapsed - previous[2]) / (step - previous[1])
            if per_batch > 0:
                samples.append((step, per_batch * max(1, batches_per_step)))
        elif previous is None or previous[0] != start:
            samples.append((step, seconds * max(1, batches_per_step)))  # the epoch's first update
        previous = (start, step, elapsed)
    metrics = TrialMetrics(source=source, losses=[bar.step_losses[n] for n in sorted(bar.step_losses)])
    if samples:
        # differenced elapsed times are the steps' own times, not smoothed rates: their mean, as
        # every per-step reader (a median misreads alternating 3 s / 6 s steps)
        metrics.step_times_s = [t for _, t in samples]
        metrics.step_time_s, metrics.step_time_spread_s = steady_state(
            metrics.step_times_s, warmup_by_step([n for n, _ in samples])
        )
    return metrics


@never_raises
def read_tqdm(text: str) -> TrialMetrics | None:
    """The training bar's steady step time (its ``n`` counts optimizer steps) and its losses."""
    bar = training_bar(parse_bars(text))
    if bar is None or not (bar.updates or bar.step_losses):
        return None
    return bar_metrics(bar)


@never_raises
def read_tqdm_cumulative(text: str, updates_per_step: int = 1) -> TrialMetrics | None:
    """The training bar drawn with ``smoothing=0`` (each rate the mean since the start, warm-up
    included): per-step times from successive ``(n, n * s/it)`` pairs, so the warm-up can be left out."""
    bar = training_bar(parse_bars(text))
    if bar is None or not (bar.updates or bar.step_losses):
        return None
    return cumulative_metrics(bar, updates_per_step)


@never_raises
def read_lightning(text: str, batches_per_step: int = 1) -> TrialMetrics | None:
    """Lightning's ``Epoch N`` bar: per-batch rates times the batches per optimizer step."""
    bar = training_bar(parse_bars(text), lightning=True)
    if bar is None or not (bar.updates or bar.step_losses):
        return None
    return lightning_metrics(bar, batches_per_step)


def _description(text: str, end: int) -> str:
    """The bar's label: what precedes ``NN%|`` on its line (after any text it was glued to)."""
    before = re.split(r"[\r\n|\]]", text[max(0, end - _DESC_MAX) : end])[-1]
    return before.strip().rstrip(":").strip()


def _seconds(rate: str, unit: str) -> float | None:
    value = _float(rate)
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return 1.0 / value if unit == "it/s" else value
