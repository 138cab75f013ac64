"""What fits, the judged peak, throughput and the winner: decided here and nowhere else.

Why one module: the sweep, its strategy, ``autotune status``, the progress line
and the report each name a winner. With one rule they name the same one.

- **Judged peak**: the larger of the trainer's own peak and autotune's (either may
  miss a short peak).
- **Fits**: a judged peak at most ``(1 - headroom) * card_gb``, and a host RAM peak (the trial's
  process tree) at most ``(1 - headroom) * host_ram_gb`` when a host line is set (``host_fits``);
  a trial whose fit was recorded keeps it; with no peak and no record, fit is unknown (``None``), which
  is no evidence against it.
- **May win**: ran ok, has a throughput, does not not-fit, and is not a
  confirmation re-run (those confirm another trial's candidate).
- **Winner**: the fastest; then every contender within noise of it (a near-tie:
  the slower at least ``1 - max(noise of either, MIN_NOISE)`` of the faster) is
  considered, and the highest fidelity among them wins, then the fastest, then
  the earliest.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from autotune.core.metrics import Readings, TrialMetrics, merge_metrics
from autotune.core.outcome import OomDetails, Outcome, unranked
from autotune.core.record import TrialRecord
from autotune.core.space import fidelity_score
from autotune.core.timing import too_short_text
from autotune.core.units import plain

#: Run-to-run noise floor for near-ties (relative: 0.015 is 1.5 %), the strategy's ``min_noise``.
MIN_NOISE = 0.015
#: Tolerance of the fit line: a peak equal to the limit, rounded, still fits.
_EPSILON_GB = 1e-9

T = TypeVar("T")


# --- fit and measures -----------------------------------------------------------------------------


#: The metrics' figures a trial stores as read, each under its own name.
STORED_AS_READ = (
    "step_time_s", "step_time_spread_s", "trainer_peak_vram_gb", "measured_peak_vram_gb",
    "trainer_step_time_s", "trainer_samples_per_s",
)  # fmt: skip


def fit_limit_gb(card_gb: float, headroom: float) -> float:
    """The most peak VRAM a config may use and still count as fitting."""
    return (1.0 - headroom) * card_gb


def judge_fit(recorded: bool | None, peak_gb: float | None, limit_gb: float | None) -> bool | None:
    """A recorded fit as it is; else the peak against the limit; ``None`` when neither is known."""
    if recorded is not None:
        return recorded
    if peak_gb is None or limit_gb is None:
        return None
    return peak_gb <= limit_gb + _EPSILON_GB


def fits(peak_gb: float | None, card_gb: float, headroom: float) -> bool | None:
    """Whether ``peak_gb`` fits a card of ``card_gb`` keeping ``headroom`` free (``None``: no peak)."""
    return judge_fit(None, peak_gb, fit_limit_gb(card_gb, headroom))


#: The least an unknown fit counts over the line, so it is never feasible even with no headroom.
_UNKNOWN_OVER_GB = 0.001


def fit_constraint(fit: bool | None, peak_gb: float | None, limit_gb: float, card_gb: float) -> float:
    """Optuna's constraint value for fit: GB of judged peak above the headroom line (feasible <= 0).

    Why: Optuna's own tools (``study.best_trial``, ``optuna best-trial``, the dashboard,
    constrained samplers) know fit only through this number. ``fit`` (the verdict's, as
    recorded) decides the side of zero, so Optuna never disagrees with autotune on what fits;
    the value says by how much. An unknown fit is not a fit: it counts as the most a run that
    finished could have been over (the card less the line), and never as feasible.
    """
    if fit is None or (fit is False and peak_gb is None):
        return round(max(card_gb - limit_gb, _UNKNOWN_OVER_GB), 6)
    if peak_gb is None:  # recorded as fitting, with no peak kept
        return 0.0
    over = peak_gb - limit_gb
    return round(min(over, 0.0) if fit else max(over, _UNKNOWN_OVER_GB), 6)


#: The trainer's and our figures differ "by more than the noise" past this (relative): then the
#: report names both, and a trainer's larger peak is judged unless ours saw every phase.
DISAGREE = 0.10


def judged_peak(metrics: TrialMetrics, *, trainer_card_is_the_trials: bool = True) -> float | None:
    """The peak VRAM that fit is judged on: the trial's own.

    Ours (the hook's ``max_memory_reserved`` and NVML's per-process memory of the trial's tree)
    and a trainer's own per-process figure: the larger (either may miss a peak). A trainer figure
    of the whole card (LTX-2's nvidia-smi ``memory.used``: other processes included, sampled
    sparsely, and of device 0, which a pinned worker's trial may not be on) is judged when nothing
    of ours exists and ``trainer_card_is_the_trials``, and when it exceeds ours by more than
    ``DISAGREE`` while ours is not known to cover every phase (``measured_peak_covers_all``: the
    hook on CUDA or NVML per process): a counter that saw nothing never hides a trainer's 34 GB.
    """
    ours = metrics.measured_peak_vram_gb
    trainer = metrics.trainer_peak_vram_gb
    if trainer is not None and metrics.trainer_peak_device_wide:
        if ours is None:
            return trainer if trainer_card_is_the_trials else None
        above = trainer > ours * (1.0 + DISAGREE)
        return (
            trainer if above and not metrics.measured_peak_covers_all and trainer_card_is_the_trials else ours
        )
    peaks = [p for p in (trainer, ours) if p is not None]
    return max(peaks) if peaks else None


def peak_disagreement(trainer_gb: float | None, ours_gb: float | None) -> bool:
    """Whether the trainer's peak exceeds ours by more than ``DISAGREE`` (the report names both)."""
    return trainer_gb is not None and ours_gb is not None and trainer_gb > ours_gb * (1.0 + DISAGREE)


def speed_disagreement(trainer_sps: float | None, ours_sps: float | None) -> float | None:
    """The trainer's samples/s relative to ours (-0.2: 20 % under) when they differ by more than
    ``DISAGREE``; ``None`` when they agree or one is missing."""
    if not trainer_sps or not ours_sps or trainer_sps <= 0 or ours_sps <= 0:
        return None
    rel = trainer_sps / ours_sps - 1.0
    return rel if abs(rel) > DISAGREE else None


def combine(readings: Readings) -> TrialMetrics:
    """One trial's metrics from its readings: the one rule for which source decides, every trainer.

    - Speed: the hook's steady per-optimizer-step times whenever the hook timed the run (CUDA
      synchronized, every step, an optimizer step each); else the trainer's own. A trainer's step
      figure may time one micro-step x GA, be rounded, skip the synchronize or average in the
      warm-up: it is kept beside ours (``trainer_step_time_s``, ``trainer_samples_per_s``).
    - Samples per optimizer step: the hook's loader count where it is right
      (``loader_count_right``), else the effective batch the trial was rendered with.
    - The trainer's samples/s: its own stated figure (a metrics file, DeepSpeed's samples/sec),
      else the effective batch over its step time.
    - Everything else field by field, the hook's first when it timed the run (``merge_metrics``).
    """
    hook, own, batch = readings.hook, readings.trainer, readings.effective_batch
    own_sps = _positive(own.samples_per_s)
    if own_sps is None and batch and _positive(own.step_time_s):
        own_sps = batch / float(own.step_time_s)  # type: ignore[arg-type]
    counted = _positive(hook.samples_per_step) if readings.loader_count_right else None
    if _positive(hook.step_time_s):
        merged = merge_metrics(hook, own)
        per_step = counted or batch
        merged.samples_per_s = per_step / float(hook.step_time_s) if per_step else None  # type: ignore[arg-type]
        merged.timed_by = "hook"
    else:
        merged = merge_metrics(own, hook)
        step = _positive(own.step_time_s)
        merged.samples_per_s = counted / step if counted and step and own.samples_per_s is None else own_sps
        merged.timed_by = "trainer" if merged.samples_per_s is not None else None
    merged.trainer_step_time_s = _positive(own.step_time_s)
    merged.trainer_samples_per_s = own_sps
    return merged


def samples_per_s(metrics: TrialMetrics, effective_batch: float) -> float | None:
    """Throughput: the combined figure (``combine``), else samples per optimizer step over the step time."""
    if metrics.samples_per_s is not None and metrics.samples_per_s > 0:
        return float(metrics.samples_per_s)
    if metrics.step_time_s is not None and metrics.step_time_s > 0:
        return effective_batch / metrics.step_time_s
    return None


def _positive(value: float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def measured_attrs(
    outcome: Outcome,
    reason: str,
    metrics: TrialMetrics,
    effective_batch: int,
    card_gb: float,
    headroom: float,
    *,
    peak_host_rss_gb: float | None = None,
    oom: OomDetails | None = None,
    trainer_card_is_the_trials: bool = True,
    host_ram_gb: float | None = None,
) -> dict[str, Any]:
    """The attrs a finished trial is stored with: how it ended, what it measured, whether it fits.

    A run that ended ok but left no step time or throughput is a crash: nothing can
    rank it. Fit is judged only for an ok run; non-finite figures are left out.
    """
    sps = samples_per_s(metrics, effective_batch)
    peak = judged_peak(metrics, trainer_card_is_the_trials=trainer_card_is_the_trials)
    attrs = TrialRecord.attrs_of(outcome=outcome.value, reason=reason)
    figures = TrialRecord.attrs_of(
        samples_per_s=sps,
        peak_vram_gb=peak,
        peak_host_rss_gb=peak_host_rss_gb,
        **{name: getattr(metrics, name) for name in STORED_AS_READ},
    )
    attrs.update({k: round(float(v), 6) for k, v in figures.items() if v is not None and math.isfinite(v)})
    if metrics.timed_by is not None and sps is not None:
        attrs.update(TrialRecord.attrs_of(timed_by=metrics.timed_by))
    if peak_disagreement(metrics.trainer_peak_vram_gb, metrics.measured_peak_vram_gb):
        attrs.update(TrialRecord.attrs_of(peak_disagrees=True))
    if outcome == Outcome.OK and (unmeasured := unranked(metrics)) is not None:
        attrs.update(TrialRecord.attrs_of(outcome=unmeasured.outcome.value, reason=unmeasured.reason))
    for key, count in (("steps_run", metrics.steps_run), ("steady_steps", metrics.steady_steps)):
        if isinstance(count, int) and count >= 0:
            attrs[key] = count
    if (
        attrs["outcome"] == Outcome.OK.value and sps is not None
    ):  # not one the nothing-measured rule made a crash
        steady = metrics.steady_steps
        short = too_short_text(steady, metrics.steps_run) if steady is not None else None
        if notes := [n for n in (reason, metrics.timing_note, short) if n]:
            attrs.update(TrialRecord.attrs_of(reason="; ".join(notes)))
    if sps is not None and "step_time_spread_s" not in attrs:
        attrs.update(TrialRecord.attrs_of(spread_unknown=True))  # one figure: its noise is not invented
    if peak is not None:
        attrs.update(TrialRecord.attrs_of(headroom_gb=round(card_gb - peak, 4)))
    if TrialRecord(-1, attrs=attrs).is_ok:
        device_fits = fits(peak, card_gb, headroom)
        host_fits = fits(peak_host_rss_gb, host_ram_gb, headroom) if host_ram_gb is not None else None
        attrs.update(TrialRecord.attrs_of(fits=False if host_fits is False else device_fits))
        if host_fits is not None:
            attrs.update(TrialRecord.attrs_of(host_fits=host_fits))
    if outcome == Outcome.OOM and oom is not None:
        details = TrialRecord.attrs_of(
            oom_tried_gb=oom.tried_gb, oom_free_gb=oom.free_gb, oom_total_gb=oom.total_gb
        )
        attrs.update({k: round(float(v), 4) for k, v in details.items() if v is not None})
    return attrs


#: A trial whose claimed speed would fit its steps into less than this share of its wall time is
#: implausible: no trainer spends 99.9 % of a short run outside its steps.
_IMPLAUSIBLE_SHARE = 1e-3
#: Outcomes after which a speed figure means nothing (the step that would be timed never ran).
_NO_SPEED = (Outcome.OOM, Outcome.HOST_OOM)


@dataclass(frozen=True)
class RunEnd:
    """What the runner saw of a trial's end: the verdict's input beside the metrics read."""

    returncode: int | None
    signal: int | None = None
    timed_out: bool = False
    stalled: bool = False
    interrupted: bool = False
    output: str = ""  # the output the outcome is judged on (stdout and stderr, tails)
    host_over_gb: float | None = None  # the host RAM line the runner ended it for passing
    wall_s: float | None = None
    steps: int | None = None  # optimizer steps the trial was rendered with
    peak_host_rss_gb: float | None = None
    nvml_peak_gb: float | None = None  # NVML's peak of the trial's processes
    nvml_per_process: bool = False  # that peak is per process (else the device's)
    busy: str | None = None


@dataclass(frozen=True)
class Judgement:
    """How a trial ended and what is stored: ``value`` is the study value (COMPLETE with it, FAIL
    when ``None``), decided here and nowhere else."""

    outcome: Outcome
    reason: str
    metrics: TrialMetrics
    attrs: dict[str, Any]
    value: float | None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def implausible_speed(metrics: TrialMetrics, effective_batch: float, run: RunEnd) -> str | None:
    """Why the trial's samples/s cannot be true, or ``None``: its steps would have taken less than
    ``_IMPLAUSIBLE_SHARE`` of the wall time it ran, or it is far past the trainer's other figures
    (its own steps/s, its step time)."""
    sps = metrics.samples_per_s
    if sps is None or sps <= 0:
        return None
    steps, wall = run.steps, run.wall_s
    if steps and wall and effective_batch and steps * effective_batch / sps < _IMPLAUSIBLE_SHARE * wall:
        return (
            f"implausible speed: {plain(sps)} samples/s would train its {steps} steps of {effective_batch:g} "
            f"samples in {steps * effective_batch / sps:.3g} s of the {wall:.3g} s it ran"
        )
    hooked = metrics.timed_by == "hook"
    others = [  # the figures beside the one that decided (never that one again)
        f
        for f in (
            metrics.steps_per_s * effective_batch if metrics.steps_per_s and effective_batch else None,
            effective_batch / metrics.step_time_s
            if metrics.step_time_s and effective_batch and not hooked
            else None,
            metrics.trainer_samples_per_s if hooked else None,
        )
        if f
    ]
    if others and sps > 100.0 * max(others):
        return f"implausible speed: {plain(sps)} samples/s is over 100x the trainer's other figures ({plain(max(others))})"
    return None


def judge(
    run: RunEnd,
    metrics: TrialMetrics,
    effective_batch: int,
    card_gb: float,
    headroom: float,
    *,
    trainer_card_is_the_trials: bool = True,
    host_ram_gb: float | None = None,
) -> Judgement:
    """A trial judged once: its outcome (``outcome.explain``), its speed, its peak and fit, the
    attrs it is stored with and its study value."""
    from autotune.core import outcome as oc

    ours = [p for p in (metrics.measured_peak_vram_gb, run.nvml_peak_gb) if p is not None]
    metrics.measured_peak_vram_gb = max(ours) if ours else None
    if run.nvml_peak_gb is not None and run.nvml_per_process:
        metrics.measured_peak_covers_all = True
    why = oc.explain(
        run.returncode,
        run.signal,
        timed_out=run.timed_out,
        stalled=run.stalled,
        interrupted=run.interrupted,
        output=run.output,
        metrics=metrics,
        host_over_gb=run.host_over_gb,
    )
    outcome, reason = Outcome(why.outcome), _one_line(str(why.reason))
    if outcome in _NO_SPEED:  # an OOM row shows no speed: the steps it would time never finished
        metrics.step_time_s = metrics.step_time_spread_s = metrics.samples_per_s = None
        metrics.trainer_step_time_s = metrics.trainer_samples_per_s = None
    suspect = implausible_speed(metrics, effective_batch, run) if outcome == Outcome.OK else None
    if suspect is not None:
        outcome, reason = Outcome.CRASH, suspect
    attrs = measured_attrs(
        outcome,
        reason,
        metrics,
        effective_batch,
        card_gb,
        headroom,
        peak_host_rss_gb=run.peak_host_rss_gb,
        oom=oc.parse_oom(run.output) if outcome == Outcome.OOM else None,
        trainer_card_is_the_trials=trainer_card_is_the_trials,
        host_ram_gb=host_ram_gb,
    )
    if run.busy:
        attrs.update(TrialRecord.attrs_of(busy_host=_one_line(run.busy)))
    if run.wall_s is not None:
        attrs.update(TrialRecord.attrs_of(wall_s=round(run.wall_s, 3)))
    record = TrialRecord(-1, attrs=attrs)
    return Judgement(Outcome(str(record.outcome)), str(record.reason), metrics, attrs, study_value(attrs))


def study_value(attrs: Mapping[str, Any]) -> float | None:
    """The study value of a trial finished with ``attrs``: its samples/s when it ran ok and was
    measured (COMPLETE), else ``None`` (FAIL). Every finished trial's state is decided here: one
    judged now, one that reuses an earlier twin's result, one that never ran."""
    record = TrialRecord(-1, attrs=attrs)
    sps = record.samples_per_s
    return sps if record.is_ok and sps is not None and math.isfinite(sps) and sps > 0 else None


def record_fits(record: TrialRecord, limit_gb: float | None) -> bool | None:
    """A stored trial's fit: as recorded, else judged from its peak."""
    return judge_fit(record.fits, record.peak_vram_gb, limit_gb)


def may_win(record: TrialRecord, limit_gb: float | None) -> bool:
    """Ran ok, measured, not over the line, and not a confirmation re-run."""
    return (
        record.outcome == Outcome.OK.value
        and record.confirm_of is None
        and record.samples_per_s is not None
        and record_fits(record, limit_gb) is not False
    )


# --- the winner -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender(Generic[T]):
    """One trial or candidate that may win: its speed, relative noise, fidelity and age."""

    item: T
    samples_per_s: float
    noise: float = 0.0  # relative: 0.02 is 2 %
    fidelity: int = 0  # knobs at their preferred value
    order: int = 0  # earlier (smaller) wins a full tie


def near_tie(a: Contender[Any], b: Contender[Any], min_noise: float = MIN_NOISE) -> bool:
    """Whether the slower of two is within the noise of the faster."""
    lo, hi = sorted((a.samples_per_s, b.samples_per_s))
    return lo >= hi * (1.0 - max(a.noise, b.noise, min_noise))


def winner(contenders: Sequence[Contender[T]], min_noise: float = MIN_NOISE) -> Contender[T] | None:
    """The fastest contender, near-ties (within noise) going to the higher fidelity."""
    if not contenders:
        return None
    top = max(contenders, key=lambda c: (c.samples_per_s, c.fidelity, -c.order))
    near = [c for c in contenders if near_tie(c, top, min_noise)]
    return max(near, key=lambda c: (c.fidelity, c.samples_per_s, -c.order))


def beaten_on_fidelity(
    best: Contender[T], contenders: Sequence[Contender[T]], min_noise: float = MIN_NOISE
) -> Contender[T] | None:
    """The fastest contender faster than ``best`` but within its noise: the near-tie fidelity decided."""
    faster = [c for c in contenders if c is not best and c.samples_per_s > best.samples_per_s]
    if not faster:
        return None
    top = max(faster, key=lambda c: (c.samples_per_s, -c.order))
    return top if near_tie(top, best, min_noise) else None


# --- the winner among stored trials ---------------------------------------------------------------


def contenders(
    records: Iterable[TrialRecord], fidelity: Mapping[str, Any], limit_gb: float | None
) -> list[Contender[TrialRecord]]:
    """The trials that may win, as contenders (noise: each trial's own step-time spread)."""
    return [c for r in records if (c := contender(r, fidelity, limit_gb)) is not None]


def contender(
    r: TrialRecord, fidelity: Mapping[str, Any], limit_gb: float | None
) -> Contender[TrialRecord] | None:
    """One trial as a contender, or None when it may not win (``may_win``)."""
    if not may_win(r, limit_gb):
        return None
    sps = r.samples_per_s
    assert sps is not None  # may_win checked it
    return Contender(r, sps, r.relative_spread or 0.0, fidelity_score(r.params, fidelity), r.number)


def pick_winner(
    records: Iterable[TrialRecord],
    fidelity: Mapping[str, Any],
    limit_gb: float | None,
    min_noise: float = MIN_NOISE,
) -> tuple[TrialRecord | None, TrialRecord | None]:
    """(the winning trial, the faster trial it beat on fidelity or None) among stored trials."""
    pool = contenders(records, fidelity, limit_gb)
    best = winner(pool, min_noise)
    if best is None:
        return None, None
    beaten = beaten_on_fidelity(best, pool, min_noise)
    return best.item, beaten.item if beaten is not None else None


def beaten_by_fidelity(
    best: TrialRecord,
    records: Iterable[TrialRecord],
    fidelity: Mapping[str, Any],
    limit_gb: float | None,
    min_noise: float = MIN_NOISE,
) -> TrialRecord | None:
    """For a winner picked elsewhere (the sweep's own): the faster trial within its noise, if any."""
    pool = contenders(records, fidelity, limit_gb)
    mine = next((c for c in pool if c.item.number == best.number), None)
    if mine is None:
        sps = best.samples_per_s
        if sps is None:
            return None
        mine = Contender(
            best, sps, best.relative_spread or 0.0, fidelity_score(best.params, fidelity), best.number
        )
    beaten = beaten_on_fidelity(mine, pool, min_noise)
    return beaten.item if beaten is not None else None
