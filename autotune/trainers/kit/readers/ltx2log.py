"""Reading the LTX-2 trainer's stdout: its ``Step`` lines and its end-of-run statistics block.

The trainer logs through Rich, so a line can carry a level column in front
(``INFO     ``), the source location at the end (``trainer.py:612``), a
``[rank N] `` prefix under accelerate, and, when ``COLUMNS`` was not honoured,
be wrapped at 80 columns with continuation lines indented under the message.
This module undoes all of that and never raises: a truncated or garbage log
gives whatever could be read.

What the ``Step`` lines mean (Lightricks/LTX-2 at 400fd31,
``packages/ltx-trainer/src/ltx_trainer/trainer.py``):
- a line is logged on every *micro-step* whose optimizer-step counter is a multiple of 20
  (l.299), and the counter is bumped at the start of the micro-step that ends an optimizer
  step (l.227-229). With gradient accumulation GA each ``Step n`` line is therefore printed
  GA times: first by the micro-step that runs optimizer step n, then by the GA-1 micro-steps
  of step n+1 that do no optimizer step (the last step of the run prints once);
- before the first optimizer step the counter is 0: those micro-steps print ``Step 0/N ...
  Total Time: calculating...`` (l.303-306), GA-1 times;
- ``Time/Step`` is ONE micro-step's wall time (data loading left out, no CUDA sync)
  multiplied by GA (l.275): an estimate of one optimizer step, not an average;
- ``Total Time`` is the estimated total of the run, not the time elapsed (l.300-304).
So a reader keeps the first copy of each step (the one that times a micro-step with the
optimizer step in it, x GA: one optimizer step), drops Step-0 lines, and never multiplies by
GA again. The statistics block (l.318-330, 923-935): ``Samples/second`` is steps/s x processes
x batch size (it ignores GA) and its time includes set-up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from autotune.core.metrics import TrialMetrics
from autotune.core.timing import WARMUP_STEPS, steady_state

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RANK = re.compile(r"^\[rank ?(\d+)\]:? ?")
_LEVEL = re.compile(r"^(?:\[\d\d:\d\d:\d\d\]\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?=\S)")
_SUFFIX = re.compile(r"\s+[\w.-]+\.py:\d+\s*$")
_CONTINUATION_INDENT = 9  # Rich's level column: "INFO     " (8 wide + 1 space)

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf"
_STEP = re.compile(
    rf"Step\s+(\d+)\s*/\s*(\d+)\s+-\s+Loss:\s+({_NUM}),\s+LR:\s+({_NUM}),\s+"
    rf"Time/Step:\s+(\d+(?:\.\d+)?)s\b(?:,\s+Total\s+Time:\s+(?:(\d+)h\s+(\d+)m|(calculating)))?",
    re.IGNORECASE,
)
#: The trainer logs a Step line when its optimizer-step counter is a multiple of this (trainer.py:299).
STEP_LINE_EVERY = 20
#: Step lines after the warm-up window that a steady figure with a spread needs.
STEADY_LINES = 2
#: The shortest ``optimization.steps`` whose Step lines give a steady figure with a spread:
#: the warm-up window, then STEADY_LINES lines past it (60: lines at 40 and 60).
MIN_STEPS_FOR_STEP_LINES = (WARMUP_STEPS // STEP_LINE_EVERY + STEADY_LINES) * STEP_LINE_EVERY
_STATS_MARK = "Training Statistics"
_STATS = {
    "total_time": re.compile(
        r"Total time:\s+(\d+(?:\.\d+)?)\s*(seconds|second|s|minutes|minute|min|hours|hour|h)\b"
    ),
    "steps_per_s": re.compile(r"Training speed:\s+(\d+(?:\.\d+)?)\s+steps/s"),
    "samples_per_s": re.compile(r"Samples/second:\s+(\d+(?:\.\d+)?)"),
    "peak_gb": re.compile(r"Peak GPU memory:\s+(\d+(?:\.\d+)?)\s*GB"),
    "processes": re.compile(r"Number of processes:\s+(\d+)\b"),
    "global_batch": re.compile(r"Global batch size:\s+(\d+)\b"),
}
_TIME_UNIT_S = {"s": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60, "h": 3600}
_TIME_UNIT_S.update({"hour": 3600, "hours": 3600})


@dataclass(frozen=True)
class StepLine:
    """One ``Step n/N`` line: ``time_s`` is per optimizer step (micro-step times grad-accum)."""

    step: int
    total: int
    loss: float
    lr: float
    time_s: float
    total_time_s: float | None = None


@dataclass
class Statistics:
    """The ``📊 Training Statistics:`` block (every field may be missing: truncated logs)."""

    total_time_s: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    peak_gb: float | None = None
    num_processes: int | None = None
    global_batch: int | None = None


@dataclass
class Ltx2Log:
    steps: list[StepLine] = field(default_factory=list)
    stats: Statistics | None = None
    rank: int | None = None  # the rank whose lines were read (None: no rank prefix)

    def steady_step_time(self) -> tuple[float | None, float | None]:
        """Mean Time/Step of the lines past the warm-up window (the hook's rule: optimizer
        steps 1..WARMUP_STEPS are warm-up), and its spread."""
        ordered = sorted(self.steps, key=lambda s: s.step)
        warmup = sum(1 for s in ordered if s.step <= WARMUP_STEPS)
        return steady_state([s.time_s for s in ordered], skip=warmup)

    def to_metrics(self, effective_batch: int | None = None) -> TrialMetrics:
        """TrialMetrics from the log; ``samples_per_s`` from the steady step time when the batch is known."""
        step_time, spread = self.steady_step_time()
        stats = self.stats or Statistics()
        samples = stats.samples_per_s  # ignores GA: only when the batch we asked for is unknown
        if step_time and effective_batch:
            samples = effective_batch / step_time
        elif stats.steps_per_s and effective_batch:
            samples = stats.steps_per_s * effective_batch  # optimizer steps/s (set-up included)
        return TrialMetrics(
            step_time_s=step_time,
            step_time_spread_s=spread,
            step_times_s=[s.time_s for s in sorted(self.steps, key=lambda s: s.step)],
            samples_per_s=samples,
            steps_per_s=stats.steps_per_s,
            trainer_peak_vram_gb=stats.peak_gb,
            # nvidia-smi memory.used of the device: every process on the card (LTX2-TRAINER.md)
            trainer_peak_device_wide=True if stats.peak_gb is not None else None,
            losses=[s.loss for s in sorted(self.steps, key=lambda s: s.step)],
            source="ltx2-log",
        )


def logical_lines(text: str) -> dict[int | None, list[str]]:
    """Output split per rank into logical lines, Rich's prefixes, suffixes and wrapping undone.

    The rank prefix may come before the level column (accelerate's) or inside the
    message (a logger's format); a continuation line without one belongs to the
    record above it.
    """
    streams: dict[int | None, list[str]] = {}
    last: int | None = None
    for raw in re.split(r"\r\n|\r|\n", text):
        line = _ANSI.sub("", raw).rstrip()
        rank: int | None = None
        m = _RANK.match(line)
        if m:
            rank = int(m.group(1))
            line = line[m.end() :]
        if not line.strip():
            streams.setdefault(rank, []).append("")
            continue
        level = _LEVEL.match(line)
        if level:
            message = line[level.end() :]
            inner = _RANK.match(message)
            if inner:
                rank = int(inner.group(1))
                message = message[inner.end() :]
            streams.setdefault(rank, []).append(_SUFFIX.sub("", message).strip())
            last = rank
            continue
        target = rank if m else last
        lines = streams.setdefault(target, [])
        if line.startswith(" " * _CONTINUATION_INDENT) and lines and lines[-1]:
            # Rich's continuation of a wrapped message: indented under the message column.
            lines[-1] = f"{lines[-1]} {_SUFFIX.sub('', line).strip()}"
        else:
            streams.setdefault(rank, []).append(line.strip())
            last = rank
    return streams


def parse_ltx2_output(text: str) -> Ltx2Log:
    """Step lines and statistics from the trainer's output (stdout, or stdout and stderr)."""
    if not isinstance(text, str):
        return Ltx2Log()
    best = Ltx2Log()
    best_key: tuple[int, int, int] | None = None
    for rank, lines in logical_lines(text).items():
        log = _parse_stream(lines)
        log.rank = rank
        key = (len(log.steps), int(log.stats is not None), -(rank if rank is not None else -1))
        if best_key is None or key > best_key:
            best, best_key = log, key
    return best


def _parse_stream(lines: list[str]) -> Ltx2Log:
    log = Ltx2Log()
    # Wrapped messages are already joined; joining blank-separated runs catches a
    # message Rich wrapped without indentation (plain console prints).
    text = "\n".join(lines)
    seen: dict[int, StepLine] = {}
    for m in _STEP.finditer(_flatten(text)):
        step = _step_from_match(m)
        if step is not None and step.step > 0 and m.group(8) is None:
            seen.setdefault(step.step, step)  # the first copy: the micro-step that ran the optimizer step
    log.steps = sorted(seen.values(), key=lambda s: s.step)
    mark = text.rfind(_STATS_MARK)
    if mark >= 0:
        log.stats = _parse_stats(_flatten(text[mark:]))
    return log


def _flatten(text: str) -> str:
    return re.sub(r"[ \t]*\n[ \t]*", " ", text)


def _step_from_match(m: re.Match[str]) -> StepLine | None:
    try:
        total_time = None
        if m.group(6) is not None:
            total_time = int(m.group(6)) * 3600.0 + int(m.group(7)) * 60.0
        return StepLine(
            step=int(m.group(1)),
            total=int(m.group(2)),
            loss=float(m.group(3)),
            lr=float(m.group(4)),
            time_s=float(m.group(5)),
            total_time_s=total_time,
        )
    except (ValueError, OverflowError):
        return None


def _parse_stats(text: str) -> Statistics:
    stats = Statistics()
    found = {name: rx.search(text) for name, rx in _STATS.items()}
    try:
        if m := found["total_time"]:
            stats.total_time_s = float(m.group(1)) * _TIME_UNIT_S[m.group(2).lower()]
        if m := found["steps_per_s"]:
            stats.steps_per_s = float(m.group(1))
        if m := found["samples_per_s"]:
            stats.samples_per_s = float(m.group(1))
        if m := found["peak_gb"]:
            stats.peak_gb = float(m.group(1))
        if m := found["processes"]:
            stats.num_processes = int(m.group(1))
        if m := found["global_batch"]:
            stats.global_batch = int(m.group(1))
    except (ValueError, KeyError):
        pass
    for name in ("total_time_s", "steps_per_s", "samples_per_s", "peak_gb"):
        value = getattr(stats, name)
        if value is not None and not math.isfinite(value):
            setattr(stats, name, None)
    # 0.00 GB: nvidia-smi found no GPU (a CPU run). Unknown, not 0: a CUDA context alone holds more.
    if stats.peak_gb == 0.0:
        stats.peak_gb = None
    return stats
