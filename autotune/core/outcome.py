"""How a trial ended, judged by one pure function over what the runner saw.

``explain`` looks at the exit (code or signal), the runner's flags (timed out,
stalled, interrupted), the output text and the metrics read, and names one
``Outcome``. Substring matching on error text is fragile, so every pattern here
is anchored to a real message (see tests/core/test_outcome.py for the table), and
texts that merely mention memory ("illegal memory access", ``max_memory``) do
not count.

Precedence, when several apply (first wins), and why:

1. ``interrupted``: the user stopped the sweep; the end says nothing about the config.
2. ``oom``: a device OOM text, where the trainer failed: a failed exit, a timeout or stall
   (trainers often hang after an OOM; the runner ends them), a traceback, or the text on a
   failure line (an exception's, a trainer's OOM banner). So it beats timeout, stalled and crash;
   a clean run that merely prints the words (a file name) is not an OOM.
3. ``host_oom`` when the runner ended the trial for passing the host RAM line (``--host-ram-gb``),
   or from text (``DefaultCPUAllocator: can't allocate memory``, ``MemoryError``).
4. ``config_error``: a config/usage error text and a failed exit. It is a failure of
   the input, not of the candidate; it must not read as a crash.
5. ``nan``: a NaN/inf loss in the metrics or the output. The config diverged; whatever
   happened after (crash, hang) follows from it.
6. ``timeout``, then ``stalled``: the runner's own limits fired (a SIGKILL the runner
   sent is not a host OOM).
7. ``host_oom`` from a SIGKILL (-9, or 137 through a shell) with no traceback: the
   kernel's OOM killer leaves no message.
8. ``crash``: any other failed exit or signal.
9. ``crash`` too when the trial exited 0 but metrics were given and hold no speed
   (garbage or missing metrics: nothing to rank it by); ``ok`` otherwise.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass
from enum import Enum

from autotune.core.metrics import TrialMetrics
from autotune.core.units import format_gb


class Outcome(str, Enum):
    OK = "ok"
    OOM = "oom"  # device memory
    HOST_OOM = "host_oom"  # host RAM: SIGKILL with no traceback, or the CPU allocator
    TIMEOUT = "timeout"  # wall-clock limit
    STALLED = "stalled"  # no output for the stall limit
    NAN = "nan"  # loss went NaN or inf
    CONFIG_ERROR = "config_error"
    CRASH = "crash"  # anything else
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM to autotune, or orchestrator died

    def __str__(self) -> str:
        return self.value


# Pattern sources are ASCII so the runner can compile them as bytes too and scan raw output.
DEVICE_OOM_SOURCE = (
    r"\b(?:CUDA|HIP|XPU|NPU|MPS backend) out of memory"
    r"|\bOutOfMemoryError\b"  # torch.OutOfMemoryError, torch.cuda.OutOfMemoryError
    r"|CUDA error: out of memory"
    r"|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
    r"|CUDNN_STATUS_NOT_SUPPORTED"  # cuDNN workspace OOM (Lightning and accelerate agree)
    r"|Cuda failure \d* ?'out of memory'"  # NCCL
    r"|RESOURCE_EXHAUSTED: Out of memory"
    # ai-toolkit catches a CUDA OOM, prints this banner and trains on (no traceback), aborting at
    # the 4th in a row: jobs/process/BaseSDTrainProcess.py:2643 and :2636 @ 27a03a9
    r"|^# OOM during training step, skipping batch \d+/3 #"
    r"|OOM during training step 3 times in a row, aborting training"
)
HOST_OOM_SOURCE = (
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
    r"|^(?:\[rank\s*\d+\]:?\s*)?(?:\w+\.)*MemoryError\b"  # Python's own, as a traceback's last line
    r"|std::bad_alloc"
    r"|Unable to allocate [\d.]+ [KMGT]?i?B for an array"  # numpy
)
CONFIG_ERROR_SOURCE = (
    r"Error: Invalid configuration data:"  # LTX-2's trainer
    r"|\b\d+ validation errors? for \w+"  # pydantic
    r"|pydantic(?:_core\._pydantic_core)?\.ValidationError"
    r"|: error: (?:unrecognized arguments|the following arguments are required|argument \S+: )"  # argparse
    r"|No such option: -|Missing argument '|Invalid value for '"  # click / typer
    r"|yaml\.(?:scanner\.ScannerError|parser\.ParserError)"
)
NAN_SOURCE = (
    r"(?i:\bloss\s*(?:[:=]|is|became|went)\s*[-+]?(?:nan|inf(?:inity)?)\b)"
    r"|(?i:\bnan loss\b)|(?i:\bloss is not finite\b)"
)
# What the runner keeps from the output even when it scrolls out of the tail.
NOTABLE_SOURCE = "|".join(
    f"(?:{s})" for s in (DEVICE_OOM_SOURCE, HOST_OOM_SOURCE, CONFIG_ERROR_SOURCE, NAN_SOURCE)
)
ANY_OOM_SOURCE = f"(?:{DEVICE_OOM_SOURCE})|(?:{HOST_OOM_SOURCE})"
# A line that reports a failure: an exception's (``torch.OutOfMemoryError: ...``, ``[rank0]:
# RuntimeError: ...``) or a trainer's own OOM banner. An OOM text anywhere else (a file name, a
# tip, a config comment a clean run echoes) is no failure of the run.
FAILURE_LINE_SOURCE = (
    r"^(?:\[rank\s*\d+\]:?\s*)?"
    r"(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|# OOM during|Error running job:|OOM during training)"
)
# Every notable text contains one of these literals. ``bytes in`` runs at memory speed while
# the regexes above cost ~100 ms per MB, so the runner tests for these first on huge output.
NOTABLE_KEYWORDS: tuple[bytes, ...] = (
    b"memory",
    b"Memory",
    b"MEMORY",
    b"_ALLOC_FAILED",
    b"OOM during training step",
    b"NOT_SUPPORTED",
    b"bad_alloc",
    b"allocate",
    b"configuration",
    b"validation error",
    b"ValidationError",
    b": error: ",
    b"No such option",
    b"Missing argument",
    b"Invalid value for",
    b"yaml.",
    b"loss",
    b"Loss",
    b"LOSS",
)

_DEVICE_OOM = re.compile(DEVICE_OOM_SOURCE, re.M)
_HOST_OOM = re.compile(HOST_OOM_SOURCE, re.M)
_CONFIG_ERROR = re.compile(CONFIG_ERROR_SOURCE, re.M)
_NAN = re.compile(NAN_SOURCE, re.M)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
#: A traceback's header, as Python prints it (not quoted inside another message).
_TRACEBACK_HEADER = re.compile(
    r"^(?:\[rank\s*\d+\]:?[ \t]?)?Traceback \(most recent call last\):?[ \t]*$", re.M
)
_FAILURE_LINE = re.compile(FAILURE_LINE_SOURCE, re.M)
#: A traceback's last line: ``pkg.mod.SomeError: message`` at the start of a line.
_EXCEPTION_LINE = re.compile(
    r"^(?:\[rank\s*\d+\]:?[ \t]?)?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$",
    re.M,
)
#: What a launcher raises when its child failed (accelerate launch, torchrun, deepspeed): the
#: child's own error, printed before it, is the cause (accelerate/commands/launch.py:1049-1051).
_LAUNCHER_ERROR = re.compile(
    r"\bCalledProcessError\b|\bChildFailedError\b|^RuntimeError: Traceback \(most recent call last\)"
)
_RANK_PREFIX = re.compile(r"^\[rank\s*\d+\]:?[ \t]?", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # torch.load's weights_only message sets a bold span


@dataclass(frozen=True)
class OutcomeReason:
    """An outcome and a one-line reason a person can read (stored as the trial's ``reason``)."""

    outcome: Outcome
    reason: str


def explain(
    returncode: int | None,
    signal: int | None,
    *,
    timed_out: bool,
    stalled: bool,
    interrupted: bool,
    output: str,
    metrics: TrialMetrics | None,
    host_over_gb: float | None = None,
) -> OutcomeReason:
    """The trial's outcome (see the module docstring for the precedence) and its one-line reason.

    ``returncode`` may be Popen's (negative for a signal) or a shell's (128 + n);
    ``signal`` is the signal that ended the process, when known; ``host_over_gb`` the host RAM
    line the runner ended the trial for passing (``None``: it did not).
    """
    sig = _ending_signal(returncode, signal)
    failed = sig is not None or (returncode is not None and returncode != 0)
    if interrupted:
        return OutcomeReason(Outcome.INTERRUPTED, "interrupted: autotune was stopped while the trial ran")
    m = _last(_DEVICE_OOM, output)
    if m and not (failed or timed_out or stalled or _TRACEBACK.search(output) or _on_failure_line(output, m)):
        m = None  # a clean run that printed the words: its trainer did not fail
    if m:
        details = parse_oom(output)
        extra = f" ({details.describe()})" if details and details.describe() else ""
        return OutcomeReason(Outcome.OOM, f"device out of memory{extra}: {_line_at(output, m)}")
    if host_over_gb is not None:
        return OutcomeReason(
            Outcome.HOST_OOM,
            f"host RAM: its processes passed the host line of {format_gb(host_over_gb)} (--host-ram-gb) "
            "and autotune ended it before the kernel's OOM killer could",
        )
    if m := _last(_HOST_OOM, output):
        return OutcomeReason(Outcome.HOST_OOM, f"host RAM exhausted: {_line_at(output, m)}")
    if failed and (m := _first(_CONFIG_ERROR, output)):
        return OutcomeReason(Outcome.CONFIG_ERROR, f"config or usage error: {_line_at(output, m)}")
    if metrics is not None and metrics.nan_loss:
        return OutcomeReason(Outcome.NAN, "loss went NaN/inf (in the metrics read)")
    if m := _first(_NAN, output):
        return OutcomeReason(Outcome.NAN, f"loss went NaN/inf: {_line_at(output, m)}")
    if timed_out:
        return OutcomeReason(Outcome.TIMEOUT, "timed out: hit the wall-clock limit and was ended")
    if stalled:
        return OutcomeReason(Outcome.STALLED, "stalled: printed nothing for the stall limit and was ended")
    if sig == _signal.SIGKILL and not _TRACEBACK.search(output):
        return OutcomeReason(
            Outcome.HOST_OOM,
            "killed by SIGKILL with no traceback: most likely the kernel's OOM killer (host RAM)",
        )
    if failed:
        how = f"signal {_signal_name(sig)}" if sig is not None else f"exit code {returncode}"
        last = _crash_line(output)
        return OutcomeReason(Outcome.CRASH, f"crashed with {how}" + (f": {last}" if last else ""))
    if returncode is None:
        return OutcomeReason(Outcome.CRASH, "the trial's exit status is unknown")
    return unranked(metrics) or OutcomeReason(Outcome.OK, "finished")


#: Why a run that ended ok is unranked, and how to give autotune a speed: what the hook times
#: (docs/how-it-works.md, the trial-side hook), the metrics file every launch names
#: (``trainers/base.py``) and the printed formats read (docs/trainers/command.md). Under 300
#: characters: a reason is one line of at most that; what to do first, as a progress line shows 160.
NO_SPEED_REASON = (
    "finished, but no speed was read to rank it by: have the script write AUTOTUNE_METRICS_FILE "
    "(JSON: step_time_s, peak_vram_gb, ...) or print a format docs/trainers/command.md lists; the hook "
    "times torch.optim optimizer steps (or backward() calls where none steps) and was off or saw none"
)


def unranked(metrics: TrialMetrics | None) -> OutcomeReason | None:
    """A run that ended ok with no speed to rank it by (``TrialMetrics.measured``) is a crash (the
    outcome a study stores; its reason says it ran clean): the one rule, asked by ``explain`` and
    by the verdict's attrs; ``None`` when it has a speed (or when no metrics were given:
    ``explain`` on the output alone)."""
    if metrics is not None and not metrics.measured:
        return OutcomeReason(Outcome.CRASH, NO_SPEED_REASON)
    return None


@dataclass(frozen=True)
class OomDetails:
    """Figures from a device OOM message, in GiB; any may be missing."""

    tried_gb: float | None
    free_gb: float | None
    total_gb: float | None

    def describe(self) -> str:
        parts = []
        if self.tried_gb is not None:
            parts.append(f"tried to allocate {format_gb(self.tried_gb, 'GiB')}")
        if self.free_gb is not None:
            parts.append(f"{format_gb(self.free_gb, 'GiB')} free")
        if self.total_gb is not None:
            parts.append(f"of {format_gb(self.total_gb, 'GiB')} total")
        return ", ".join(parts)


_SIZE = r"([\d.]+)\s*([KMGT]i?B|bytes|B)\b"
_TRIED = re.compile(r"Tried\s+to\s+allocate\s+" + _SIZE)  # \s+: lines may be wrapped
_NEW_CAPACITY = re.compile(
    r"has\s+a\s+total\s+capacity\s+of\s+" + _SIZE + r"\s+of\s+which\s+" + _SIZE + r"\s+is\s+free"
)
_OLD_CAPACITY = re.compile(r"\(GPU\s+\d+;\s*" + _SIZE + r"\s+total\s+capacity;")
_OLD_FREE = re.compile(r";\s*" + _SIZE + r"\s+free;")
_UNIT_GIB = {
    "B": 1 / 1024**3,
    "BYTES": 1 / 1024**3,
    "KB": 1 / 1024**2,
    "MB": 1 / 1024,
    "GB": 1.0,
    "TB": 1024.0,
}


def parse_oom(output: str) -> OomDetails | None:
    """Tried / free / total memory from the last torch-style OOM message, or None.

    Handles the current message ("GPU 0 has a total capacity of X of which Y is
    free"), the older one ("(GPU 0; X total capacity; ...; Y free; ...)"), HIP and
    XPU variants, any of B/KiB/MiB/GiB/TiB, and ``[rank0]: `` prefixes.
    """
    text = _RANK_PREFIX.sub("", output)
    tried_matches = list(_TRIED.finditer(text))
    start = tried_matches[-1].start() if tried_matches else 0
    window = text[start : start + 4000] if tried_matches else text
    tried = _gib(tried_matches[-1].group(1), tried_matches[-1].group(2)) if tried_matches else None
    total = free = None
    if caps := list(_NEW_CAPACITY.finditer(window)):
        c = caps[0] if tried_matches else caps[-1]
        total, free = _gib(c.group(1), c.group(2)), _gib(c.group(3), c.group(4))
    elif olds := list(_OLD_CAPACITY.finditer(window)):
        c = olds[0] if tried_matches else olds[-1]
        total = _gib(c.group(1), c.group(2))
        if f := _OLD_FREE.search(window, c.end(), c.end() + 400):
            free = _gib(f.group(1), f.group(2))
    if tried is None and total is None:
        return None
    return OomDetails(tried_gb=tried, free_gb=free, total_gb=total)


def _gib(number: str, unit: str) -> float | None:
    try:
        value = float(number)
    except ValueError:
        return None
    return value * _UNIT_GIB[unit.upper().replace("I", "")]


def _ending_signal(returncode: int | None, signal: int | None) -> int | None:
    if signal is not None:
        return signal
    if returncode is not None and returncode < 0:
        return -returncode
    if returncode == 128 + _signal.SIGKILL:  # a shell reports the child's SIGKILL as 137
        return int(_signal.SIGKILL)
    return None


def _signal_name(sig: int | None) -> str:
    try:
        return _signal.Signals(sig).name if sig is not None else "?"
    except ValueError:
        return str(sig)


def _first(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    return pattern.search(text)


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text):  # noqa: B007 - we want the final match
        pass
    return last


def _on_failure_line(text: str, match: re.Match[str]) -> bool:
    start = text.rfind("\n", 0, match.start()) + 1
    return _FAILURE_LINE.match(text, start) is not None


def _line_at(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return _short(text[start : end if end != -1 else len(text)])


def _crash_line(text: str) -> str:
    """The line that names why a trial crashed: the exception line of the output's last traceback
    (its message may go on for lines: torch.load's weights_only error ends in a prose line,
    torch/serialization.py:1441-1444 @ 2.13), else the output's last line; unless that is a
    launcher's error about its failed child: then the child's own last error before it (``No
    module named 'PIL'``, not ``CalledProcessError: Command [...] returned non-zero exit status 1``)."""
    line, end = _raised_line(text)
    if not _LAUNCHER_ERROR.search(line):
        return line
    causes = [m for m in _EXCEPTION_LINE.finditer(text, 0, end) if not _LAUNCHER_ERROR.search(m.group(0))]
    if not causes:
        return line
    return _short(causes[-1].group(0)) + f" (then the launcher: {_short(line, 60)})"


def _raised_line(text: str) -> tuple[str, int]:
    """The last traceback's exception line (the first line at its left edge after the header and
    the indented frames) and where it starts; the output's last line and its end when no
    traceback shows one."""
    headers = list(_TRACEBACK_HEADER.finditer(text))
    if headers:
        pos = headers[-1].end()
        for raw in text[pos:].splitlines(keepends=True):
            line = _ANSI.sub("", _RANK_PREFIX.sub("", raw, count=1))
            if line.strip() and not line[:1].isspace():
                if _EXCEPTION_LINE.match(line.rstrip("\n")) and _ends_the_output(text[pos + len(raw) :]):
                    return _short(line), pos
                break
            pos += len(raw)
    return _last_line(text), len(text)


#: Lines after a traceback's exception line that can still be its message (torch.load's
#: weights_only message runs 10-15); past that the traceback was logged and the run went on, and the
#: output's last line says more about how it ended.
_MESSAGE_LINES = 40


def _ends_the_output(rest: str) -> bool:
    return sum(1 for line in rest.splitlines() if line.strip()) <= _MESSAGE_LINES


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if short := _short(line):
            return short
    return ""


def bare(line: str) -> str:
    """A line as a reason quotes it: no ``[rank0]:`` prefix, no ANSI colour, no edge whitespace."""
    return _ANSI.sub("", _RANK_PREFIX.sub("", line.strip())).strip()


def _short(line: str, limit: int = 200) -> str:
    line = bare(line)
    return line if len(line) <= limit else line[: limit - 3] + "..."
