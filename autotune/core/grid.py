"""The candidates a strategy searches, with what it asks about each one looked up once.

The space's grid plus the baseline (a baseline off the grid is searched too), every
candidate's knob positions, family and batch, and the order families are tried in:
the baseline's family first, then the least memory-hungry, fewest knobs changed first.
A candidate off the grid (a trial from an older space) is asked of the space itself.
"""

from __future__ import annotations

from autotune.core.space import Candidate, Space


class Grid:
    """The strategy's grid, the order of its families and the batches it knows."""

    def __init__(self, space: Space, baseline: Candidate) -> None:
        self.space = space
        grid = list(space)
        if baseline not in set(grid):
            grid.insert(0, baseline)
        self.candidates = grid
        self.pos = {c: space.positions(c) for c in grid}
        self._offload_knobs = [k for k in space.knobs if k.offload]
        offload = bool(self._offload_knobs)
        #: Host-RAM order coordinates (``Space.host_positions``); only when a knob offloads.
        self.hpos = {c: space.host_positions(c) for c in grid} if offload else {}
        refinable = [k for k in space.knobs if k.refinable]
        #: Knobs whose values between their coarse grid are tried only near the best.
        self.refinable = refinable
        coarse = {k.name: set(k.coarse) for k in refinable}
        #: The candidates the search may run before any refinement: refinable knobs on their grid
        #: (and the baseline's family, wherever it lies).
        base_fam = space.family(baseline)
        # Each candidate's family, built once (a grid of ~30k candidates asked it thrice cost ~1 s).
        self._fam = {c: space.family(c) for c in grid}
        self.coarse = {
            c
            for c in grid
            if all(c.params[n] in vals for n, vals in coarse.items()) or self._fam[c] == base_fam
        }
        self._bat = {c: space.batch(c) for c in grid}
        #: Each candidate as the grid spells it, and by (family, batch): asked per trial, per turn.
        self._own = {c: c for c in grid}
        self._at = {(self._fam[c], self._bat[c]): c for c in reversed(grid)}
        self._fid = {c: space.fidelity_score(c) for c in grid}
        base_params = baseline.params
        plain = [k for k in space.knobs if k.name != space.batch_knob]

        def family_key(f: Candidate) -> tuple[float, int, int]:
            fp = f.params
            changed = sum(1 for k in plain if fp[k.name] != base_params[k.name])
            hunger = sum(k.position(fp[k.name]) for k in plain)
            return (hunger, changed, order[f])

        families = [self._fam[c] for c in grid]
        order = {f: i for i, f in reversed(list(enumerate(families)))}
        fams = sorted(set(families), key=family_key)
        fams.remove(base_fam)
        #: Families in the order the search tries them (the baseline's first).
        self.families = [base_fam, *fams]
        #: Every batch size on the grid, ascending.
        self.batches = sorted({space.batch(c) for c in grid})

    def __contains__(self, c: object) -> bool:
        return c in self.pos

    def positions(self, c: Candidate) -> tuple[float, ...]:
        return self.pos.get(c) or self.space.positions(c)

    def offloads(self, family: Candidate) -> bool:
        """Whether ``family`` offloads anything (an offload knob above 0): its step has a fixed
        transfer cost per micro-batch, so speed ratios to other families drift with the batch."""
        p = family.params
        return any(
            p[k.name] != (0 if k.kind in ("count", "fraction") else k.values[-1])
            for k in self._offload_knobs
            if k.name in p
        )

    def host_positions(self, c: Candidate) -> tuple[float, ...]:
        return self.hpos.get(c) or self.space.host_positions(c)

    def own(self, c: Candidate) -> Candidate | None:
        """The grid's candidate equal to ``c`` (knob-file order), or None when ``c`` is off the grid."""
        return self._own.get(c)

    def at(self, family: Candidate, batch: int) -> Candidate | None:
        """The grid's candidate of ``family`` at ``batch`` (None: not on the grid)."""
        return self._at.get((family, batch))

    def fidelity(self, c: Candidate) -> int:
        """``Space.fidelity_score`` of ``c``, looked up (near-ties ask it of every measured point)."""
        f = self._fid.get(c)
        return f if f is not None else self.space.fidelity_score(c)

    def family(self, c: Candidate) -> Candidate:
        f = self._fam.get(c)
        return f if f is not None else self.space.family(c)

    def batch(self, c: Candidate) -> int:
        b = self._bat.get(c)
        return b if b is not None else self.space.batch(c)
