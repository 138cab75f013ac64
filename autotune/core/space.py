"""The search space: knobs, candidates, and the memory order between candidates.

Every knob's values are ordered from memory-SAVING to memory-HUNGRY, so candidate
A needs at least as much memory as B when each of A's knobs sits at or beyond B's
position. That partial order is what lets one real OOM rule out a whole cone of
candidates without running them (see ``autotune.core.strategy``).

Knob files (``configs/knobs/<trainer>.yaml``) look like::

    knobs:
      - name: quantization
        values: [int8-quanto, none]
        extra_savers: [int4-quanto, int2-quanto]  # only with --allow-extra-savers; below every value
      - name: optimizer
        values: [adamw8bit, adamw]
      - name: batch_size
        type: int            # every integer 1..--max-batch-size (or --batch-sizes' list)
      - name: gradient_checkpointing
        values: [true, false]
      - name: blocks_to_swap
        type: count          # an integer max..0: MORE of it saves device memory, costs host RAM
        max: 39              # an adapter's knob_limits(baseline) may lower it per architecture
        grid: [39, 32, 24, 16, 8, 0]   # tried first; refined near the winner (default: 6 even steps)
      - name: offload_percent
        type: fraction       # a float 1.0..0.0: MORE of it saves device memory, costs host RAM
        grid: [1.0, 0.75, 0.5, 0.25, 0.0]   # tried first (the default)
        step: 0.05           # refined near the winner down to this step (the default)
    fidelity: {quantization: none, optimizer: adamw}

A precision category is a choice listed leanest first (``[nf4, float8, bfloat16]``). Count and
fraction knobs are offload knobs (``host: offload``, the default; ``host: none`` when more of one
does not cost host RAM): ``Space.host_positions`` orders candidates by host RAM with them reversed.
A choice whose saving end holds more in host RAM says so too (``host: offload``: activations
offloaded to the CPU, ``low_vram`` keeping encoders there).

Study params use the knob names; the string ``none`` stands for YAML null
(``to_study_value`` / ``from_study_value``: the one place that spells that rule).

Pure: the knob file is read by ``autotune.config.knobs``, which hands the parsed
mapping to ``Space.from_mapping``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from autotune.core.yamltext import load_yaml
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


class Space:
    """The knobs of one sweep, and the grid of candidates they span."""

    def __init__(
        self,
        knobs: Sequence[Knob],
        *,
        fidelity: Mapping[str, ParamValue] | None = None,
        batch_knob: str | None = "batch_size",
    ) -> None:
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise ConfigError(f"knob names repeat: {names}")
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}
        int_knobs = [k.name for k in self.knobs if k.is_int]
        if batch_knob not in self._by_name:
            batch_knob = int_knobs[0] if int_knobs else None
        self.batch_knob: str | None = batch_knob
        self.fidelity: dict[str, ParamValue] = {}
        for name, value in (fidelity or {}).items():
            if name not in self._by_name:
                raise ConfigError(f"fidelity names unknown knob {name!r}; knobs: {', '.join(names)}")
            v = self._by_name[name].normalize(value)
            self._by_name[name].position(v)  # validates
            self.fidelity[name] = v

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        source: str = "<knobs>",
        max_batch_size: int,
        allow_extra_savers: bool,
        batch_ladder: Sequence[int] | None = None,
    ) -> Space:
        """A knob file's text (parsed with the safe loader); errors name ``source`` and the knob."""
        return cls.from_mapping(
            load_yaml(text, source),
            source=source,
            max_batch_size=max_batch_size,
            allow_extra_savers=allow_extra_savers,
            batch_ladder=batch_ladder,
        )

    @classmethod
    def from_mapping(
        cls,
        data: Any,
        *,
        source: str = "<knobs>",
        max_batch_size: int,
        allow_extra_savers: bool,
        batch_ladder: Sequence[int] | None = None,
        limits: Mapping[str, int] | None = None,
    ) -> Space:
        """A parsed knob file (``configs/knobs/<trainer>.yaml``); errors name ``source`` and the knob.

        ``batch_ladder`` (``--batch-sizes``) replaces the ``batch_size`` knob's values when given;
        ``limits`` (an adapter's ``knob_limits``) the ``max`` of count knobs.
        """
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
                        raise ConfigError(
                            f"{where} ({name}): no value is <= --max-batch-size {max_batch_size}"
                        )
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
        return cls(knobs, fidelity=fidelity)

    def restricted(self, names: Collection[str], extra: Sequence[Knob] = ()) -> Space:
        """Only the knobs in ``names`` (file order), then ``extra`` (declared ones): the knobs a
        trainer really has. Fidelity keeps only those knobs, so no near-tie is decided on a knob
        the trainer never received. No knob at all is a space of one candidate: the baseline."""
        kept = [k for k in self.knobs if k.name in names]
        return Space(
            [*kept, *extra],
            fidelity={k: v for k, v in self.fidelity.items() if k in names},
            batch_knob=self.batch_knob if self.batch_knob in names else None,
        )

    # -- candidates ------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        return self._by_name[name]

    def candidate(self, params: Mapping[str, Any]) -> Candidate:
        """A validated candidate in knob-file order; missing, unknown or invalid knobs are errors."""
        missing = [n for n in self.names if n not in params]
        unknown = [n for n in params if n not in self._by_name]
        if missing or unknown:
            raise ConfigError(
                f"params {dict(params)} do not match the knobs {list(self.names)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        items = []
        for knob in self.knobs:
            value = knob.normalize(params[knob.name])
            knob.position(value)  # validates
            items.append((knob.name, value))
        return Candidate(tuple(items))

    def __iter__(self) -> Iterator[Candidate]:
        """Every candidate of the grid, in knob-file order (the last knob varies fastest)."""
        for combo in itertools.product(*(k.values for k in self.knobs)):
            yield Candidate(tuple(zip(self.names, combo, strict=True)))

    def __len__(self) -> int:
        n = 1
        for k in self.knobs:
            n *= len(k.values)
        return n

    def __contains__(self, candidate: object) -> bool:
        if not isinstance(candidate, Candidate):
            return False
        p = candidate.params
        return set(p) == set(self.names) and all(p[k.name] in k.values for k in self.knobs)

    def positions(self, candidate: Candidate) -> tuple[float, ...]:
        """Coordinates of the memory order: ``a`` needs >= ``b`` when every coordinate is >=."""
        p = candidate.params
        return tuple(x for k in self.knobs for x in k.coords(p[k.name]))

    def host_positions(self, candidate: Candidate) -> tuple[float, ...]:
        """Coordinates of the host-RAM order: an offload knob's reversed (more offload holds more
        in host RAM), every other knob's as in device memory (a hungrier precision or batch holds
        no less on the host either). ``a`` needs >= ``b``'s host RAM when every coordinate is >=."""
        p = candidate.params
        return tuple(-x if k.offload else x for k in self.knobs for x in k.coords(p[k.name]))

    def offload_room(self, candidate: Candidate) -> tuple[bool, bool]:
        """Whether some offload knob of ``candidate`` can offload more (less device memory), and
        whether one can offload less (less host RAM): what a failed baseline leaves to try."""
        more = less = False
        for k in self.knobs:
            if k.offload:
                i = k.values.index(candidate.params[k.name])
                more, less = more or i > 0, less or i < len(k.values) - 1
        return more, less

    def needs_at_least(self, a: Candidate, b: Candidate) -> bool:
        """True when ``a`` is at or beyond ``b`` in every knob, so ``a`` needs >= ``b``'s memory."""
        return all(x >= y for x, y in zip(self.positions(a), self.positions(b), strict=True))

    # -- families: every knob but the batch size ---------------------------------------------
    def batch(self, candidate: Candidate) -> int:
        """The candidate's batch size (1 when the space has no batch knob)."""
        if self.batch_knob is None:
            return 1
        value = candidate.params[self.batch_knob]
        assert isinstance(value, int)
        return value

    def batch_values(self) -> tuple[int, ...]:
        if self.batch_knob is None:
            return (1,)
        return tuple(int(v) for v in self.knob(self.batch_knob).values)

    def family(self, candidate: Candidate) -> Candidate:
        """The candidate without its batch size: memory is close to affine in batch within a family."""
        return Candidate(tuple((k, v) for k, v in candidate.items if k != self.batch_knob))

    def with_batch(self, family: Candidate, batch: int) -> Candidate:
        if self.batch_knob is None:
            return family
        values = dict(family.items)
        values[self.batch_knob] = batch
        return Candidate(tuple((n, values[n]) for n in self.names))

    def families(self) -> list[Candidate]:
        seen: dict[Candidate, None] = {}
        for c in self:
            seen.setdefault(self.family(c), None)
        return list(seen)

    def fidelity_score(self, candidate: Candidate) -> int:
        """How many knobs sit at their preferred (higher-fidelity) value: near-ties go to the higher."""
        return fidelity_score(candidate.params, self.fidelity)


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
