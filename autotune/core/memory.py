"""What real runs prove about memory: dominance, and a memory line per family.

The rules ("ruled out", "family", the line that places the next probe) are stated
in ``autotune.core.strategy``; this module applies them to ``Knowledge``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune.core.grid import Grid
from autotune.core.knowledge import Knowledge
from autotune.core.space import Candidate, Space


@dataclass(frozen=True)
class Verdict:
    """Why a candidate was never run, and which trials' candidates proved it."""

    candidate: Candidate
    reason: str
    by: list[Candidate] = field(default_factory=list)
    kind: str = "oom"  # "oom", "over_headroom", "host_oom", "over_host" or "failed"


# -- dominance ---------------------------------------------------------------------------------
def dominators(grid: Grid, k: Knowledge, c: Candidate) -> list[Candidate]:
    """Candidates proven not to fit that ``c`` needs at least as much memory as, in every knob."""
    return _below(grid.positions(c), [(n, grid.positions(n)) for n in k.nofit])


def host_dominators(grid: Grid, k: Knowledge, c: Candidate) -> list[Candidate]:
    """Candidates proven not to fit the host's RAM that ``c`` needs at least as much host RAM as:
    at least their offload and, in every other knob, at or beyond them (``Space.host_positions``)."""
    return _below(grid.host_positions(c), [(n, grid.host_positions(n)) for n in k.host_nofit])


def _below(pc: tuple[float, ...], proofs: Sequence[tuple[Candidate, tuple[float, ...]]]) -> list[Candidate]:
    """The proofs whose coordinates ``pc`` is at or beyond in every one."""
    return [n for n, pn in proofs if all(x >= y for x, y in zip(pc, pn, strict=True))]


def failed_below(grid: Grid, k: Knowledge, c: Candidate) -> list[Candidate]:
    """Same knobs, smaller batch, failed out for a non-memory reason."""
    fam, b = grid.family(c), grid.batch(c)
    return [
        f for f in k.failures if f != c and grid.family(f) == fam and grid.batch(f) < b and k.exhausted(f)
    ]


def ruled_out(grid: Grid, k: Knowledge) -> list[Verdict]:
    """Every candidate of the grid not run yet that dominance (or its knobs' failures) rules out."""
    verdicts = []
    nofit = [(n, grid.positions(n)) for n in k.nofit]  # looked up once, not once per candidate
    host_nofit = [(n, grid.host_positions(n)) for n in k.host_nofit]
    for c in grid.candidates:
        if c in k.seen or c in k.running:
            continue
        by = _below(grid.positions(c), nofit)
        if by:
            kinds = {k.nofit[n][0] for n in by}
            kind = "oom" if "oom" in kinds else "over_headroom"
            proof = [n for n in by if k.nofit[n][0] == kind]
            first = proof[0]
            what = "ran out of device memory" if kind == "oom" else k.nofit[first][1]
            more = f" (and {len(proof) - 1} more)" if len(proof) > 1 else ""
            reason = f"needs at least as much memory as {first}, which {what}{more}"
            verdicts.append(Verdict(c, reason, proof, kind))
            continue
        host = _below(grid.host_positions(c), host_nofit) if host_nofit else []
        if host:
            first = host[0]
            kind, what = k.host_nofit[first]
            more = f" (and {len(host) - 1} more)" if len(host) > 1 else ""
            reason = f"needs at least as much host RAM as {first}, which {what}{more}"
            verdicts.append(Verdict(c, reason, host, "host_oom" if kind == "host_oom" else "over_host"))
            continue
        failed = failed_below(grid, k, c)
        if failed:
            f = failed[0]
            outcomes = ", ".join(sorted(k.failures[f]))
            verdicts.append(
                Verdict(c, f"the same knobs at a smaller batch failed ({outcomes}): {f}", failed, "failed")
            )
    return verdicts


# -- the memory line ---------------------------------------------------------------------------
def pick_batch(
    grid: Grid,
    k: Knowledge,
    fam: Candidate,
    members: list[Candidate],
    *,
    card_gb: float,
    fit_limit_gb: float,
    start_low: bool,
    bounds: Mapping[Candidate, float],
) -> Candidate:
    """Within a family: find its memory limit exactly, then measure what could still win.

    The **frontier** is the batches above the largest measured fit (``floor``) and below the
    smallest proven non-fit (``ceiling``). While a member lies on it, the next probe goes to the
    largest batch the memory line predicts fits; when the line says nothing above the floor
    fits, to ``floor + 1``, so the limit is verified by real runs on both sides. Without a line
    the ladder doubles from the floor. Two non-fits above the floor mean the line misleads
    (memory in steps): the probe then bisects the frontier. Once the limit is known, the member
    with the highest speed bound goes next (a batch between two measured ones that could win).
    """
    space = grid.space
    own = sorted(
        (grid.batch(c), p.peak) for c, p in k.points.items() if grid.family(c) == fam and p.peak is not None
    )
    ooms = sorted(grid.batch(c) for c in k.nofit if grid.family(c) == fam)
    floor, ceiling = limits(grid, k, fam)
    above = [b for b in ooms if b > floor]
    front = frontier(grid, k, fam, members)
    if not front:
        measured = sorted({grid.batch(c) for c in k.points if grid.family(c) == fam})
        return bisect_gap(grid, members, measured, bounds)
    if not own and (ooms or start_low):
        return front[0]  # the neighbours' line was far off (checkpointing off, say): start low
    line = memory_line(space, k, fam, own, ooms, card_gb)
    if line is None:
        target = 2 * floor if floor else space.batch(front[0])
    else:
        intercept, slope = line
        predicted = [b for b in grid.batches if floor < b < ceiling and intercept + slope * b <= fit_limit_gb]
        target = predicted[-1] if predicted else floor + 1
        if len(above) >= 2 and math.isfinite(ceiling):
            target = min(target, max(floor + 1, (floor + int(ceiling)) // 2))
    below = [c for c in front if grid.batch(c) <= target]
    return below[-1] if below else front[0]


def limits(grid: Grid, k: Knowledge, fam: Candidate) -> tuple[int, float]:
    """The family's largest measured fit (``floor``, 0: none) and smallest proven non-fit above it
    (``ceiling``, inf: none; a batch dominance rules out counts as one)."""
    floor = max((grid.batch(c) for c, p in k.points.items() if grid.family(c) == fam and p.fits), default=0)
    above = (grid.batch(c) for c in k.nofit if grid.family(c) == fam and grid.batch(c) > floor)
    ceiling = min(above, default=math.inf)
    for b in grid.batches:  # a batch dominance rules out also caps the frontier
        if floor < b < ceiling and dominators(grid, k, grid.at(fam, b) or grid.space.with_batch(fam, b)):
            return floor, b
    return floor, ceiling


def frontier(grid: Grid, k: Knowledge, fam: Candidate, members: Sequence[Candidate]) -> list[Candidate]:
    """The members between the family's ``limits``: empty once its memory limit is known, when all
    that is left of it is speed probes between measured batches (``bisect_gap``)."""
    floor, ceiling = limits(grid, k, fam)
    return [c for c in members if floor < grid.batch(c) < ceiling]


def bisect_gap(
    grid: Grid, members: list[Candidate], measured: Sequence[int], bounds: Mapping[Candidate, float]
) -> Candidate:
    """The next speed probe once a family's memory limit is known: in the gap between measured
    batches that holds the member with the highest speed bound, the member nearest the gap's middle
    in log space (the geometric mean of its ends). Bisection, not a walk from the gap's end: a run in
    the middle bounds both halves (the secants from wider-spaced points are tighter under noise), so
    a gap of n batches takes O(log n) runs, not n (32 and 64 measured, 33..63 could win: 45 first, not 63).
    In log space because batch sizes act by ratios: throughput saturates in log batch, and the
    middle of two powers of two is a power of two (2..8: 4, not 5), the batch least likely to sit
    in a dip of a card that runs unaligned batches slower, so its secants bound the most."""
    space = grid.space
    top = max(members, key=lambda c: (bounds.get(c, math.inf), space.batch(c)))
    b = space.batch(top)
    lo = max((m for m in measured if m < b), default=0)
    hi = min((m for m in measured if m > b), default=None)
    gap = [c for c in members if lo < space.batch(c) and (hi is None or space.batch(c) < hi)]
    if hi is None or len(gap) <= 2:
        return top
    bottom = lo if lo > 0 else grid.batches[0] / 2  # nothing measured below: half the smallest batch
    middle = math.log(bottom * hi) / 2
    return min(gap, key=lambda c: (abs(math.log(space.batch(c)) - middle), -bounds.get(c, math.inf)))


def memory_line(
    space: Space,
    k: Knowledge,
    fam: Candidate,
    own: list[tuple[int, float]],
    ooms: list[int],
    card_gb: float,
) -> tuple[float, float] | None:
    """Peak memory against batch for ``fam``: (intercept, slope), or None when unknown.

    Two own points: their least-squares line. One: a neighbour family's slope, or
    its intercept (whichever predicts more memory: quantization moves the
    intercept, checkpointing the slope), and never a slope the family's own OOMs
    contradict. None: the hungriest nearest neighbour's line.
    """
    if len({b for b, _ in own}) >= 2:
        return least_squares(own)
    donors = donor_lines(space, k, fam)
    if own:
        b1, p1 = own[-1]
        slopes = [s for _, s in donors] + [(p1 - a) / b1 for a, _ in donors]
        slopes += [(card_gb - p1) / (b - b1) for b in ooms if b > b1]
        if not slopes:
            return None
        slope = max(0.0, *slopes)
        return (p1 - slope * b1, slope)
    if not donors:
        return None
    return max(donors, key=lambda line: line[0] + line[1])


def donor_lines(space: Space, k: Knowledge, fam: Candidate) -> list[tuple[float, float]]:
    """Lines of the nearest families (fewest knobs changed) that have two or more points."""
    pts: dict[Candidate, list[tuple[int, float]]] = defaultdict(list)
    for c, p in k.points.items():
        if p.peak is not None:
            pts[space.family(c)].append((space.batch(c), p.peak))
    lines: dict[int, list[tuple[float, float]]] = defaultdict(list)
    fp = fam.params
    for f, points in pts.items():
        if f == fam or len({b for b, _ in points}) < 2:
            continue
        distance = sum(1 for n, v in f.params.items() if fp.get(n) != v)
        lines[distance].append(least_squares(sorted(points)))
    return lines[min(lines)] if lines else []


def least_squares(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The least-squares line (intercept, slope) through ``points``; a falling slope is taken as flat."""
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(p for _, p in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    if sxx == 0:
        return (my, 0.0)
    slope = sum((b - mx) * (p - my) for b, p in points) / sxx
    return (my - slope * mx, max(slope, 0.0))
