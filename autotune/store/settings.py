"""Is a stored study the same sweep? Its settings, compared with this run's, in words.

Why a module of its own: a resume with other settings (steps, headroom, card, knobs) would
mix incomparable trials in one study, so it is refused, and the refusal must name every
difference the way a user reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Settings that describe the run, not the sweep: they may differ on resume.
INFORMATIONAL_SETTINGS = frozenset(
    {"config_path", "full_steps", "launch_cwd", "emulation", "machine_ram_gb", "held_back"}
)
#: What a setting a study stored before it existed reads as (the behaviour of those sweeps).
DEFAULT_WHEN_MISSING: dict[str, Any] = {"allow_extra_savers": False}
#: Informational settings a resume that gives them updates (the report reads the latest).
UPDATED_ON_RESUME = ("full_steps",)


def settings_diff(stored: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human lines naming every setting that differs, like ``steps: the study has 30, this run 50``."""
    lines: list[str] = []
    for key in sorted(set(stored) | set(current), key=str):
        if not prefix and key in INFORMATIONAL_SETTINGS:
            continue
        name = f"{prefix}{key}"
        missing = DEFAULT_WHEN_MISSING.get(key, _MISSING) if not prefix else _MISSING
        a, b = stored.get(key, missing), current.get(key, missing)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines.extend(settings_diff(a, b, name + "."))
        elif _named(a) and _named(b):  # the knobs: say which knob differs, and how
            lines.extend(_named_diff(a, b, name))
        elif _norm(a) != _norm(b):
            lines.append(f"{name}: the study has {_show(a)}, this run {_show(b)}")
    return lines


def _named(value: Any) -> bool:
    """A list of mappings each with a unique ``name`` (like the knobs)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, Mapping) and "name" in v for v in value):
        return False
    return len({str(v["name"]) for v in value}) == len(value)


def _named_diff(stored: Any, current: Any, name: str) -> list[str]:
    a = {str(v["name"]): v for v in stored}
    b = {str(v["name"]): v for v in current}
    lines = [f"{name}: {k} is in the study, not in this run" for k in a if k not in b]
    lines += [f"{name}: {k} is in this run, not in the study" for k in b if k not in a]
    for k in (k for k in a if k in b):
        lines.extend(settings_diff(a[k], b[k], f"{name}.{k}."))
    if not lines and [*a] != [*b]:
        lines.append(f"{name}: the study has them in the order {', '.join(a)}, this run {', '.join(b)}")
    return lines


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


_MISSING = _Missing()


def _norm(value: Any) -> Any:
    """Compare JSON round-tripped values: tuples and lists alike, ints and equal floats alike."""
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(not set)"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 120 else text[:117] + "..."
