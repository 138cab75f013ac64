"""Formatting the report's numbers and knob values: one spelling for every format."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.units import plain


def fmt(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, no exponent (table cells)."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    return plain(x, digits)


def gb(x: Any) -> str:
    """Two decimals, as the trainer prints; tiny (emulated demo) figures keep three digits."""
    if not isinstance(x, (int, float)):
        return "—"
    return f"{x:.2f}" if abs(x) >= 0.1 or x == 0 else f"{x:.3g}"


def val(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def changes(changed: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k} {val(a)} → {val(b)}" for k, (a, b) in changed.items())


def config_text(params: Mapping[str, Any], knobs: Sequence[str]) -> str:
    """A whole config, every knob's value in the study's knob order (``batch_size=4, ...``)."""
    order = [k for k in knobs if k in params] + [k for k in params if k not in knobs]
    return ", ".join(f"{k}={val(params[k])}" for k in order)


def trials_text(n: int) -> str:
    return f"{n} trial" if n == 1 else f"{n} trials"


_MD_ACTIVE = re.compile(r"([\\`*\[\]|])")
#: What Markdown would render as HTML: a ``<`` that opens a tag, comment or declaration, and an
#: ``&`` that starts an entity. Only these are escaped, so ``<= 0.31 GiB`` stays as written.
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)")


def md_text(text: str) -> str:
    """Text that may hold what a trainer printed, as literal Markdown on one line: HTML is shown,
    never rendered (``<script>`` becomes ``&lt;script>``; a ``<=`` that opens nothing stays), and Markdown's link, image, code,
    emphasis (``*``; an intraword ``_`` is literal already) and table syntax is backslash-escaped,
    so a viewer shows the characters as printed."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    text = _MD_HTML.sub(lambda m: html.escape(m.group(0), quote=False), text)
    return _MD_ACTIVE.sub(r"\\\1", text)


def md_code(text: str) -> str:
    """``text`` as a Markdown code span whose fence is longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(text: str) -> str:
    """A fence for a Markdown code block that ``text`` cannot close (longer than its backtick runs)."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    return "`" * (longest + 1)
