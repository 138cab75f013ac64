"""Reading knob files (``configs/knobs/<trainer>.yaml``): the one place that opens them.

Why here and not in ``autotune.core.space``: the core does no I/O. This module reads
the file (safe YAML loader, errors naming the file) and hands the mapping to
``Space.from_mapping``, which alone interprets it; the sweep, the report and
``autotune status`` all come through here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.core.space import ParamValue, Space
from autotune.core.yamltext import load_yaml
from autotune.errors import AutotuneError, ConfigError

#: Preferred values for near-ties when the trainer's knob file names none (or cannot be read).
DEFAULT_FIDELITY: dict[str, Any] = {"quantization": "none", "optimizer": "adamw"}
#: Big enough for every ``type: int`` knob when only the fidelity of a file is wanted.
_ANY_BATCH = 1 << 20


def knob_path(name: str) -> Path:
    """The shipped knob file ``name`` (an adapter's ``knob_file``, like ``ltx2.yaml``); an absolute
    path is taken as it is (a trainer that ships outside autotune keeps its knob file beside it)."""
    from configs import config_file

    path = Path(name) if Path(name).is_absolute() else Path(str(config_file("knobs", name)))
    if not path.is_file():
        raise ConfigError(f"the knob file {path} is missing; reinstall autotune")
    return path


def read_knob_file(path: Path | str) -> Any:
    """The parsed knob file (safe loader); an unreadable file is a ``ConfigError`` naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read knob file {path}: {exc.strerror or exc}") from None
    return load_yaml(text, str(path))


#: The knob kinds whose values are numbers, and what each must be: (smallest, largest, whole).
_NUMERIC_KINDS: dict[str, tuple[float, float, bool]] = {
    "int": (1, math.inf, True),
    "count": (0, math.inf, True),
    "fraction": (0.0, 1.0, False),
}


def check_baseline_values(params: Mapping[str, Any], knob_data: Any, where: Callable[[str], str]) -> None:
    """Refuse a baseline whose numeric knob values the trainer could not run with either
    (``batch_size: -3``, ``big``, ``.nan``, ``true``, a fraction of 1.5): a ``ConfigError``
    naming the file and key (``where(param)``), the value and the fix, before any study exists.
    ``knob_data``: the parsed knob file (its ``type:`` says which knobs are numbers);
    ``gradient_accumulation_steps`` is a whole number of at least 1 for every trainer."""
    kinds = {"gradient_accumulation_steps": "int"}
    knobs = knob_data.get("knobs") if isinstance(knob_data, Mapping) else None
    for knob in knobs if isinstance(knobs, list) else []:
        if isinstance(knob, Mapping) and isinstance(knob.get("name"), str):
            kinds[knob["name"]] = str(knob.get("type", "choice"))
    for name, value in params.items():
        kind = kinds.get(name)
        if kind not in _NUMERIC_KINDS:
            continue
        low, high, whole = _NUMERIC_KINDS[kind]
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        ok = number and math.isfinite(value) and low <= value <= high
        if ok and whole and not isinstance(value, int):
            ok = kind == "count" and float(value).is_integer()  # a count may be written 2.0
        if ok:
            continue
        if whole:
            need = f"a whole number of at least {int(low)}, like {'1, 2 or 4' if low else '0, 8 or 16'}"
        else:
            need = "a number from 0 to 1, like 0.5"
        shown = "nothing" if value is None else repr(value)
        raise ConfigError(
            f"{where(name)} is {shown}: it must be {need} ({name}); write such a value there (or "
            "leave it out for the trainer's default) and run again"
        )


def trainer_fidelity(trainer: str, knobs: Sequence[str] | None = None) -> dict[str, ParamValue]:
    """The preferred values of ``trainer``'s shipped knob file, only for ``knobs`` when given
    (the knobs the sweep had: a knob the trainer never received breaks no tie).

    The report and ``autotune status`` judge near-ties with it; a trainer without a
    (valid) knob file, or one that names no ``fidelity``, gets ``DEFAULT_FIDELITY``.
    """
    fidelity: dict[str, ParamValue] = dict(DEFAULT_FIDELITY)
    try:
        path = knob_path(f"{trainer}.yaml")
        data = read_knob_file(path)
        if isinstance(data, Mapping) and isinstance(data.get("fidelity"), Mapping):
            space = Space.from_mapping(
                data, source=str(path), max_batch_size=_ANY_BATCH, allow_extra_savers=True
            )
            fidelity = dict(space.fidelity)
    except AutotuneError:
        pass
    return {k: v for k, v in fidelity.items() if knobs is None or k in knobs}
