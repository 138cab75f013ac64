"""Knobs a user declares on the command line (``--knob NAME=...``), parsed and validated.

Why: a ``--cmd`` trainer has knobs autotune cannot know (blocks swapped to the CPU, a
resolution, a flag of its own). Two spellings, values always from memory-SAVING to
memory-HUNGRY, which is the order the space's dominance reasoning relies on:

- ``NAME=v1,v2,...``: the values in that order; ``yes``/``no``/``true``/``false`` are booleans,
  whole numbers are ints, anything else a string.
- ``NAME=int:A..B``: every integer from A to B in the order written: ``int:1..4`` when a larger
  number needs more memory, ``int:8..0`` when it needs less.
- ``NAME=count:MAX``: a count of parts offloaded to host RAM (blocks swapped), MAX..0; its coarse
  grid is tried first and refined near the best, and more of it costs host RAM
  (``autotune.core.space``'s ``type: count``).
- ``NAME=fraction`` or ``NAME=fraction:STEP``: a share offloaded, 1.0..0.0 in steps of STEP
  (default 0.05), likewise (``type: fraction``).
- ``NAME=flag``, ``NAME=flag:TEXT`` or ``NAME=flag:TEXT:costs``: a switch the script takes with no
  value (argparse's ``store_true``). ``{NAME}`` in the template is TEXT (default ``--NAME``) when the
  param is true and nothing (the argv element is dropped) when false. Order rule: by the flag's
  meaning. A flag that saves memory when present (``--gradient-checkpointing``, ``--use-8bit-adam``,
  ``--offload``) is the default: present first. ``:costs`` is for a flag that costs memory when
  present (``--ema``, ``--no-offload``): absent first.

Every kind is capped at ``MAX_VALUES`` values (a count of 10^9 or a fraction step of 1e-7 would make
a space too large to hold), refused with the flag, the count and the fix.

Pure: the caller (the sweep's setup) passes the names it reserves (the template's own
placeholders and the trainer's built-in knobs) and turns the result into knobs of the space.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from autotune.core.space import Knob, ParamValue, Space
from autotune.errors import ConfigError, UsageError

FLAG = "--knob"
#: More values than this is a typo (``int:0..100000``), not a knob to sweep value by value.
MAX_VALUES = 256

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_RANGE = re.compile(r"int:\s*([+-]?[0-9]+)\s*\.\.\s*([+-]?[0-9]+)\s*\Z")
_COUNT = re.compile(r"count:\s*([0-9]+)\s*\Z")
_FRACTION = re.compile(r"fraction(?::\s*([0-9]*\.?[0-9]+))?\s*\Z")
_FLAG = re.compile(r"flag(?::\s*([^:\s][^:]*?))?(?::\s*(saves|costs))?\s*\Z")
_BOOLS = {"yes": True, "true": True, "no": False, "false": False}
_SYNTAX = (
    f"write {FLAG} NAME=v1,v2,... (values from memory-saving to memory-hungry), {FLAG} NAME=int:LO..HI, "
    f"{FLAG} NAME=count:MAX (blocks swapped), {FLAG} NAME=fraction[:STEP] (a share offloaded) or "
    f"{FLAG} NAME=flag[:--the-flag][:costs] (a switch with no value)"
)


@dataclass(frozen=True)
class DeclaredKnob:
    """One ``--knob``: its name, its values saving -> hungry, and the flag as written."""

    name: str
    values: tuple[ParamValue, ...]
    spec: str
    #: A count or fraction knob as a knob file would list it; ``None``: a choice knob.
    entry: dict[str, object] | None = None
    #: A flag knob's text (``--gradient-checkpointing``): ``{NAME}`` is it when true, nothing when false.
    flag: str | None = None

    def as_knob_entry(self) -> dict[str, object]:
        """The knob as a knob file would list it (a choice knob: its order is the list's)."""
        return (
            dict(self.entry) if self.entry is not None else {"name": self.name, "values": list(self.values)}
        )

    def knob(self) -> Knob:
        """The knob of the space it becomes."""
        if self.entry is None:
            return Knob(self.name, self.values)
        return _offload(self.entry, f"{FLAG} {self.spec!r}")


def parse_value(text: str) -> ParamValue:
    """One listed value: yes/no/true/false -> bool, a whole number -> int, else the string."""
    lowered = text.lower()
    if lowered in _BOOLS:
        return _BOOLS[lowered]
    if _INT.match(text):
        return int(text)
    return text


def parse_knob(spec: str, *, reserved: Collection[str] = ()) -> DeclaredKnob:
    """One ``--knob`` flag; a ``UsageError`` names the flag, what is wrong and how to fix it."""
    if not isinstance(spec, str) or "=" not in spec:
        raise UsageError(f"{FLAG} {spec!r}: no '=' in it; {_SYNTAX}")
    name, _, rest = spec.partition("=")
    name, rest = name.strip(), rest.strip()
    where = f"{FLAG} {spec!r}"
    if not _NAME.match(name):
        raise UsageError(
            f"{where}: {name!r} is not a knob name (letters, digits and _, not starting with a digit; "
            "dots for a nested config key like model.blocks_to_swap); " + _SYNTAX
        )
    if name in reserved:
        raise UsageError(
            f"{where}: {name!r} is already a placeholder or knob of the command template "
            f"({', '.join(sorted(reserved))}); give your knob another name"
        )
    if not rest:
        raise UsageError(f"{where}: no values after '='; {_SYNTAX}")
    if rest.startswith(("count:", "fraction:")) or rest == "fraction":
        entry = _offload_entry(name, rest, where)
        return DeclaredKnob(name=name, values=_offload(entry, where).values, spec=spec, entry=entry)
    if rest == "flag" or rest.startswith("flag:"):
        return _flag_knob(name, rest, spec, where)
    if rest.startswith("int:"):
        values = _int_range(rest, where)
    else:
        items = [item.strip() for item in rest.split(",")]
        _cap(len(items), where)
        if any(not item for item in items):
            raise UsageError(f"{where}: an empty value in the list (two commas, or one at an end); {_SYNTAX}")
        values = tuple(parse_value(item) for item in items)
    if len(values) < 2:
        raise UsageError(
            f"{where}: one value leaves nothing to sweep; list at least two, from memory-saving to "
            "memory-hungry, or write that value into the command template itself"
        )
    seen: dict[tuple[str, ParamValue], str] = {}
    for value in values:
        key = (type(value).__name__, value)
        if key in seen:
            raise UsageError(
                f"{where}: the value {_text(value)} is listed twice (yes/true and no/false are the same "
                "boolean); list each value once"
            )
        seen[key] = _text(value)
    return DeclaredKnob(name=name, values=values, spec=spec)


def _cap(count: int, where: str, fix: str = "narrow the range") -> None:
    """The one bound every kind of knob is held to (its values are listed and searched one by one)."""
    if count > MAX_VALUES:
        raise UsageError(f"{where}: {count} values, more than {MAX_VALUES}; {fix}")


def _flag_knob(name: str, rest: str, spec: str, where: str) -> DeclaredKnob:
    match = _FLAG.match(rest)
    if match is None:
        raise UsageError(
            f"{where}: {rest!r} is not a flag knob; write flag (the switch --{name}), flag:--the-flag, or "
            "flag:--the-flag:costs when the flag costs memory when present (default: it saves memory)"
        )
    text = (match.group(1) or f"--{name}").strip()
    if any(c.isspace() for c in text) or "{" in text or "}" in text:
        raise UsageError(f"{where}: the flag {text!r} must be one argument (no spaces or braces)")
    values: tuple[ParamValue, ...] = (False, True) if match.group(2) == "costs" else (True, False)
    return DeclaredKnob(name=name, values=values, spec=spec, flag=text)


def parse_knobs(specs: Sequence[str], *, reserved: Collection[str] = ()) -> list[DeclaredKnob]:
    """Every ``--knob`` of a sweep, in the order given; a name given twice is a ``UsageError``."""
    out: list[DeclaredKnob] = []
    for spec in specs:
        knob = parse_knob(spec, reserved=reserved)
        if any(k.name == knob.name for k in out):
            raise UsageError(f"{FLAG} {knob.name} is given twice; give each knob once with all its values")
        out.append(knob)
    return out


def _int_range(rest: str, where: str) -> tuple[ParamValue, ...]:
    match = _RANGE.match(rest)
    if match is None:
        raise UsageError(
            f"{where}: {rest!r} is not a range; write int:LO..HI (like int:1..4) when a larger number "
            "needs more memory, int:HI..LO (like int:8..0) when it needs less"
        )
    first, last = int(match.group(1)), int(match.group(2))
    _cap(abs(last - first) + 1, where)
    step = 1 if last >= first else -1
    return tuple(range(first, last + step, step))


def _offload_entry(name: str, rest: str, where: str) -> dict[str, object]:
    if m := _COUNT.match(rest):
        if int(m.group(1)) < 1:
            raise UsageError(
                f"{where}: count:0 leaves nothing to sweep; write the largest count, like count:39"
            )
        top = int(m.group(1))
        _cap(
            top + 1, where, f"a count knob takes every integer {top}..0; write a real maximum, like count:39"
        )
        return {"name": name, "type": "count", "max": top}
    if m := _FRACTION.match(rest):
        if m.group(1):
            step = float(m.group(1))
            if step > 0:
                _cap(round(1 / step) + 1, where, "write a coarser step, like fraction:0.05")
        return {"name": name, "type": "fraction", **({"step": float(m.group(1))} if m.group(1) else {})}
    raise UsageError(
        f"{where}: {rest!r} is neither count:MAX (blocks swapped, like count:39) nor fraction[:STEP] "
        "(a share offloaded, like fraction or fraction:0.1)"
    )


def _offload(entry: dict[str, object], where: str) -> Knob:
    try:
        return Space.from_mapping(
            {"knobs": [entry]}, source=where, max_batch_size=1, allow_extra_savers=False
        ).knobs[0]
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _text(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
