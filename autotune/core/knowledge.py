"""What a history of trials says, read once per question the strategy is asked.

A history is a list of ``Observation`` (one per trial); ``read`` turns it into
``Knowledge``: each candidate's measured point (its ok runs aggregated), the
candidates proven not to fit (an OOM, or a peak over the headroom line), the
failures counted per outcome, and which candidates ran or are running. The rules
that use it are in ``autotune.core.strategy``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.core import verdict
from autotune.core.grid import Grid
from autotune.core.record import TrialRecord
from autotune.core.space import Candidate
from autotune.core.units import format_gb

#: Outcomes that mean "device memory": they prove nothing hungrier fits.
MEMORY_OUTCOMES = frozenset({"oom"})
#: Outcomes that mean "host RAM": they prove nothing hungrier in host RAM fits (more offload).
HOST_OUTCOMES = frozenset({"host_oom"})
#: Non-memory failures and how many attempts a candidate gets for each.
ATTEMPTS = {
    "config_error": 1,  # deterministic: running it again gives the same error
    "nan": 1,  # a measured run whose loss diverged: speed is irrelevant, memory is known
    "crash": 2,
    "timeout": 2,
    "stalled": 2,
    "interrupted": 5,  # Ctrl-C or a dead orchestrator: not the candidate's fault
}
DEFAULT_ATTEMPTS = 2


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
    #: Whether the run's peak host RAM stayed under the host line (None: unknown, no evidence).
    host_fits: bool | None = None
    peak_host_gb: float | None = None

    @classmethod
    def from_record(cls, candidate: Candidate, record: TrialRecord) -> Observation:
        """A stored trial as the strategy sees it (a running trial has no outcome yet)."""
        host_fits = record.get("host_fits")
        return cls(
            candidate=candidate,
            outcome=None if record.state == "running" else (record.outcome or "crash"),
            samples_per_s=record.samples_per_s,
            peak_vram_gb=record.get("peak_vram_gb"),
            # ``fits`` is recorded as device and host together: over the host line, the device's
            # own fit is judged again from the peak (a host overrun orders candidates the other way).
            fits=None if host_fits is False else record.get("fits"),
            spread=record.relative_spread,
            host_fits=host_fits if isinstance(host_fits, bool) else None,
            peak_host_gb=record.get("peak_host_rss_gb"),
        )


@dataclass
class Point:
    """A candidate's measured result, aggregated over its ok runs.

    ``spread`` is the per-step spread (relative, the largest of its runs); ``noise`` is how
    far the mean ``samples_per_s`` may sit from the truth: see ``noise_of``.
    """

    candidate: Candidate
    samples_per_s: float
    spread: float
    peak: float | None
    fits: bool
    noise: float = 0.0
    runs: int = 1


#: A run's median moves from run to run by about this share of its per-step spread (half the
#: interquartile range): the median of ~50 steps is itself uncertain (1.25 sigma / sqrt(n)), and
#: clocks, data order and the allocator move a whole run. Measured on the simulated landscapes,
#: whose run-to-run bias is 20-50 % of the per-step noise; real cards sit in that range.
RUN_NOISE_PER_SPREAD = 0.5


def noise_of(spreads: Sequence[float], sps: Sequence[float]) -> float:
    """Relative uncertainty of the mean of ``sps`` (one value per run, each with its per-step spread).

    One run: ``RUN_NOISE_PER_SPREAD`` of its spread. Several: the larger of that and the
    runs' own scatter (sample standard deviation), divided by the square root of the runs:
    a re-measure narrows the noise, which is how a near-tie gets decided.
    """
    n = len(sps)
    mean = sum(sps) / n
    per_run = RUN_NOISE_PER_SPREAD * (sum(spreads) / len(spreads) if spreads else 0.0)
    if n >= 2 and mean > 0:
        scatter = math.sqrt(sum((x - mean) ** 2 for x in sps) / (n - 1)) / mean
        per_run = max(per_run, scatter)
    return per_run / math.sqrt(n)


@dataclass
class Knowledge:
    """What a history says, read once per call."""

    points: dict[Candidate, Point] = field(default_factory=dict)
    nofit: dict[Candidate, tuple[str, str]] = field(default_factory=dict)
    #: Candidates proven not to fit the host's RAM: ``host_oom``, or a peak over the host line.
    host_nofit: dict[Candidate, tuple[str, str]] = field(default_factory=dict)
    failures: defaultdict[Candidate, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    nan: set[Candidate] = field(default_factory=set)
    running: set[Candidate] = field(default_factory=set)
    seen: set[Candidate] = field(default_factory=set)

    def exhausted(self, c: Candidate) -> bool:
        """A non-memory failure ran out of attempts (never retried forever)."""
        failed = self.failures.get(c)  # not ``[c]``: asking must not add an empty count per candidate
        if not failed:
            return False
        for outcome, n in failed.items():
            if n >= ATTEMPTS.get(outcome, DEFAULT_ATTEMPTS):
                return True
        return sum(n for o, n in failed.items() if o != "interrupted") >= DEFAULT_ATTEMPTS


def fits(obs: Observation, fit_limit_gb: float) -> bool:
    """Whether one run fits; unknown fit (no peak, none recorded): it ran to the end and nobody measured more."""
    return verdict.judge_fit(obs.fits, obs.peak_vram_gb, fit_limit_gb) is not False


def over_headroom(peak: float | None, fit_limit_gb: float) -> str:
    """The reason a run that peaked over the headroom line gives for its candidate not fitting."""
    shown = format_gb(peak) if peak is not None else "a peak"
    return f"peaked at {shown}, over the headroom line {format_gb(fit_limit_gb)}"


def read(history: Sequence[Observation], grid: Grid, fit_limit_gb: float) -> Knowledge:
    """The history's ``Knowledge`` (a candidate on the grid is taken as the grid spells it)."""
    k = Knowledge()
    runs: dict[Candidate, list[Observation]] = defaultdict(list)
    for obs in history:
        c = grid.own(obs.candidate) or obs.candidate
        if obs.outcome is None:
            k.running.add(c)
            continue
        k.seen.add(c)
        if obs.outcome == "ok" and obs.samples_per_s is not None and obs.samples_per_s > 0:
            runs[c].append(obs)
        elif obs.outcome in MEMORY_OUTCOMES:
            k.nofit.setdefault(c, ("oom", "ran out of device memory"))
        elif obs.outcome in HOST_OUTCOMES:
            k.host_nofit.setdefault(c, ("host_oom", "ran out of host RAM"))
        else:
            k.failures[c][obs.outcome] += 1
            if obs.outcome == "nan":
                k.nan.add(c)
                if obs.peak_vram_gb is not None and not fits(obs, fit_limit_gb):
                    k.nofit.setdefault(c, ("over_headroom", over_headroom(obs.peak_vram_gb, fit_limit_gb)))
    for c, obs_list in runs.items():
        sps = [o.samples_per_s for o in obs_list if o.samples_per_s is not None]
        mean = sum(sps) / len(sps)
        spreads = [o.spread or 0.0 for o in obs_list]
        spread = max([*spreads, (max(sps) - min(sps)) / (2 * mean)])
        peaks = [o.peak_vram_gb for o in obs_list if o.peak_vram_gb is not None]
        peak = max(peaks) if peaks else None
        fit = all(fits(o, fit_limit_gb) for o in obs_list)
        host_over = [o for o in obs_list if o.host_fits is False]
        k.points[c] = Point(c, mean, spread, peak, fit and not host_over, noise_of(spreads, sps), len(sps))
        if not fit:
            k.nofit.setdefault(c, ("over_headroom", over_headroom(peak, fit_limit_gb)))
        if host_over:
            host_peak = max((o.peak_host_gb for o in host_over if o.peak_host_gb is not None), default=None)
            shown = format_gb(host_peak) if host_peak is not None else "a peak"
            k.host_nofit.setdefault(c, ("over_host", f"peaked at {shown} of host RAM, over the host line"))
    return k
