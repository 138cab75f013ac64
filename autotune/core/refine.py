"""Refining a count or fraction knob near the best: bisection between the values already tried.

Why: an offload knob (blocks swapped, a percent offloaded) has many values (0..39, 0.00..1.00),
and speed is not monotone in it (more swap can be leaner and faster: SeedVR2#153 found 36 swapped
blocks faster than 32), so no rule picks the value; trying all of them is too dear. The search runs
the knob's coarse grid first; once no coarse candidate can still win, this module opens, for each
refinable knob, the value halfway between the best's value and the nearest value tried on each side
(with every other knob as the best has it), and again around whichever wins, until the neighbours
are adjacent on the knob's finest grid; with them, the best's neighbours in each other knob (the
best with only its optimizer, precision or checkpointing changed), and each tried family's
neighbours in the knobs a speed prior bounds (an 8-bit optimizer beside a full one that ran over
the headroom line: the prior says whether it could win). A family once opened stays open (its batches are searched
as any family's are, for as long as one could still win). A side whose halfway family has nothing left to run (all of
it ruled out) counts as tried, so bisection goes on past it.

Pure: the strategy (``autotune.core.strategy``) asks it with what the history says.
"""

from __future__ import annotations

from collections.abc import Collection

from autotune.core.grid import Grid
from autotune.core.knowledge import Knowledge
from autotune.core.space import Candidate


def opened(
    grid: Grid,
    k: Knowledge,
    best: Candidate | None,
    runnable: Collection[Candidate],
    bounded: Collection[str] = (),
) -> set[Candidate]:
    """The off-grid candidates the search may run now: the families halfway between the best's value
    of each refinable knob and its nearest tried neighbours (``runnable``: what is left to run), the
    best's neighbours in each other knob, and every tried off-grid family's neighbours in the knobs
    whose speed a prior bounds (``bounded``: they run only if that bound says they could win)."""
    if best is None or not grid.refinable:
        return set()
    touched = {grid.family(c) for c in (*k.seen, *k.running)}
    alive = {grid.family(c) for c in runnable}
    family = grid.family(best)
    # A family refinement opened stays open: its other batches are searched as any family's are.
    out: set[Candidate] = {c for c in runnable if grid.family(c) in touched}
    # The best's neighbours in every other knob (its optimizer, precision, checkpointing changed
    # alone): the coarse search ran those for coarse values only, so an off-grid best would
    # otherwise never meet its 8-bit optimizer or its fp8 twin.
    plain = [kn for kn in grid.space.knobs if kn.name != grid.space.batch_knob and not kn.refinable]
    near = {family.replace(**{kn.name: v}) for kn in plain for v in kn.values}
    off_grid = [f for f in touched if any(f.params.get(kn.name) not in kn.coarse for kn in grid.refinable)]
    near.update(
        f.replace(**{kn.name: v}) for f in off_grid for kn in plain if kn.name in bounded for v in kn.values
    )
    out.update(c for c in runnable if grid.family(c) in near)
    for knob in grid.refinable:
        values = knob.values
        here = values.index(best.params[knob.name])
        coarse = set(knob.coarse)
        siblings = [family.replace(**{knob.name: v}) for v in values]
        tried = {j for j, v in enumerate(values) if v in coarse or siblings[j] in touched}
        for side in (-1, 1):
            while True:
                beyond = [j for j in tried if (j - here) * side > 0]
                if not beyond:
                    break
                edge = min(beyond, key=lambda j: abs(j - here))
                if abs(edge - here) <= 1:
                    break
                middle = (here + edge) // 2 if side > 0 else (here + edge + 1) // 2
                if siblings[middle] in alive:
                    out.update(c for c in runnable if grid.family(c) == siblings[middle])
                    break
                tried.add(middle)  # nothing left to run there: bisect past it
    return out
