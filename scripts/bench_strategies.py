"""The strategies autotune's search is benchmarked against, behind one shape.

Each class takes what ``autotune.core.strategy.Strategy`` takes, ``(space, baseline, card_gb,
headroom)``, and answers ``next_candidate(history)`` (None = done), ``best(history)`` and
``ruled_out(history)`` (always empty: none of them reasons about dominance). So one driver
runs them all, in-process on simulated landscapes or inside the real sweep loop in place of
our strategy (``scripts/bench_sweep.py``).

Where a peer's published procedure leaves a choice open, the choice made here favours the
peer, so that beating it means something:

- ``GridStrategy``: every candidate of the space (quantization x optimizer x checkpointing x
  every batch size up to the maximum), in knob-file order after the baseline.
- ``Ltx2GreedyStrategy``: the LTX-2 trainer's own autotune ("Phase 6" of its agent skill):
  the baseline, then at most 4 more trials, each the current best plus one change in a fixed
  order (quantization off, AdamW, batch 2, batch 4; accumulation is lowered by the sweep).
  It stops at the first OOM. "Step time stops improving" is read per sample (a bigger batch
  always takes longer per step): a change that does not raise samples/s is dropped, and for
  the batch ladder it ends the search. It never touches checkpointing. Its winner is the
  fastest passed trial; here, generously, the fastest that also fits our headroom line.
- ``TpeStrategy``: Optuna's TPE sampler over the same categorical knobs, the baseline as its
  first trial, OOMs and runs over the headroom line told as infeasible through
  ``trial.set_constraint`` (new in Optuna 5; TPE learns nothing from FAIL trials). It has no
  stopping rule of its own, so it gets a trial budget (the benchmark gives it as many trials
  as ours needed on the same landscape). A proposal that was already measured is answered
  from the history without a run.
- ``BatchOnlyStrategy``: DeepSpeed-autotuning style, at the baseline's fixed knobs: a profile
  (the baseline and the next batch size give memory's intercept and slope per sample), the
  predicted largest batch under the fit line, probes at 1.05x, 1.0x and 0.95x of it, a
  binary search between the largest fit and the smallest failure, then batch sizes from the
  smallest up until throughput gains fall below 5 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import TrialState

from autotune.core import verdict
from autotune.core.space import Candidate, ParamValue, Space
from autotune.core.strategy import Observation, Verdict

#: Outcomes that say "too big for the card".
OOM = "oom"


def fits(obs: Observation, fit_limit_gb: float) -> bool:
    """Whether a finished run counts as fitting: explicit ``fits`` first, else its peak on the line."""
    if obs.outcome != "ok" or obs.samples_per_s is None or obs.samples_per_s <= 0:
        return False
    if obs.fits is not None:
        return obs.fits
    return obs.peak_vram_gb is None or obs.peak_vram_gb <= fit_limit_gb


def fastest_fitting(history: Sequence[Observation], fit_limit_gb: float) -> Observation | None:
    """The fastest run that finished and fits (ties: the earliest)."""
    best: Observation | None = None
    for obs in history:
        if fits(obs, fit_limit_gb) and (best is None or (obs.samples_per_s or 0) > (best.samples_per_s or 0)):
            best = obs
    return best


def first_by_candidate(history: Sequence[Observation]) -> dict[Candidate, Observation]:
    """Each candidate's first finished run (a candidate running elsewhere counts as taken)."""
    out: dict[Candidate, Observation] = {}
    for obs in history:
        out.setdefault(obs.candidate, obs)
    return out


class _Base:
    """What every benchmarked strategy shares: the constructor and the headroom rule."""

    name = "base"

    def __init__(
        self, space: Space, baseline: Candidate, card_gb: float, headroom: float, **options: Any
    ) -> None:
        self.space = space
        self.baseline = space.candidate(baseline.params)
        self.card_gb = card_gb
        self.headroom = headroom
        self.configure(**options)

    def configure(self, **options: Any) -> None:
        """A strategy's own options (``make(name, **options)`` binds them); by default it takes none."""
        if options:
            raise TypeError(f"strategy {self.name!r} takes no option(s) {', '.join(sorted(options))}")

    @property
    def fit_limit_gb(self) -> float:
        return verdict.fit_limit_gb(self.card_gb, self.headroom)  # the sweep's own line

    def best(self, history: Sequence[Observation]) -> Observation | None:
        return fastest_fitting(history, self.fit_limit_gb)

    def ruled_out(self, history: Sequence[Observation]) -> list[Verdict]:
        return []

    def could_win(self, history: Sequence[Observation]) -> dict[Candidate, float]:
        return {}  # no speed bounds: these strategies do not say

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        raise NotImplementedError

    def remeasure(self, history: Sequence[Observation]) -> Candidate | None:
        """None of them re-measures a near-tie: each decides on its single runs."""
        return None


class GridStrategy(_Base):
    """Every candidate once: the baseline, then the grid in knob-file order."""

    name = "grid"

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        taken = first_by_candidate(history)
        for cand in (self.baseline, *self.space):
            if cand not in taken:
                return cand
        return None


class Ltx2GreedyStrategy(_Base):
    """The LTX-2 trainer's five-trial greedy: current best plus one change, in a fixed order."""

    name = "ltx2-greedy"
    max_trials = 5

    def _changes(self) -> list[tuple[str, ParamValue]]:
        changes: list[tuple[str, ParamValue]] = []
        names = self.space.names
        if "quantization" in names:
            changes.append(("quantization", "none"))
        if "optimizer" in names:
            changes.append(("optimizer", "adamw"))
        if self.space.batch_knob is not None:
            allowed = set(self.space.batch_values())
            changes += [(self.space.batch_knob, b) for b in (2, 4) if b in allowed]
        return changes

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        taken = first_by_candidate(history)
        base = taken.get(self.baseline)
        if base is None:
            return self.baseline
        if base.outcome != "ok" or not base.samples_per_s:
            return None
        current, current_sps = self.baseline, base.samples_per_s
        used = 1
        for knob, value in self._changes():
            if knob == self.space.batch_knob and self.space.batch(current) >= int(value):
                continue
            proposal = current.replace(**{knob: value})
            if proposal == current or proposal not in self.space:
                continue
            obs = taken.get(proposal)
            if obs is None:
                return proposal if used < self.max_trials else None
            used += 1
            if obs.outcome == OOM:
                return None  # the first OOM ends it
            improved = obs.outcome == "ok" and (obs.samples_per_s or 0.0) > current_sps
            if improved:
                current, current_sps = proposal, float(obs.samples_per_s or 0.0)
            elif knob == self.space.batch_knob or obs.outcome != "ok":
                return None  # step time (per sample) stopped improving, or the run failed
        return None


class TpeStrategy(_Base):
    """Optuna TPE over the knobs; OOMs and over-headroom runs are infeasible, not FAIL."""

    name = "tpe"

    def configure(  # type: ignore[override]
        self, *, budget: int = 12, seed: int = 0, n_startup_trials: int = 5, max_asks: int = 200
    ) -> None:
        """The trial budget (TPE has no stopping rule of its own), the sampler's seed and start."""
        self.budget = budget
        self.max_asks = max_asks
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
        self._study = optuna.create_study(direction="maximize", sampler=sampler)
        self._dists: dict[str, BaseDistribution] = {
            k.name: CategoricalDistribution(list(k.values)) for k in self.space.knobs
        }
        self._told = 0
        self._pending: tuple[optuna.Trial, Candidate] | None = None

    def _tell(self, trial: optuna.Trial, obs: Observation) -> None:
        if obs.outcome == "ok" and obs.samples_per_s:
            over = (obs.peak_vram_gb or 0.0) - self.fit_limit_gb
            trial.set_constraint("memory", over if not fits(obs, self.fit_limit_gb) else 0.0)
            self._study.tell(trial, float(obs.samples_per_s))
        elif obs.outcome == OOM:
            trial.set_constraint("memory", max(1.0, self.card_gb - self.fit_limit_gb))
            self._study.tell(trial, 0.0)
        else:
            self._study.tell(trial, state=TrialState.FAIL)

    def _sync(self, history: Sequence[Observation]) -> None:
        """Tell the sampler every observation it has not seen (in order; deterministic)."""
        for obs in history[self._told :]:
            if obs.outcome is None:
                continue  # running elsewhere: its result comes in a later history
            if self._pending is not None and self._pending[1] == obs.candidate:
                trial = self._pending[0]
                self._pending = None
            else:
                self._study.enqueue_trial(dict(obs.candidate.params), skip_if_exists=False)
                trial = self._study.ask(self._dists)
            self._tell(trial, obs)
        self._told = len(history)
        if self._pending is not None:  # proposed but never run (the driver stopped): forget it
            self._study.tell(self._pending[0], state=TrialState.FAIL)
            self._pending = None

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        taken = first_by_candidate(history)
        if self.baseline not in taken:
            return self.baseline
        self._sync(history)
        if len(taken) >= self.budget:
            return None
        for _ in range(self.max_asks):
            trial = self._study.ask(self._dists)
            cand = self.space.candidate(trial.params)
            known = taken.get(cand)
            if known is None or known.outcome is None:
                if known is None:
                    self._pending = (trial, cand)
                    return cand
                self._study.tell(trial, state=TrialState.FAIL)
                continue
            self._tell(trial, known)  # already measured: answered without a run
        return None  # TPE keeps proposing what it has seen: it has converged


class BatchOnlyStrategy(_Base):
    """DeepSpeed-style batch search at the baseline's knobs: profile, predict, probe, bisect, ladder."""

    name = "batch-only"
    min_gain = 0.05  # stop raising the batch when throughput gains fall below 5 %

    def _grid_at_or_below(self, batch: float, batches: Sequence[int]) -> int | None:
        below = [b for b in batches if b <= batch + 1e-9]
        return below[-1] if below else None

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None:
        space = self.space
        family = space.family(self.baseline)
        b0 = space.batch(self.baseline)
        batches = [b for b in space.batch_values() if b >= b0]
        taken = first_by_candidate(history)
        at = {b: taken.get(space.with_batch(family, b)) for b in batches}

        def cand(b: int) -> Candidate:
            return space.with_batch(family, b)

        base = at[b0]
        if base is None:
            return self.baseline
        if not fits(base, self.fit_limit_gb):
            return None
        # Profile: a second point gives memory's slope per sample.
        above = [b for b in batches if b > b0]
        if not above:
            return None
        b1 = above[0]
        second = at[b1]
        if second is None:
            return cand(b1)
        done = {b: o for b, o in at.items() if o is not None and o.outcome is not None}
        fit_bs = [b for b, o in done.items() if fits(o, self.fit_limit_gb)]
        fail_bs = [b for b, o in done.items() if not fits(o, self.fit_limit_gb)]
        known_fit = max(fit_bs)
        known_fail = min(fail_bs) if fail_bs else math.inf
        if fits(second, self.fit_limit_gb) and base.peak_vram_gb is not None and second.peak_vram_gb:
            slope = (second.peak_vram_gb - base.peak_vram_gb) / (b1 - b0)
            intercept = base.peak_vram_gb - slope * b0
            predicted = (self.fit_limit_gb - intercept) / slope if slope > 0 else float(batches[-1])
            for factor in (1.05, 1.0, 0.95):
                probe = self._grid_at_or_below(predicted * factor, batches)
                if probe is not None and known_fit < probe < known_fail and at[probe] is None:
                    return cand(probe)
        between = [b for b in batches if known_fit < b < known_fail]
        if between:  # binary search for the largest fitting batch
            return cand(between[(len(between) - 1) // 2])
        # Ladder: raise the batch while throughput gains stay at or above 5 %.
        best_sps = 0.0
        for b in batches:
            if b > known_fit:
                break
            obs = at[b]
            if obs is None:
                return cand(b)
            sps = obs.samples_per_s or 0.0
            if not fits(obs, self.fit_limit_gb) or sps < best_sps * (1 + self.min_gain):
                return None
            best_sps = sps
        return None


#: name -> class, in the order the results table shows them (ours is added by the driver).
COMPETITORS: dict[str, type[_Base]] = {
    GridStrategy.name: GridStrategy,
    Ltx2GreedyStrategy.name: Ltx2GreedyStrategy,
    TpeStrategy.name: TpeStrategy,
    BatchOnlyStrategy.name: BatchOnlyStrategy,
}


def make(name: str, **options: Any) -> type[_Base] | Any:
    """The class for ``name`` (with keyword options bound, for TPE's budget and seed)."""
    cls = COMPETITORS[name]
    if not options:
        return cls

    def factory(space: Space, baseline: Candidate, card_gb: float, headroom: float) -> _Base:
        return cls(space, baseline, card_gb, headroom, **options)

    return factory
