"""The sweep's settings record, its one reader, and whether a stored study is the same sweep.

The record is the study's ``settings`` user attr, written once when the study is created
(``settings_record``), with a ``settings_version``. Every reader goes through ``read_settings``,
which upgrades a record of an older version to the current one, so no reader carries
"a study from before ..." cases of its own. Versions:

- 1 (no ``settings_version``): ``trainer_options`` stored as text (``str`` of each value), and
  ``hook`` and ``batch_sizes`` stored only when given (off, a ladder).
- 2: ``trainer_options`` as JSON values (a list stays a list, a flag a boolean; paths as text),
  ``hook`` (true or false) and ``batch_sizes`` (the ladder, or null) always.

Why a module of its own: a resume with other settings (steps, headroom, card, knobs) would
mix incomparable trials in one study, so it is refused, and the refusal must name every
difference the way a user reads them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

#: The study user attr that holds the record.
SETTINGS_ATTR = "settings"
SETTINGS_VERSION = 2

#: Settings that describe the run, not the sweep: they may differ on resume.
INFORMATIONAL_SETTINGS = frozenset(
    {
        "config_path",
        "full_steps",
        "launch_cwd",
        "emulation",
        "machine_ram_gb",
        "held_back",
        "settings_version",
    }
)
#: What a setting a study stored before it existed reads as (the behaviour of those sweeps).
DEFAULT_WHEN_MISSING: dict[str, Any] = {"allow_extra_savers": False}
#: Informational settings a resume that gives them updates (the report reads the latest).
UPDATED_ON_RESUME = ("full_steps",)


def settings_record(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The record a new study stores: ``settings`` at the current version, every value JSON."""
    record = {**settings, "settings_version": SETTINGS_VERSION}
    options = settings.get("trainer_options") or {}
    record["trainer_options"] = {k: _json_value(v) for k, v in sorted(options.items())}
    return record


def read_settings(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stored record (or None: a study without one) at the current version, whatever it was
    written as; the one reader of the record."""
    record = dict(stored or {})
    version = record.get("settings_version", 1)
    if not record:
        return record
    if version == 1:  # trainer options as text; hook and batch_sizes only when given
        options = record.get("trainer_options")
        if isinstance(options, Mapping):
            record["trainer_options"] = {k: _option_value(v) for k, v in options.items()}
        record.setdefault("hook", True)
        record.setdefault("batch_sizes", None)
        record["settings_version"] = 2
    return record


def settings_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings record of a study, from its user attrs, at the current version."""
    stored = attrs.get(SETTINGS_ATTR)
    return read_settings(stored if isinstance(stored, Mapping) else None)


def _json_value(value: Any) -> Any:
    """A trainer option as the record stores it: JSON values as they are, paths (and the rest) as text."""
    if isinstance(value, PurePath):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def _option_value(text: Any) -> Any:
    """A version-1 trainer option (text) back to its value: lists, booleans, None."""
    if isinstance(text, str) and (text[:1] in "[({" or text in ("True", "False", "None")):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def _option_text(options: Any) -> Any:
    """Trainer options compared as the text they launch with, so a version-1 record (text) and a
    version-2 one (values) of the same options are the same sweep."""
    if not isinstance(options, Mapping):
        return options
    return {k: v if isinstance(v, str) else str(v) for k, v in options.items()}


def settings_diff(stored: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human lines naming every setting that differs, like ``steps: the study has 30, this run 50``.
    At the top level both records are read at the current version first."""
    if not prefix:
        stored, current = read_settings(stored), read_settings(current)
        for record in (stored, current):
            if "trainer_options" in record:
                record["trainer_options"] = _option_text(record["trainer_options"])
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
