"""Parsing of the CLI's units: durations (``90s``, ``20m``, ``8h``, ``1h30m``, bare seconds)."""

from __future__ import annotations

import math
import re

from autotune.errors import UsageError

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raises ``UsageError`` naming the accepted forms."""
    s = text.strip().lower()
    try:
        value = float(s)
    except ValueError:
        value = -1.0
        pos = 0
        total = 0.0
        for m in _PART.finditer(s):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNIT_S[m.group(2)]
            pos = m.end()
        if s and pos == len(s):
            value = total
        else:
            raise UsageError(
                f"invalid duration {text!r}: write it like 90s, 20m, 8h or 1h30m (a bare number is seconds)"
            ) from None
    if value <= 0:
        raise UsageError(f"invalid duration {text!r}: it must be more than zero")
    return value


def format_duration(seconds: float) -> str:
    """``3725`` -> ``1h02m05s``; short durations keep a decimal."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def plain(x: float, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits and never an exponent: ``3770``, ``37.7``,
    ``0.0377`` (``3.77e+03`` reads badly in a progress line); at most 4 decimals."""
    if not math.isfinite(x) or x == 0:
        return "0" if x == 0 else str(x)
    decimals = max(0, min(4, digits - 1 - math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def step_time(step_s: float, spread_s: float | None = None) -> str:
    """A step time and its spread in one unit: ``0.520 s ± 0.010``; under 10 ms (a small script's
    step) in milliseconds, ``4.20 ms ± 0.029`` (in seconds that spread read ``± 2.9e-05``, or
    ``0.0000`` at 4 decimals)."""
    scale, unit = (1000.0, "ms") if step_s < 0.01 else (1.0, "s")
    head = f"{plain(step_s * scale)} {unit}"
    if spread_s is None:
        return head
    spread = plain(spread_s * scale, 2)
    if spread_s > 0 and float(spread) == 0:
        spread = "< 0.0001"
    return f"{head} ± {spread}"


def format_gb(gb: float, unit: str = "GB") -> str:
    """Memory for people: ``45.68 GB``; below 1 GB in MiB (``28.2 MiB``), so an emulated demo card
    and a small allocation do not read as ``0.00 GB``."""
    if abs(gb) >= 1 or gb == 0:
        return f"{gb:.2f} {unit}"
    return f"{gb * 1024:.1f} MiB"
