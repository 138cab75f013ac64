"""The sweep's conclusion: the winner, its confirmation, what was ruled out, the reports, the result.

A candidate re-measured at the end (a near-tie within the noise, see ``autotune.core.strategy``)
counts as the mean of its runs, for the winner's and the baseline's speed alike; the study
attr ``remeasured`` lists them.

Only the sweep that started a study concludes it; workers leave it to that sweep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.core import verdict
from autotune.core.record import TrialRecord, busy_speed_note
from autotune.core.space import Candidate, Space
from autotune.core.units import plain
from autotune.errors import AutotuneError
from autotune.store import study as st
from autotune.store.recovery import is_interrupted
from autotune.sweep.history import observations
from autotune.sweep.options import CONFIRM_ATTEMPTS, CONFIRM_STEPS_FACTOR, SweepResult
from autotune.sweep.progress import Progress
from autotune.sweep.setup import SearchStrategy

#: Runs the winner's confirmation trial: ``(candidate, steps, extra user attrs)``.
RunConfirmation = Callable[[Candidate, int, dict[str, Any]], FrozenTrial]


def fastest_fitting(study: st.SweepStudy, space: Space) -> FrozenTrial | None:
    """The winner so far by the verdict's rule (the progress view's best); each trial is made a
    contender once per trial as read (``SweepStudy.memo``): the best line is drawn every trial."""
    key = ("contender", tuple(sorted(space.fidelity.items(), key=repr)))
    pool = [
        c
        for t in study.trials((TrialState.COMPLETE,))
        if (c := study.memo(t, key, lambda t: verdict.contender(study.record(t), space.fidelity, None)))
        is not None
    ]
    best = verdict.winner(pool)
    return study.trial(best.item.number) if best is not None else None


def pick_best(study: st.SweepStudy, space: Space, strategy: SearchStrategy) -> int | None:
    """The strategy's winner as a trial number (the latest non-confirm trial of that candidate)."""
    pairs = observations(study, space)
    best = strategy.best([o for _, o in pairs])
    if best is None:
        return None
    cand = best.candidate
    for t, o in pairs:  # its first ok run: re-measures point at it (``remeasure_of``)
        if o.candidate == cand and study.record(t).is_ok:
            return t.number
    return None


def runs_of(study: st.SweepStudy, number: int) -> list[TrialRecord]:
    """Trial ``number`` and its ok re-measures (``remeasure_of``), as records."""
    out = []
    for t in study.trials((TrialState.COMPLETE,)):
        record = TrialRecord.from_trial(t)
        if record.is_ok and (t.number == number or record.get("remeasure_of") == number):
            out.append(record)
    return out


def mean_samples_per_s(study: st.SweepStudy, number: int) -> float | None:
    """Samples/s of trial ``number``'s candidate, the mean over its runs when it was re-measured."""
    sps = [r.samples_per_s for r in runs_of(study, number) if r.samples_per_s is not None]
    return sum(sps) / len(sps) if sps else None


def record_remeasured(study: st.SweepStudy, progress: Progress) -> None:
    """Which candidates were re-measured (a near-tie within the noise), for the report and the log."""
    firsts = sorted(
        {
            int(n)
            for t in study.trials((TrialState.COMPLETE, TrialState.FAIL))
            if isinstance(n := TrialRecord.from_trial(t).get("remeasure_of"), int)
        }
    )
    out = []
    for number in firsts:
        runs = runs_of(study, number)
        sps = [r.samples_per_s for r in runs if r.samples_per_s is not None]
        out.append(
            {
                "trial": number,
                "runs": [r.number for r in runs],
                "samples_per_s": sum(sps) / len(sps) if sps else None,
                "each": sps,
            }
        )
        shown = ", ".join(plain(x, 4) for x in sps)
        progress.line(f"re-measured trial {number}'s candidate ({len(runs)} runs: {shown} samples/s)")
    if out:
        study.set_attr("remeasured", out)


def confirm(
    study: st.SweepStudy,
    space: Space,
    strategy: SearchStrategy,
    best_trial: int,
    *,
    steps: int,
    progress: Progress,
    limit_reached: Callable[[], str | None],
    run: RunConfirmation,
) -> int | None:
    """Re-run the winner longer; a winner that fails its confirmation gives way to the next best."""
    rejected: set[Candidate] = set()
    number: int | None = best_trial
    for _ in range(CONFIRM_ATTEMPTS):
        if number is None:
            return None
        t = study.trial(number)
        cand = space.candidate(t.params)
        done = [
            c
            for c in study.trials((TrialState.COMPLETE, TrialState.FAIL))
            if TrialRecord.from_trial(c).confirm_of == number and not is_interrupted(c)
        ]
        conf = done[-1] if done else None
        if conf is None:
            if (why := limit_reached()) is not None:
                progress.line(f"not confirming trial {number}: {why}")
                return number
            progress.line(f"confirming the winner, trial {number}, with {steps * CONFIRM_STEPS_FACTOR} steps")
            conf = run(cand, steps * CONFIRM_STEPS_FACTOR, {"confirm_of": number})
        confirmation = TrialRecord.from_trial(conf)
        if confirmation.is_ok and confirmation.fits is not False:
            study.set_attr("confirmed_by", conf.number)
            return number
        progress.line(
            f"trial {number}'s confirmation failed ({confirmation.get('reason')}); trying the next best"
        )
        rejected.add(cand)
        pairs = [(t, o) for t, o in observations(study, space) if o.candidate not in rejected]
        nxt = strategy.best([o for _, o in pairs])
        number = None
        if nxt is not None:
            c = nxt.candidate
            for t2, o in reversed(pairs):
                if o.candidate == c and TrialRecord.from_trial(t2).is_ok:
                    number = t2.number
                    break
    return number


def record_ruled_out(study: st.SweepStudy, space: Space, strategy: SearchStrategy) -> None:
    """The candidates never run because trials proved they could not win, for the report."""
    pairs = observations(study, space)
    by_cand: dict[Candidate, int] = {}
    for t, o in pairs:
        by_cand[o.candidate] = t.number
    out = []
    try:
        verdicts = strategy.ruled_out([o for _, o in pairs])
    except Exception:  # the report can live without it
        return
    for v in verdicts:
        out.append(
            {
                "params": dict(v.candidate.params),
                "reason": str(v.reason),
                "by_trials": sorted({by_cand[c] for c in v.by if c in by_cand}),
            }
        )
    study.set_attr("ruled_out", out)


def search_left(why: str, study: st.SweepStudy, space: Space, strategy: SearchStrategy) -> str | None:
    """After a sweep stopped on a limit (``why`` is not ``done``), what its search still had: how many
    candidates could beat the best by their speed bounds, so the user knows whether more trials
    could pay. ``None`` after a search that ended on its own."""
    if why == "done":
        return None
    could = strategy.could_win([o for _, o in observations(study, space)])
    if not could:
        return "nothing left could beat the best: a longer run would not change the winner"
    finite = [b for b in could.values() if math.isfinite(b)]
    unbounded = len(could) - len(finite)
    parts = [f"their bounds up to {plain(max(finite), 4)} samples/s"] if finite else []
    if unbounded:
        parts.append(f"{unbounded} in a family not measured yet")
    return (
        f"{len(could)} candidate(s) could still beat the best ({', '.join(parts)}): "
        "run the same command with a larger limit to search on"
    )


def write_reports(study: st.SweepStudy, study_dir: Path, progress: Progress) -> list[Path]:
    """The study's reports in its folder; a report that cannot be written is a warning, not a failure."""
    from autotune.report.build import write_reports as write

    try:
        written = write(study.study, study_dir)
    except AutotuneError as exc:
        progress.line(f"warning: the report could not be written: {exc}")
        return []
    return [Path(p) for p in written]


def result(
    study: st.SweepStudy, name: str, url: str, best: int | None, why: str, reports: list[Path], t0: float
) -> SweepResult:
    """What ``autotune sweep`` prints: the winner, the baseline's speed, the trials, why it stopped."""
    base_no = study.user_attrs.get("baseline_trial")
    base_sps = mean_samples_per_s(study, base_no) if isinstance(base_no, int) else None
    bt = study.trial(best) if best is not None else None
    counts = study.trial_counts()
    base_record = next(
        (
            TrialRecord.from_trial(t)
            for t in study.trials()
            if isinstance(base_no, int) and t.number == base_no
        ),
        None,
    )
    busy = busy_speed_note(
        TrialRecord.from_trial(bt) if bt else None,
        base_record if base_record is not None and base_record.outcome == "ok" else None,
    )
    return SweepResult(
        study=name,
        storage=url,
        best_trial=best,
        best_params=dict(bt.params) if bt else None,
        best_samples_per_s=mean_samples_per_s(study, bt.number) if bt else None,
        baseline_samples_per_s=base_sps,
        trials_run=counts.finished,
        trials_interrupted=counts.interrupted,
        busy_note=busy,
        stop_reason=why,
        search_left=study.user_attrs.get("search_left"),
        reports=reports,
        wall_s=time.monotonic() - t0,
        best_fit_measured=TrialRecord.from_trial(bt).fit_measured if bt else None,
    )
