"""Which candidate to run next: dominance, a memory line per family, and speed upper bounds.

Pure and deterministic: every call reads only the history it is given (the study's
trials), so a resumed sweep asks the same question and gets the same answer.

Definitions the sweep and the report rely on:

- **Fits**: a measured peak at most ``(1 - headroom) * card_gb`` and a finite loss
  (``autotune.core.verdict`` decides fit and the winner; this module searches).
- **Ruled out** (never run): a candidate that needs at least as much memory as a
  measured OOM in every knob (``Space.needs_at_least``), or as a measured run whose
  peak went over the headroom line (the reason says which). Also, after a knob
  combination failed for another reason (crash, timeout, ...) as often as allowed,
  its bigger batch sizes are not run.
- **Family**: every knob but the batch size. Within a family peak memory is close to
  affine in batch size; the line through the family's measured peaks (or, with one
  point, a neighbour family's slope) predicts the largest fitting batch, and the
  next probe goes there. Only real runs decide fit.
- **Speed upper bound** ``UB(c)`` of an unmeasured candidate, from two assumptions
  about step time ``T(b)`` within a family: it never falls as the batch grows, and it
  is convex in ``b`` (flat while the GPU is under-used, then linear or worse). So
  ``T(b) >= T(b_i)`` for every measured ``b_i <= b``, and a secant through two
  measured points, extended beyond them, lies below ``T``. Each measured time is
  widened by its noise margin first (``max(spread, min_noise)``). Across families,
  only knobs listed in ``speed_priors`` carry bounds (checkpointing off is at most
  1.6x faster and never slower than on; 8-bit and full AdamW within 5 %);
  quantization has none, so each quantization is measured. With no bound, ``UB`` is
  infinite.
- **Could still win**: ``UB(c) > best * (1 + min_gain)``, or ``c`` has higher fidelity
  than the best and ``UB(c) >= best * (1 - tie)`` (it could win the near-tie). This
  is what stops raising a family's batch once throughput gains flatten: the
  secant bound then says the next batch can gain less than ``min_gain``.
- **Done** (``next_candidate`` returns None): no candidate that is not ruled out,
  not measured, not running elsewhere and not failed out could still win; or the
  baseline failed for a reason other than memory (the sweep reports it).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune.core import verdict
from autotune.core.record import TrialRecord
from autotune.core.space import Candidate, ParamValue, Space
from autotune.core.units import format_gb

#: Outcomes that mean "device memory": they prove nothing hungrier fits.
MEMORY_OUTCOMES = frozenset({"oom"})
#: Non-memory failures and how many attempts a candidate gets for each.
ATTEMPTS = {
    "config_error": 1,  # deterministic: running it again gives the same error
    "nan": 1,  # a measured run whose loss diverged: speed is irrelevant, memory is known
    "crash": 2,
    "timeout": 2,
    "stalled": 2,
    "host_oom": 2,
    "interrupted": 5,  # Ctrl-C or a dead orchestrator: not the candidate's fault
}
DEFAULT_ATTEMPTS = 2

#: Speed priors: knob -> {(from_value, to_value): max of samples/s(to) / samples/s(from)} at the
#: same other knobs and batch. Physical reasons: checkpointing off only removes the recompute
#: (at most one extra forward, about +33 %; 1.6 leaves margin) and never slows a step; the LoRA
#: optimizer step is tens of milliseconds of a multi-second step in either AdamW (5 % leaves margin;
#: pass looser priors for a full fine-tune, where the optimizer step weighs more).
DEFAULT_SPEED_PRIORS: dict[str, dict[tuple[ParamValue, ParamValue], float]] = {
    "gradient_checkpointing": {(True, False): 1.6, (False, True): 1.05},
    "optimizer": {("adamw8bit", "adamw"): 1.05, ("adamw", "adamw8bit"): 1.05},
}


@dataclass(frozen=True)
class Observation:
    """One trial as the strategy sees it.

    ``outcome`` None means the trial is running elsewhere (never proposed again).
    ``spread`` is relative (0.02 = 2 %): ``step_time_spread_s / step_time_s``.
    ``fits`` None is judged from ``peak_vram_gb`` against the strategy's headroom line.
    """

    candidate: Candidate
    outcome: str | None
    samples_per_s: float | None = None
    peak_vram_gb: float | None = None
    fits: bool | None = None
    spread: float | None = None

    @classmethod
    def from_record(cls, candidate: Candidate, record: TrialRecord) -> Observation:
        """A stored trial as the strategy sees it (a running trial has no outcome yet)."""
        return cls(
            candidate=candidate,
            outcome=None if record.state == "running" else (record.outcome or "crash"),
            samples_per_s=record.samples_per_s,
            peak_vram_gb=record.get("peak_vram_gb"),
            fits=record.get("fits"),
            spread=record.relative_spread,
        )


@dataclass(frozen=True)
class Verdict:
    """Why a candidate was never run, and which trials' candidates proved it."""

    candidate: Candidate
    reason: str
    by: list[Candidate] = field(default_factory=list)
    kind: str = "oom"  # "oom", "over_headroom" or "failed"


@dataclass
class _Point:
    """A candidate's measured result, aggregated over its ok runs."""

    candidate: Candidate
    samples_per_s: float
    spread: float
    peak: float | None
    fits: bool


class Strategy:
    """The search brain: see the module docstring for every rule it follows."""

    def __init__(
        self,
        space: Space,
        baseline: Candidate,
        card_gb: float,
        headroom: float,
        *,
        min_gain: float = 0.02,
        min_noise: float = verdict.MIN_NOISE,
        start_low: bool = True,
        speed_priors: Mapping[str, Mapping[tuple[ParamValue, ParamValue], float]] | None = None,
    ) -> None:
        self.space = space
        self.baseline = space.candidate(baseline.params)
        self.card_gb = card_gb
        self.headroom = headroom
        self.min_gain = min_gain
        self.min_noise = min_noise
        self.start_low = start_low
        self.speed_priors = {
            k: dict(v) for k, v in (DEFAULT_SPEED_PRIORS if speed_priors is None else speed_priors).items()
        }
        grid = list(space)
        if self.baseline not in set(grid):
            grid.insert(0, self.baseline)
        self._grid = grid
        self._pos = {c: space.positions(c) for c in grid}
        self._fam = {c: space.family(c) for c in grid}
        self._bat = {c: space.batch(c) for c in grid}
        base_family = space.family(self.baseline)
        base_params = self.baseline.params
        plain = [k for k in space.knobs if k.name != space.batch_knob]

        def family_key(f: Candidate) -> tuple[float, int, int]:
            fp = f.params
            changed = sum(1 for k in plain if fp[k.name] != base_params[k.name])
            hunger = sum(k.position(fp[k.name]) for k in plain)
            return (hunger, changed, order[f])

        families = [space.family(c) for c in grid]
        order = {f: i for i, f in reversed(list(enumerate(families)))}
        fams = sorted(set(families), key=family_key)
        fams.remove(base_family)
        self._families = [base_family, *fams]
        self._batches = sorted({space.batch(c) for c in grid})

    @property
    def fit_limit_gb(self) -> float:
        return verdict.fit_limit_gb(self.card_gb, self.headroom)

    # -- reading the history -----------------------------------------------------------------
    def _fits(self, obs: Observation) -> bool:
        # Unknown fit (no peak, none recorded): it ran to the end and nobody measured more.
        return verdict.judge_fit(obs.fits, obs.peak_vram_gb, self.fit_limit_gb) is not False

    def _read(self, history: Sequence[Observation]) -> _Knowledge:
        k = _Knowledge()
        runs: dict[Candidate, list[Observation]] = defaultdict(list)
        for obs in history:
            c = self.space.candidate(obs.candidate.params) if obs.candidate in self._pos else obs.candidate
            if obs.outcome is None:
                k.running.add(c)
                continue
            k.seen.add(c)
            if obs.outcome == "ok" and obs.samples_per_s is not None and obs.samples_per_s > 0:
                runs[c].append(obs)
            elif obs.outcome in MEMORY_OUTCOMES:
                k.nofit.setdefault(c, ("oom", "ran out of device memory"))
            else:
                k.failures[c][obs.outcome] += 1
                if obs.outcome == "nan":
                    k.nan.add(c)
                    if obs.peak_vram_gb is not None and not self._fits(obs):
                        k.nofit.setdefault(c, ("over_headroom", self._over(obs.peak_vram_gb)))
        for c, obs_list in runs.items():
            sps = [o.samples_per_s for o in obs_list if o.samples_per_s is not None]
            mean = sum(sps) / len(sps)
            spread = max([o.spread or 0.0 for o in obs_list] + [(max(sps) - min(sps)) / (2 * mean)])
            peaks = [o.peak_vram_gb for o in obs_list if o.peak_vram_gb is not None]
            peak = max(peaks) if peaks else None
            fits = all(self._fits(o) for o in obs_list)
            k.points[c] = _Point(c, mean, spread, peak, fits)
            if not fits:
                k.nofit.setdefault(c, ("over_headroom", self._over(peak)))
        return k

    def _over(self, peak: float | None) -> str:
        shown = format_gb(peak) if peak is not None else "a peak"
        return f"peaked at {shown}, over the headroom line {format_gb(self.fit_limit_gb)}"

    def _exhausted(self, k: _Knowledge, c: Candidate) -> bool:
        """A non-memory failure ran out of attempts (never retried forever)."""
        for outcome, n in k.failures[c].items():
            if n >= ATTEMPTS.get(outcome, DEFAULT_ATTEMPTS):
                return True
        return sum(n for o, n in k.failures[c].items() if o != "interrupted") >= DEFAULT_ATTEMPTS

    # -- verdicts --------------------------------------------------------------------------
    def _dominators(self, k: _Knowledge, c: Candidate) -> list[Candidate]:
        pc = self._pos.get(c) or self.space.positions(c)
        out = []
        for n in k.nofit:
            pn = self._pos.get(n) or self.space.positions(n)
            if all(x >= y for x, y in zip(pc, pn, strict=True)):
                out.append(n)
        return out

    def _failed_below(self, k: _Knowledge, c: Candidate) -> list[Candidate]:
        """Same knobs, smaller batch, failed out for a non-memory reason."""
        fam, b = self._family(c), self._batch(c)
        return [
            f
            for f in k.failures
            if f != c and self._family(f) == fam and self._batch(f) < b and self._exhausted(k, f)
        ]

    def _family(self, c: Candidate) -> Candidate:
        f = self._fam.get(c)
        return f if f is not None else self.space.family(c)

    def _batch(self, c: Candidate) -> int:
        b = self._bat.get(c)
        return b if b is not None else self.space.batch(c)

    def ruled_out(self, history: Sequence[Observation]) -> list[Verdict]:
        """Every candidate never run because real runs proved it cannot fit (or its knobs failed)."""
        return self._ruled_out(self._read(history))

    def _ruled_out(self, k: _Knowledge) -> list[Verdict]:
        verdicts = []
        for c in self._grid:
            if c in k.seen or c in k.running:
                continue
            by = self._dominators(k, c)
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
            failed = self._failed_below(k, c)
            if failed:
                f = failed[0]
                outcomes = ", ".join(sorted(k.failures[f]))
                verdicts.append(
                    Verdict(
                        c, f"the same knobs at a smaller batch failed ({outcomes}): {f}", failed, "failed"
                    )
                )
        return verdicts

    def fits_by_dominance(self, history: Sequence[Observation], candidate: Candidate) -> list[Candidate]:
        """Measured fitting candidates that need at least as much memory as ``candidate``.

        Non-empty means ``candidate`` fits too; it is still run when it could win on speed.
        """
        k = self._read(history)
        c = self.space.candidate(candidate.params)
        return [
            p.candidate
            for p in k.points.values()
            if p.fits and p.candidate in self._pos and self.space.needs_at_least(p.candidate, c)
        ]

    # -- the best so far -------------------------------------------------------------------
    def best(self, history: Sequence[Observation]) -> Observation | None:
        """The fastest fitting finite-loss candidate; near-ties within noise go to higher fidelity."""
        point = self._best(self._read(history))
        if point is None:
            return None
        return Observation(point.candidate, "ok", point.samples_per_s, point.peak, True, point.spread)

    def _best(self, k: _Knowledge) -> _Point | None:
        pool = [
            verdict.Contender(p, p.samples_per_s, p.spread, self.space.fidelity_score(c), i)
            for i, (c, p) in enumerate(k.points.items())
            if p.fits and c not in k.nan
        ]
        best = verdict.winner(pool, self.min_noise)
        return best.item if best is not None else None

    # -- speed upper bounds ----------------------------------------------------------------
    def _margin(self, p: _Point) -> float:
        """Relative uncertainty of a measured median: the run-to-run floor, or a third of the per-step spread."""
        return min(0.5, max(p.spread / 3.0, self.min_noise))

    def _own_bound(self, pts: list[tuple[int, float, float]], b: int) -> float:
        """Upper bound on samples/s at batch ``b`` from the family's own points (b_i, T_i, margin_i)."""
        lows = [0.0]
        for bi, ti, mi in pts:
            if bi <= b:
                lows.append(ti * (1 - mi))
        for i, (b1, t1, m1) in enumerate(pts):
            for b2, t2, m2 in pts[i + 1 :]:
                if b > b2:  # extend the secant to the right with the smallest slope the noise allows
                    slope = (t2 * (1 - m2) - t1 * (1 + m1)) / (b2 - b1)
                    if slope > 0:
                        lows.append(t2 * (1 - m2) + slope * (b - b2))
                elif b < b1:  # extend it to the left with the largest slope
                    slope = (t2 * (1 + m2) - t1 * (1 - m1)) / (b2 - b1)
                    lows.append(t1 * (1 - m1) - max(slope, 0.0) * (b1 - b))
        low = max(lows)
        return b / low if low > 0 else math.inf

    def _bounds(self, k: _Knowledge) -> dict[Candidate, float]:
        """UB(c) for every candidate of the grid (a measured one: its value plus noise)."""
        space = self.space
        by_family: dict[Candidate, list[tuple[int, float, float]]] = defaultdict(list)
        for c, p in k.points.items():
            if c in self._pos:
                b = self._batch(c)
                by_family[self._family(c)].append((b, b / p.samples_per_s, self._margin(p)))
        ub: dict[Candidate, float] = {}
        for c in self._grid:
            point = k.points.get(c)
            if point is not None:
                ub[c] = point.samples_per_s * (1 + self._margin(point))
            else:
                pts = sorted(by_family.get(self._family(c), []))
                ub[c] = self._own_bound(pts, self._batch(c))
        # Relax through the priors and batch monotonicity until nothing tightens.
        neighbours = self._neighbours()
        for _ in range(4 * len(space.knobs) + len(self._batches)):
            changed = False
            for c in self._grid:
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

    def _neighbours(self) -> dict[Candidate, list[tuple[Candidate, float]]]:
        cached: dict[Candidate, list[tuple[Candidate, float]]] | None = getattr(self, "_nb", None)
        if cached is not None:
            return cached
        space = self.space
        grid = set(self._grid)
        nb: dict[Candidate, list[tuple[Candidate, float]]] = {c: [] for c in self._grid}
        for c in self._grid:
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
                b = space.batch(c)
                smaller = [x for x in self._batches if x < b]
                if smaller:
                    other = space.with_batch(space.family(c), smaller[-1])
                    if other in grid:  # step time never falls with batch: sps(b) <= sps(b') * b / b'
                        nb[c].append((other, b / smaller[-1]))
        self._nb = nb
        return nb

    # -- what next -------------------------------------------------------------------------
    def could_win(self, history: Sequence[Observation]) -> dict[Candidate, float]:
        """Every proposable candidate that could still win, with its speed upper bound."""
        k = self._read(history)
        return self._could_win(k, self._proposable(k))

    def _proposable(self, k: _Knowledge) -> list[Candidate]:
        blocked = {v.candidate for v in self._ruled_out(k)}
        return [
            c
            for c in self._grid
            if c not in blocked
            and c not in k.running
            and c not in k.points
            and c not in k.nofit
            and c not in k.nan
            and not self._exhausted(k, c)
        ]

    def _could_win(self, k: _Knowledge, cands: list[Candidate]) -> dict[Candidate, float]:
        best = self._best(k)
        if not cands:
            return {}
        ub = self._bounds(k)
        if best is None:
            return {c: ub[c] for c in cands}
        out = {}
        fid = self.space.fidelity_score(best.candidate)
        for c in cands:
            if ub[c] > best.samples_per_s * (1 + self.min_gain):
                out[c] = ub[c]
            elif self.space.fidelity_score(c) > fid:
                tie = max(best.spread, self.min_noise)
                if ub[c] >= best.samples_per_s * (1 - tie):
                    out[c] = ub[c]
        return out

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        """The next candidate to run, or None when no unmeasured candidate can still win."""
        k = self._read(history)
        base = self.baseline
        if base not in k.seen and base not in k.running:
            return None if self._dominators(k, base) else base
        if base in k.failures and base not in k.points and base not in k.nofit:
            non_memory = {o for o in k.failures[base] if o != "interrupted"}
            if non_memory:
                return None  # a config problem must not burn the night: the sweep reports it
            if not self._exhausted(k, base):
                return base
        could = self._could_win(k, self._proposable(k))
        if not could:
            return None
        for fam in self._families:
            members = sorted((c for c in could if self._family(c) == fam), key=self._batch)
            if members:
                return self._pick_batch(k, fam, members)
        return None  # unreachable: every candidate belongs to a family

    def _pick_batch(self, k: _Knowledge, fam: Candidate, members: list[Candidate]) -> Candidate:
        """Within a family, probe near the largest batch its memory line says fits."""
        space = self.space
        own = sorted(
            (space.batch(c), p.peak)
            for c, p in k.points.items()
            if space.family(c) == fam and p.peak is not None
        )
        ooms = sorted(space.batch(c) for c in k.nofit if space.family(c) == fam)
        if not own and (ooms or self.start_low):
            return members[0]  # the neighbours' line was far off (checkpointing off, say): start low
        line = self._line(k, fam, own, ooms)
        if line is None:
            if own:  # one point and no neighbour to borrow a slope from: measure the next batch up
                above = [c for c in members if space.batch(c) > own[-1][0]]
                return above[0] if above else members[-1]
            return members[0]
        intercept, slope = line
        ceiling = ooms[0] if ooms else math.inf
        predicted = [b for b in self._batches if b < ceiling and intercept + slope * b <= self.fit_limit_gb]
        target = predicted[-1] if predicted else self._batches[0]
        below = [c for c in members if space.batch(c) <= target]
        return below[-1] if below else members[0]

    def _line(
        self, k: _Knowledge, fam: Candidate, own: list[tuple[int, float]], ooms: list[int]
    ) -> tuple[float, float] | None:
        """Peak memory against batch for ``fam``: (intercept, slope), or None when unknown.

        Two own points: their least-squares line. One: a neighbour family's slope, or
        its intercept (whichever predicts more memory: quantization moves the
        intercept, checkpointing the slope), and never a slope the family's own OOMs
        contradict. None: the hungriest nearest neighbour's line.
        """
        if len({b for b, _ in own}) >= 2:
            return _least_squares(own)
        donors = self._donor_lines(k, fam)
        if own:
            b1, p1 = own[-1]
            slopes = [s for _, s in donors] + [(p1 - a) / b1 for a, _ in donors]
            slopes += [(self.card_gb - p1) / (b - b1) for b in ooms if b > b1]
            if not slopes:
                return None
            slope = max(0.0, *slopes)
            return (p1 - slope * b1, slope)
        if not donors:
            return None
        return max(donors, key=lambda line: line[0] + line[1])

    def _donor_lines(self, k: _Knowledge, fam: Candidate) -> list[tuple[float, float]]:
        """Lines of the nearest families (fewest knobs changed) that have two or more points."""
        space = self.space
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
            lines[distance].append(_least_squares(sorted(points)))
        return lines[min(lines)] if lines else []


@dataclass
class _Knowledge:
    """What a history says, read once per call."""

    points: dict[Candidate, _Point] = field(default_factory=dict)
    nofit: dict[Candidate, tuple[str, str]] = field(default_factory=dict)
    failures: defaultdict[Candidate, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    nan: set[Candidate] = field(default_factory=set)
    running: set[Candidate] = field(default_factory=set)
    seen: set[Candidate] = field(default_factory=set)


def _least_squares(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(p for _, p in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    if sxx == 0:
        return (my, 0.0)
    slope = sum((b - mx) * (p - my) for b, p in points) / sxx
    return (my - slope * mx, max(slope, 0.0))
