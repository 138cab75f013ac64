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

``fidelity`` names the **fidelity knobs** (and each one's preferred value, which decides near-ties):
the knobs whose saving values lower the quality of what is trained (quantized weights, 8-bit
optimizer states, an fp8 transformer). The sweep never proposes a fidelity knob's value on the
saving side of the baseline's own unless ``--allow-extra-savers`` is given (``Space.keep_fidelity``):
an unquantized AdamW baseline is searched unquantized with AdamW. A knob left out of it (gradient
checkpointing, batch size, block swap, offload, ``split_attn``) trades speed or host RAM, never
quality, so the search may turn it either way (checkpointing on for a baseline with it off, to fit
a bigger batch, included).

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
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.core.candidate import (
    DEFAULT_COUNT_STEPS,
    DEFAULT_FRACTION_GRID,
    DEFAULT_FRACTION_STEP,
    EVERY_INTEGER_UP_TO,
    KINDS,
    NONE,
    Candidate,
    Knob,
    ParamValue,
    batch_sizes,
    fidelity_score,
    from_study_value,
    normalize_value,
    same_param,
    to_study_value,
)
from autotune.core.knobfile import parse_knobs
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError

__all__ = [
    "DEFAULT_COUNT_STEPS",
    "DEFAULT_FRACTION_GRID",
    "DEFAULT_FRACTION_STEP",
    "EVERY_INTEGER_UP_TO",
    "KINDS",
    "NONE",
    "Candidate",
    "Knob",
    "ParamValue",
    "Space",
    "batch_sizes",
    "fidelity_score",
    "from_study_value",
    "normalize_value",
    "same_param",
    "to_study_value",
]


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
        knobs, fidelity = parse_knobs(
            data,
            source=source,
            max_batch_size=max_batch_size,
            allow_extra_savers=allow_extra_savers,
            batch_ladder=batch_ladder,
            limits=limits,
        )
        return cls(knobs, fidelity=fidelity)

    def held_back(self, baseline: Candidate) -> dict[str, tuple[ParamValue, ...]]:
        """Each fidelity knob's values on the saving side of ``baseline``'s own (empty ones left out):
        what an unasked sweep never proposes, since they would trade away quality the baseline kept."""
        out: dict[str, tuple[ParamValue, ...]] = {}
        for name in self.fidelity:
            knob = self._by_name[name]
            here = knob.position(knob.normalize(baseline.params[name]))
            below = tuple(v for v in knob.values if knob.position(v) < here)
            if below:
                out[name] = below
        return out

    def keep_fidelity(self, baseline: Candidate) -> Space:
        """This space without the values ``held_back`` names: the space an unasked sweep searches."""
        held = self.held_back(baseline)
        if not held:
            return self
        knobs = []
        for k in self.knobs:
            gone = held.get(k.name, ())
            if gone:  # a prefix of the values (saving first); extra savers lead, so they go first
                k = replace(k, values=k.values[len(gone) :], extra=max(0, k.extra - len(gone)))
            knobs.append(k)
        fidelity = {n: v for n, v in self.fidelity.items() if v not in held.get(n, ())}
        return Space(knobs, fidelity=fidelity, batch_knob=self.batch_knob)

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
