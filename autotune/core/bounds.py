"""Speed upper bounds: how fast an unmeasured candidate could possibly be.

The **speed upper bound** ``UB(c)`` of an unmeasured candidate comes from two
assumptions about step time ``T(b)`` within a family (every knob but the batch): it
never falls as the batch grows, and it is convex in ``b`` (flat while the GPU is
under-used, then linear or worse). So ``T(b) >= T(b_i)`` for every measured
``b_i <= b``, and a secant through two measured points, extended beyond them, lies
below ``T``. Secants join points of the lower convex hull of the measured points
only (every pair: the wider the pair, the less its noise tilts it), and extend beyond them only: a batch that pays extra for its size (odd sizes,
allocator retries) sits above the hull and bounds nothing but through monotonicity.
Each measured time is widened by its noise margin first (the point's measured
noise, from its runs' per-step spread and their scatter, ``autotune.core.knowledge.noise_of``;
at least ``min_noise``, at most 50 %). Across families, only knobs listed in
the speed priors carry bounds (checkpointing off is at most 1.6x faster and never
slower than on; 8-bit and full AdamW within 5 %), and the ratios learned inside the
study between families measured at a common batch (``SpeedBounds._learned``), which is
what ends a quantization that loses after one cheap run. With no bound, ``UB`` is infinite. A measured candidate's
bound is its value plus its noise margin.

``autotune.core.strategy`` uses these bounds to decide which candidates could still win.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping

from autotune.core.grid import Grid
from autotune.core.knowledge import Knowledge, Point
from autotune.core.space import Candidate, ParamValue

#: How far the speed ratio of two families may drift from the batch it was measured at to
#: another batch (relative): the learned prior's slack, see ``SpeedBounds._learned``.
LEARNED_DRIFT = 0.10

#: Knob -> {(from_value, to_value): max ratio}, the shape of ``speed_priors``.
SpeedPriors = Mapping[str, Mapping[tuple[ParamValue, ParamValue], float]]

#: Speed priors: knob -> {(from_value, to_value): max of samples/s(to) / samples/s(from)} at the
#: same other knobs and batch. Physical reasons: checkpointing off only removes the recompute
#: (at most one extra forward, about +33 %; 1.6 leaves margin) and never slows a step; the LoRA
#: optimizer step is tens of milliseconds of a multi-second step in either AdamW (5 % leaves margin;
#: pass looser priors for a full fine-tune, where the optimizer step weighs more).
DEFAULT_SPEED_PRIORS: dict[str, dict[tuple[ParamValue, ParamValue], float]] = {
    "gradient_checkpointing": {(True, False): 1.6, (False, True): 1.05},
    "optimizer": {("adamw8bit", "adamw"): 1.05, ("adamw", "adamw8bit"): 1.05},
}


def margin(p: Point, min_noise: float) -> float:
    """Relative uncertainty of a measured point: its noise (``knowledge.noise_of``), at least the floor."""
    return min(0.5, max(p.noise, min_noise))


def lower_hull(pts: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """The measured points (b, T, margin) on the lower convex hull of step time against batch.

    A point counts as above the hull only when it is above by more than its noise margin.
    A point above the hull paid extra for its own batch (an odd size the kernels dislike,
    allocator retries near the memory limit): convexity does not hold there, so no secant
    starts from it.
    """
    hull: list[tuple[int, float, float]] = []
    for p in sorted(pts):
        if hull and hull[-1][0] == p[0]:
            if p[1] >= hull[-1][1]:
                continue
            hull.pop()
        while len(hull) >= 2:
            (b1, t1, _), (b2, t2, m2) = hull[-2], hull[-1]
            chord = t1 + (p[1] - t1) * (b2 - b1) / (p[0] - b1)
            if t2 * (1 - m2) > chord:  # hull[-1] above the chord by more than its noise
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def own_bound(pts: list[tuple[int, float, float]], b: int) -> float:
    """Upper bound on samples/s at batch ``b`` from the family's own points (b_i, T_i, margin_i)."""
    lows = [0.0]
    for bi, ti, mi in pts:
        if bi <= b:
            lows.append(ti * (1 - mi))
    hull = lower_hull(pts)
    for (b1, t1, m1), (b2, t2, m2) in itertools.combinations(hull, 2):
        # Extend each hull secant to the right with the smallest slope the noise allows, and to
        # the left with the largest: convexity puts T above both extensions. Only hull secants:
        # a batch that paid extra (above the hull) would tilt a secant and hide a faster batch.
        # Every pair of hull points, not only neighbours: T is convex through all of them, and a
        # secant between points further apart divides their noise by a wider span (two batches
        # side by side, each 1.5 % off, tilt their secant by 3 % of T; four apart, by 0.75 %).
        if b > b2:
            slope = (t2 * (1 - m2) - t1 * (1 + m1)) / (b2 - b1)
            if slope > 0:
                lows.append(t2 * (1 - m2) + slope * (b - b2))
        elif b < b1:
            steep = (t2 * (1 + m2) - t1 * (1 - m1)) / (b2 - b1)
            lows.append(t1 * (1 - m1) - steep * (b1 - b))
    low = max(lows)
    bound = b / low if low > 0 else math.inf
    return min(bound, unimodal_cap(hull, b))


def unimodal_cap(hull: list[tuple[int, float, float]], b: int) -> float:
    """Samples/s at batch ``b`` can be no more than at a hull point ``x1 > b`` that a hull point
    further right beats beyond both noises: convex step time makes samples/s unimodal in the batch
    (``T(b)/b`` has one minimum: ``d/db (T/b)`` changes sign once, since ``(b T' - T)' = b T'' >= 0``),
    so once it rises from ``x1`` to ``x2`` it never was higher left of ``x1``. This is what ends the
    walk down from a family's largest fitting batch one batch at a time: one run below it, slower,
    bounds every batch below that run."""
    cap = math.inf
    best_right = 0.0  # the most any hull point right of x1 is sure to reach (samples/s, noise off)
    for x, t, m in reversed(hull):
        sps_lo, sps_hi = x / (t * (1 + m)), x / (t * (1 - m))
        if x > b and best_right > sps_hi:
            cap = min(cap, sps_hi)
        best_right = max(best_right, sps_lo)
    return cap


class SpeedBounds:
    """``UB(c)`` for every candidate of a grid, given what is measured."""

    def __init__(self, grid: Grid, speed_priors: SpeedPriors, min_noise: float) -> None:
        self.grid = grid
        self.speed_priors = speed_priors
        self.min_noise = min_noise
        self._nb: dict[Candidate, list[tuple[Candidate, float]]] | None = None

    def bounds(self, k: Knowledge) -> dict[Candidate, float]:
        """UB(c) for every candidate of the grid (a measured one: its value plus noise)."""
        grid = self.grid
        by_family: dict[Candidate, list[tuple[int, float, float]]] = defaultdict(list)
        for c, p in k.points.items():
            if c in grid:
                b = grid.batch(c)
                by_family[grid.family(c)].append((b, b / p.samples_per_s, margin(p, self.min_noise)))
        ub: dict[Candidate, float] = {}
        for c in grid.candidates:
            point = k.points.get(c)
            if point is not None:
                ub[c] = point.samples_per_s * (1 + margin(point, self.min_noise))
            else:
                pts = sorted(by_family.get(grid.family(c), []))
                ub[c] = own_bound(pts, grid.batch(c))
        self._learned(k, ub)
        # Relax through the priors and batch monotonicity until nothing tightens.
        neighbours = self._neighbours()
        for _ in range(4 * len(grid.space.knobs) + len(grid.batches)):
            changed = False
            for c in grid.candidates:
                if c in k.points:
                    continue
                best = ub[c]
                for other, ratio in neighbours[c]:
                    cand = ub[other] * ratio
                    if cand < best * (1 - 1e-12):
                        best = cand
                if best < ub[c]:
                    ub[c] = best
                    changed = True
            if not changed:
                break
        return ub

    def _learned(self, k: Knowledge, ub: dict[Candidate, float]) -> None:
        """Tighten ``ub`` with the speed ratios between families measured at a common batch.

        A family's speed relative to another's at the same batch is what its knobs cost per
        sample (quantized matmuls, recompute), so it carries across batch sizes: within
        ``LEARNED_DRIFT`` by assumption. Measured at batch ``b`` in both (each widened by its
        noise), the ratio bounds the family at every other batch by the other's bound there.
        This is what lets one cheap run at batch 1 end a family that loses everywhere.

        Not for a family that offloads (blocks swapped, a share offloaded): moving weights costs
        about the same per micro-batch whatever its size, a fixed cost that makes the ratio drift
        far past ``LEARNED_DRIFT`` between batches (a diffusion-pipe model measured: 0.83 at
        batch 1, 1.2 at batch 4), so such a family is bounded by its own runs and the priors only.
        """
        grid = self.grid
        measured: dict[Candidate, dict[int, Point]] = defaultdict(dict)
        for c, p in k.points.items():
            if c in grid:
                measured[grid.family(c)][grid.batch(c)] = p
        if len(measured) < 2:
            return
        # Each point widened once (not once per pair of families: the pairs grow with the square
        # of the families measured): its high and low end, the same floats the ratio divides.
        # Ratios bound only a family's unmeasured candidates: none for a family measured whole
        # (so the high ends are needed of the open families only).
        open_families = {grid.family(c) for c in grid.candidates if c not in k.points}
        mn = self.min_noise
        hi: dict[Candidate, dict[int, float]] = {}
        lo: dict[Candidate, dict[int, float]] = {}
        for fam, pts in measured.items():
            if grid.offloads(fam):
                continue
            if fam in open_families:
                hi[fam] = {b: p.samples_per_s * (1 + margin(p, mn)) for b, p in pts.items()}
            lo[fam] = {b: p.samples_per_s * (1 - margin(p, mn)) for b, p in pts.items()}
        ratios: dict[Candidate, list[tuple[Candidate, float]]] = defaultdict(list)
        for fam, fam_hi in hi.items():
            for ref, ref_lo in lo.items():
                if ref == fam:
                    continue
                common = [fam_hi[b] / ref_lo[b] for b in fam_hi.keys() & ref_lo.keys()]
                if common:
                    ratios[fam].append((ref, min(common) * (1 + LEARNED_DRIFT)))
        if not ratios:
            return
        base = dict(ub)  # bound by the other family's own bound, not one already learned (no cycles)
        for c in grid.candidates:
            if c in k.points:
                continue
            fam_ratios = ratios.get(grid.family(c))
            if not fam_ratios:
                continue
            b = grid.batch(c)
            bound = ub[c]
            for ref, ratio in fam_ratios:
                other = grid.at(ref, b)  # the other family's own bound at this batch
                if other is not None:
                    bound = min(bound, base[other] * ratio)
            ub[c] = bound

    def _neighbours(self) -> dict[Candidate, list[tuple[Candidate, float]]]:
        """Each candidate's bounding neighbours: (other, max ratio of its samples/s to other's)."""
        if self._nb is not None:
            return self._nb
        space = self.grid.space
        grid = set(self.grid.candidates)
        nb: dict[Candidate, list[tuple[Candidate, float]]] = {c: [] for c in self.grid.candidates}
        for c in self.grid.candidates:
            params = c.params
            for name, pairs in self.speed_priors.items():
                if name not in params:
                    continue
                for (src, dst), ratio in pairs.items():
                    if params[name] == dst:
                        other = c.replace(**{name: src})
                        if other in grid:
                            nb[c].append((other, ratio))
            if space.batch_knob is not None:
                b = self.grid.batch(c)
                smaller = [x for x in self.grid.batches if x < b]
                if smaller:  # the grid's own candidate of c's family there (looked up, not rebuilt)
                    below = self.grid.at(self.grid.family(c), smaller[-1])
                    if below is not None:  # step time never falls with batch: sps(b) <= sps(b') * b / b'
                        nb[c].append((below, b / smaller[-1]))
        self._nb = nb
        return nb
