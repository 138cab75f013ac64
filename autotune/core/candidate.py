"""The values a search space is made of: a knob, a candidate, a study param's spelling.

Every knob's values are ordered from memory-SAVING to memory-HUNGRY (``autotune.core.space``
builds the order between candidates from them). Study params use the knob names; the string
``none`` stands for YAML null (``to_study_value`` / ``from_study_value``: the one place that
spells that rule).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from autotune.errors import ConfigError

#: A study param value: a string (``none`` for null), a bool, an int (batch size, a count) or a
#: float (a fraction).
ParamValue = Union[str, bool, int, float]  # noqa: UP007 (a runtime alias: py3.10 needs Union)

NONE = "none"


def to_study_value(value: Any) -> Any:
    """A knob value as the study stores it: YAML null is the string ``none``."""
    return NONE if value is None else value


def from_study_value(value: Any) -> Any:
    """The inverse of ``to_study_value``: the study's ``none`` back to YAML null."""
    return None if value == NONE else value


def same_param(a: Any, b: Any) -> bool:
    """Param equality where ``None`` and ``"none"`` are one value (YAML null in the study)."""
    return bool(to_study_value(a) == to_study_value(b))


def fidelity_score(params: Mapping[str, Any], fidelity: Mapping[str, Any]) -> int:
    """How many knobs sit at their preferred (higher-fidelity) value: near-ties go to the higher."""
    return sum(1 for name, value in fidelity.items() if name in params and same_param(params[name], value))


def normalize_value(value: Any) -> ParamValue:
    """The study's spelling of a knob value, validated: YAML null becomes the string ``none``."""
    if value is None:
        return NONE
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ConfigError(f"knob value {value!r} is not a string, bool, number or null")


@dataclass(frozen=True, eq=False)
class Candidate:
    """One point of the space: a value for every knob.

    Equality and hashing ignore the order of the items, so a candidate rebuilt from
    a study's params dict equals the one the strategy proposed. Build candidates with
    ``Space.candidate`` (validated, knob-file order).
    """

    items: tuple[tuple[str, ParamValue], ...]

    @property
    def params(self) -> dict[str, ParamValue]:
        """The study params: knob name -> value (``none`` for null)."""
        return dict(self.items)

    def get(self, name: str) -> ParamValue:
        return self.params[name]

    def replace(self, **changes: ParamValue) -> Candidate:
        """The same candidate with some knobs changed (knob order kept)."""
        unknown = set(changes) - {k for k, _ in self.items}
        if unknown:
            raise KeyError(f"unknown knobs {sorted(unknown)}")
        return Candidate(tuple((k, changes.get(k, v)) for k, v in self.items))

    def __post_init__(self) -> None:
        # The type name keeps True apart from 1 (they hash alike in Python). Cached: the
        # strategy hashes candidates thousands of times per call.
        key = frozenset((k, type(v).__name__, v) for k, v in self.items)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return self._hash == other._hash and self._key == other._key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.items)

    def __repr__(self) -> str:
        return f"Candidate({self})"


def _show(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: Knob kinds: a listed choice, the batch-size integer, a count of offloaded parts, a fraction.
KINDS = ("choice", "int", "count", "fraction")
#: A fraction knob's coarse grid and finest step when its file names none.
DEFAULT_FRACTION_GRID = (1.0, 0.75, 0.5, 0.25, 0.0)
DEFAULT_FRACTION_STEP = 0.05
#: A count knob's coarse grid when its file names none: this many even steps from max to 0.
DEFAULT_COUNT_STEPS = 5


@dataclass(frozen=True)
class Knob:
    """One knob. ``values`` run saving -> hungry; an int knob (batch size) is ordered by number.

    A count or fraction knob (``kind``) lists every value it may take, saving first (more offload
    first); ``coarse`` holds the ones the search tries first, and the strategy refines between them
    near the best (``autotune.core.refine``). ``offload``: more of it costs host RAM.
    """

    name: str
    values: tuple[ParamValue, ...]
    is_int: bool = False
    #: How many leading values are extra savers: each needs less memory than every regular
    #: value, but they are not ordered among themselves (a knob file may list them in the
    #: order to try them, e.g. int4 before int2), so no verdict crosses between two of them.
    extra: int = 0
    kind: str = "choice"
    coarse: tuple[ParamValue, ...] = ()
    offload: bool = False

    @property
    def refinable(self) -> bool:
        """The search tries ``coarse`` first and the other values only near the best."""
        return bool(self.coarse) and len(self.coarse) < len(self.values)

    def normalize(self, value: Any) -> ParamValue:
        """``value`` as this knob spells it: a fraction is a float (``1`` is ``1.0``), a count an int."""
        if self.kind == "fraction" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return round(float(value), 6)
        if self.kind == "count" and isinstance(value, float) and value.is_integer():
            return int(value)
        return normalize_value(value)

    def coords(self, value: ParamValue) -> tuple[float, ...]:
        """Coordinates whose component-wise order is the memory order of this knob's values."""
        pos = self.position(value)
        if self.is_int or self.extra == 0:
            return (pos,)
        i = int(pos)
        if i < self.extra:
            return (*(1.0 if j == i else 0.0 for j in range(self.extra)), 0.0)
        return (*(1.0 for _ in range(self.extra)), float(i - self.extra + 1))

    def position(self, value: ParamValue) -> float:
        """Where ``value`` sits on the saving -> hungry scale (an int knob: the number itself)."""
        if self.is_int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"knob {self.name}: {value!r} is not an integer")
            return float(value)
        try:
            return float(self.values.index(value))
        except ValueError:
            known = ", ".join(_show(v) for v in self.values)
            raise ConfigError(
                f"knob {self.name}: value {_show(value)!r} is not one of {known}; "
                "check the knob file or the baseline config"
            ) from None


#: Every integer batch size up to this one is a candidate; above it they double (then the maximum).
EVERY_INTEGER_UP_TO = 64


def batch_sizes(max_batch_size: int, ladder: Sequence[int] | None = None) -> tuple[int, ...]:
    """Every integer batch size from 1 to ``max_batch_size`` (doubling past ``EVERY_INTEGER_UP_TO``);
    or ``ladder``'s sizes up to it.

    Integers, not a power-of-two ladder: the largest batch that fits is rarely a power
    of two, and it is where the speed is. The search still brackets the memory limit
    with a ladder and measures only the sizes that could win (``autotune.core.memory``).
    ``ladder`` (``--batch-sizes 1,2,4,8``) keeps a fixed list for users who want one.
    """
    if max_batch_size < 1:
        raise ConfigError(f"--max-batch-size must be at least 1, got {max_batch_size}")
    if ladder is None:
        sizes = list(range(1, min(max_batch_size, EVERY_INTEGER_UP_TO) + 1))
        step = EVERY_INTEGER_UP_TO * 2
        while step < max_batch_size:  # past it, doubling: a huge maximum stays a short list
            sizes.append(step)
            step *= 2
        if sizes[-1] != max_batch_size:
            sizes.append(max_batch_size)
        return tuple(sizes)
    bad = [b for b in ladder if isinstance(b, bool) or not isinstance(b, int) or b < 1]
    if bad or not ladder:
        raise ConfigError(
            f"--batch-sizes takes positive integers like 1,2,4,8; got {list(ladder)} (bad: {bad or 'empty'})"
        )
    kept = tuple(sorted({b for b in ladder if b <= max_batch_size}))
    if not kept:
        raise ConfigError(
            f"--batch-sizes {','.join(map(str, ladder))}: none is <= the largest batch size {max_batch_size} "
            "(--max-batch-size, or what the trainer's data allows)"
        )
    return kept
