"""A knob file's mapping read into knobs: every check a knob file's author may trip, each error
naming the file, the knob and how to fix it (``Space.from_mapping`` is its caller)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.candidate import (
    DEFAULT_COUNT_STEPS,
    DEFAULT_FRACTION_GRID,
    DEFAULT_FRACTION_STEP,
    Knob,
    ParamValue,
    batch_sizes,
    normalize_value,
)
from autotune.errors import ConfigError


def parse_knobs(
    data: Any,
    *,
    source: str,
    max_batch_size: int,
    allow_extra_savers: bool,
    batch_ladder: Sequence[int] | None = None,
    limits: Mapping[str, int] | None = None,
) -> tuple[list[Knob], dict[str, Any]]:
    """The knobs and the ``fidelity`` mapping of a parsed knob file, validated."""
    if not isinstance(data, dict) or not isinstance(data.get("knobs"), list):
        raise ConfigError(f"{source}: expected a mapping with a 'knobs:' list")
    if not data["knobs"]:
        raise ConfigError(f"{source}: a knob file needs at least one knob")
    knobs: list[Knob] = []
    for i, raw in enumerate(data["knobs"]):
        where = f"{source}: knobs[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ConfigError(f"{where}: each knob needs a 'name'")
        name = raw["name"]
        if raw.get("type") in ("count", "fraction"):
            knobs.append(_offload_knob(raw, where, (limits or {}).get(name)))
            continue
        unknown = set(raw) - {"name", "values", "extra_savers", "type", "host"}
        if raw.get("type") == "int" and "host" in raw:
            unknown.add("host")
        if unknown:
            raise ConfigError(f"{where} ({name}): unknown keys {sorted(unknown)}")
        if raw.get("type") == "int":
            values: tuple[ParamValue, ...]
            if batch_ladder is not None and name == "batch_size":
                values = batch_sizes(max_batch_size, batch_ladder)
            elif "values" in raw:
                listed = sorted({_int_value(v, where) for v in raw["values"]})
                values = tuple(v for v in listed if v <= max_batch_size)
                if not values:
                    raise ConfigError(f"{where} ({name}): no value is <= --max-batch-size {max_batch_size}")
            else:
                values = batch_sizes(max_batch_size)
            knobs.append(Knob(name, values, is_int=True, kind="int"))
            continue
        if raw.get("type") not in (None, "choice"):
            raise ConfigError(
                f"{where} ({name}): type must be int, count, fraction, choice or left out, "
                f"got {raw['type']!r}"
            )
        if not isinstance(raw.get("values"), list) or not raw["values"]:
            raise ConfigError(f"{where} ({name}): 'values' must be a non-empty list, saving -> hungry")
        vals = [normalize_value(v) for v in raw["values"]]
        extra = raw.get("extra_savers") or []
        if not isinstance(extra, list):
            raise ConfigError(f"{where} ({name}): 'extra_savers' must be a list")
        if allow_extra_savers:
            vals = [normalize_value(v) for v in extra] + vals
        if len(set(map(repr, vals))) != len(vals):
            raise ConfigError(f"{where} ({name}): values repeat: {vals}")
        host = raw.get("host", "none")
        if host not in ("offload", "none"):
            raise ConfigError(f"{where} ({name}): host must be 'offload' or 'none', got {host!r}")
        knobs.append(
            Knob(
                name,
                tuple(vals),
                extra=len(extra) if allow_extra_savers else 0,
                offload=host == "offload",
            )
        )
    fidelity = data.get("fidelity") or {}
    if not isinstance(fidelity, dict):
        raise ConfigError(f"{source}: 'fidelity' must be a mapping of knob -> preferred value")
    return knobs, fidelity


def _offload_knob(raw: Mapping[str, Any], where: str, limit: int | None) -> Knob:
    """A ``type: count`` or ``type: fraction`` knob: every value saving -> hungry, its coarse grid."""
    name, kind = raw["name"], raw["type"]
    allowed = {"name", "type", "grid", "host"} | ({"max"} if kind == "count" else {"step"})
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(
            f"{where} ({name}): unknown keys {sorted(unknown)} for type {kind} (known: {sorted(allowed)})"
        )
    host = raw.get("host", "offload")
    if host not in ("offload", "none"):
        raise ConfigError(f"{where} ({name}): host must be 'offload' or 'none', got {host!r}")
    grid = raw.get("grid")
    if grid is not None and (not isinstance(grid, list) or not grid):
        raise ConfigError(f"{where} ({name}): 'grid' must be a non-empty list of values to try first")
    values: tuple[ParamValue, ...]
    if kind == "count":
        top = raw.get("max")
        if isinstance(top, bool) or not isinstance(top, int) or top < 0:
            raise ConfigError(f"{where} ({name}): a count knob needs 'max', a whole number >= 0, got {top!r}")
        if limit is not None:
            top = int(limit)
        values = tuple(range(top, -1, -1))
        if grid is None:
            step = max(1, math.ceil(top / DEFAULT_COUNT_STEPS))
            coarse = sorted({*range(0, top + 1, step), top}, reverse=True)
        else:
            bad = [v for v in grid if isinstance(v, bool) or not isinstance(v, int) or v < 0]
            if bad:
                raise ConfigError(f"{where} ({name}): grid values must be whole numbers >= 0, got {bad}")
            coarse = sorted({min(int(v), top) for v in grid}, reverse=True)  # a smaller model: its max
    else:
        step_value = raw.get("step", DEFAULT_FRACTION_STEP)
        if (
            isinstance(step_value, bool)
            or not isinstance(step_value, (int, float))
            or not 0 < step_value <= 1
        ):
            raise ConfigError(f"{where} ({name}): 'step' must be a number in (0, 1], got {step_value!r}")
        n = round(1 / step_value)
        if abs(n * step_value - 1) > 1e-9:
            raise ConfigError(f"{where} ({name}): 'step' {step_value} must divide 1 (0.05, 0.1, 0.25 ...)")
        values = tuple(round(i / n, 6) for i in range(n, -1, -1))
        listed = DEFAULT_FRACTION_GRID if grid is None else grid
        bad = [v for v in listed if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1]
        if bad:
            raise ConfigError(f"{where} ({name}): grid values must be fractions in [0, 1], got {bad}")
        off = [v for v in listed if abs(round(v * n) - v * n) > 1e-6]
        if off:
            raise ConfigError(f"{where} ({name}): grid values {off} are not multiples of step {step_value}")
        coarse = sorted({round(round(v * n) / n, 6) for v in listed}, reverse=True)
    return Knob(name, values, kind=kind, coarse=tuple(coarse), offload=host == "offload")


def _int_value(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: batch sizes must be positive integers, got {value!r}")
    return value
