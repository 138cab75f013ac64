"""The search loop of one card: baseline first, then the strategy's picks, until done or a limit.

Each turn: the limits (Ctrl-C, ``--max-trials``, ``--budget``), then the scheduler's next step.
``propose`` decides it from one snapshot of the study and returns a ``Proposal`` (it writes
nothing): the baseline first and alone (everyone else waits for its verdict), then the finished
baseline to judge (the loop records it and, when it failed, stops every worker with its
diagnosis), then ``strategy.next_candidate`` over the history, with the candidates running
elsewhere in it. When the search is done, ``strategy.remeasure``: a near-tie within the noise
runs again (role ``remeasure``, attr ``remeasure_of``: the candidate's first run), then the
search is asked again, since a changed best can reopen candidates. The scheduler hands the
proposal back in the ``Step`` (with its claim, in a shared study), and the loop acts on it.
The step runs on this card's executor. ``--parallel`` runs one loop per card, each in its own
thread with its own executor and scheduler; they share the stop (Ctrl-C stops them all).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import NO_SPEED_REASON, Outcome
from autotune.core.record import TrialRecord
from autotune.core.space import Candidate
from autotune.core.strategy import Observation
from autotune.core.units import format_duration
from autotune.errors import BaselineFailedError, ClaimLost, SweepInterrupted
from autotune.store.recovery import Reaped
from autotune.store.workers import Waiting
from autotune.sweep.conclude import write_reports
from autotune.sweep.executor import TrialExecutor
from autotune.sweep.history import history
from autotune.sweep.naming import label
from autotune.sweep.progress import Progress
from autotune.sweep.scheduler import Proposal, Scheduler
from autotune.sweep.setup import SweepPlan

_BASELINE_HINTS = {
    Outcome.TIMEOUT.value: "if the trainer is only slow here, raise --trial-timeout (or lower --steps)",
    Outcome.STALLED.value: "if the trainer is silent for long (loading a model), raise --stall-timeout",
    Outcome.CONFIG_ERROR.value: "fix the config (or the command) the trainer rejected",
    Outcome.HOST_OOM.value: "host RAM ran out: free memory, or use a machine with more RAM",
    Outcome.NAN.value: "the loss went NaN with the trainer's own config: check the data and learning rate",
    Outcome.CRASH.value: "fix what the log shows",
}


class FanoutEvent(threading.Event):
    """A loop's stop event: setting it (Ctrl-C) also stops the loops of the other cards."""

    def __init__(self) -> None:
        super().__init__()
        self.children: list[threading.Event] = []

    def set(self) -> None:
        super().set()
        for child in self.children:
            child.set()


@dataclass
class Interrupt:
    """The signal that stops the sweep (set by the main thread's handler), shared by every loop."""

    signum: int | None = None

    def error(self) -> SweepInterrupted:
        name = signal.Signals(self.signum).name if self.signum else "stop"
        return SweepInterrupted(
            f"interrupted by {name}: the running trial was ended and recorded as interrupted; "
            "run the same command again to resume"
        )


@dataclass
class LoopStop:
    """One loop's stop: the event its trials watch, and whether a lost claim (not Ctrl-C) set it."""

    interrupt: Interrupt
    event: FanoutEvent = field(default_factory=FanoutEvent)
    lost: threading.Event = field(default_factory=threading.Event)

    def on_lost(self) -> None:
        """Another worker reaped our running claim: end the trial (the runner stops on ``event``)."""
        self.lost.set()
        threading.Event.set(self.event)  # this loop's trial only, not the other cards' (as Ctrl-C does)


class SearchLoop:
    """Runs one card's trials until the strategy is done or a limit stops it (``run`` says which)."""

    def __init__(
        self,
        plan: SweepPlan,
        scheduler: Scheduler,
        executor: TrialExecutor,
        *,
        progress: Progress,
        stop: LoopStop,
    ) -> None:
        self.plan, self.scheduler, self.executor = plan, scheduler, executor
        self.progress, self.stop = progress, stop
        self.judged_baseline: int | None = None  # the baseline trial ``judge_baseline`` passed

    def run(self) -> str:
        """Run trials until the strategy is done or a limit stops it; returns why it stopped."""
        waiting_said = False
        while True:
            # The study caches its trials until our own next write; other workers' trials show
            # up after a refresh: in ``propose`` (the decision) and after waiting (the limits).
            if (why := self.limit_reached()) is not None:
                self.judge_unjudged_baseline()  # a limit hit by the baseline itself: its verdict first
                return why
            step = self.scheduler.next_step(self.propose, self.say_reaped)
            if step is None:
                return "done"
            if isinstance(step, Waiting):
                if not waiting_said:
                    self.progress.line(
                        f"waiting: {step.in_flight} trial(s) run elsewhere and nothing else can start before "
                        "their results"
                    )
                    waiting_said = True
                self.scheduler.wait(self.stop.event)
                continue
            waiting_said = False
            proposal = step.proposal
            if proposal.baseline is not None:  # a failed baseline stops every worker, with its diagnosis
                self.judge_baseline(proposal.baseline)
            if step.candidate is None:
                continue
            self.stop.lost.clear()
            try:
                self.executor.run(step.candidate, role=proposal.role, step=step, extra=proposal.extra)
            except (ClaimLost, SweepInterrupted) as exc:
                if isinstance(exc, SweepInterrupted) and not (
                    self.stop.lost.is_set() and self.stop.interrupt.signum is None
                ):
                    raise  # Ctrl-C or SIGTERM
                # The claim was lost (cut off from the database longer than the lease): the trial
                # was handed on, nothing of it recorded here. Carry on with the next candidate.
                self.stop.event.clear()
                self.stop.lost.clear()
                what = (
                    exc if isinstance(exc, ClaimLost) else "this worker lost its claim on the running trial"
                )
                self.progress.line(f"{what}; another worker runs that candidate, going on with the next one")

    def propose(self, trials: Sequence[FrozenTrial], in_flight: Sequence[Mapping[str, Any]]) -> Proposal:
        """What to do next, decided from this snapshot only (the one the claim's run number is
        counted on: a baseline seen unfinished in an older read may have finished since)."""
        plan = self.plan
        space, base = plan.space, plan.base_candidate
        done = _finished_baseline(trials, self.scheduler.study.record)
        if done is None:  # the baseline first, alone: everyone else waits for its verdict
            busy = any(
                t.state == TrialState.RUNNING and TrialRecord.from_trial(t).role == "baseline" for t in trials
            ) or any(dict(p) == base.params for p in in_flight)
            return Proposal(None if busy else base, role="baseline")
        if self.judged_baseline != done.number:
            return Proposal(None, baseline=done)
        seen = history(self.scheduler.study, space)  # the snapshot ``trials`` came from
        for p in in_flight:
            seen.append(
                Observation(candidate=space.candidate(dict(p)), outcome=None, samples_per_s=None,
                            peak_vram_gb=None, fits=None, spread=None)
            )  # fmt: skip
        cand = plan.strategy.next_candidate(seen)
        if cand is not None:
            return Proposal(cand)
        # The search is done: a near-tie within the noise is run again (bounded).
        cand = plan.strategy.remeasure(seen)
        if cand is None:
            return Proposal(None)
        return Proposal(cand, role="remeasure", extra={"remeasure_of": first_run_of(trials, cand)})

    def judge_baseline(self, trial: FrozenTrial) -> None:
        """Record the finished baseline on the study and check it (raises when it failed); once."""
        study = self.scheduler.study
        if study.user_attrs.get("baseline_trial") != trial.number:
            study.set_attr("baseline_trial", trial.number)
        self.check_baseline(trial)
        self.judged_baseline = trial.number

    def judge_unjudged_baseline(self) -> None:
        """A finished baseline not judged yet (``--max-trials 1``, a budget spent on it) is judged
        now: a failed one stops the sweep with its diagnosis, not "the limit was reached"."""
        study = self.scheduler.study
        done = _finished_baseline(study.trials(), study.record)
        if done is not None and self.judged_baseline != done.number:
            self.judge_baseline(done)

    def limit_reached(self) -> str | None:
        """Why no further trial may start (None: go on); raises ``SweepInterrupted`` after a stop."""
        if self.stop.event.is_set():
            raise self.stop.interrupt.error()
        opts, study = self.plan.opts, self.scheduler.study
        if opts.max_trials is not None and study.counted_trials() >= opts.max_trials:
            return f"max-trials ({opts.max_trials}) reached"
        if opts.budget_s is not None and study.spent_s() >= opts.budget_s:
            return f"budget ({format_duration(opts.budget_s)}) spent"
        if opts.max_trials is not None:
            running = self.scheduler.running()
            if running and study.counted_trials() + running >= opts.max_trials:
                return f"max-trials ({opts.max_trials}) reached (counting the {running} running)"
        return None

    def check_baseline(self, trial: FrozenTrial) -> None:
        """A baseline that did not finish ok stops the sweep, saying why and what to do."""
        record = TrialRecord.from_trial(trial)
        outcome, reason, log = record.outcome, record.reason, record.get("log_path") or ""
        card = self.executor.card
        if outcome == Outcome.OK.value:
            return
        more, less = self.plan.space.offload_room(self.plan.base_candidate)
        if outcome == Outcome.OOM.value and more:
            self.progress.line(
                "the baseline ran out of device memory; more offload is tried (it costs host RAM)"
            )
            return
        if outcome == Outcome.HOST_OOM.value and less:
            self.progress.line(
                "the baseline ran out of host RAM; less offload is tried (it costs device memory)"
            )
            return
        if outcome == Outcome.OOM.value:
            if self.plan.opts.allow_extra_savers:
                self.progress.line(
                    "the baseline ran out of memory; --allow-extra-savers is on, so savers beyond it are tried"
                )
                return
            write_reports(self.scheduler.study, self.plan.study_dir, self.progress)
            raise BaselineFailedError(
                f"the baseline (trial {trial.number}, the trainer's own config) ran out of memory on this "
                f"{card.name} ({card.vram_gb:.1f} GB): nothing the trainer ships fits this card. "
                f"{reason}. What could: {_more_savers(self.plan.settings)}, or a card with more memory. "
                "Log: " + str(log)
            )
        write_reports(self.scheduler.study, self.plan.study_dir, self.progress)
        hint = _BASELINE_HINTS.get(str(outcome), "see the log for why")
        if reason == NO_SPEED_REASON:  # it ran clean: nothing in the log to fix
            hint = "give autotune a step time as that says (docs/trainers/command.md)"
        else:
            hint += self._start_values_hint(trial)
        raise BaselineFailedError(
            f"the baseline (trial {trial.number}) failed with outcome {outcome}: {reason.rstrip('.')}. "
            f"No relaxation can fix that, so the sweep stops here: {hint}; then start a new study "
            f"with --study NAME. Log: {log}"
        )

    def _start_values_hint(self, trial: FrozenTrial) -> str:
        """A ``--cmd`` baseline that ran with autotune's starting values (no ``--baseline``, no
        ``--config``) may have failed for them, not for the script: say how to give its own."""
        plan = self.plan
        crashed = TrialRecord.from_trial(trial).outcome == Outcome.CRASH.value
        if not crashed or not plan.adapter.traits.takes_template or plan.opts.config is not None:
            return ""
        if "baseline" in (plan.settings.get("trainer_options") or {}):
            return ""
        return (
            f" (it ran with autotune's starting values, {label(trial.params)}: if your script needs "
            "others, e.g. a BatchNorm needs more than one sample per batch, give them with --baseline "
            "NAME=VALUE, such as --baseline batch_size=16)"
        )

    def say_reaped(self, r: Reaped) -> None:
        """A dead worker's trial was failed (its leftover processes here ended first): say so."""
        ended = f"; its leftover processes ({', '.join(map(str, r.killed))}) were ended" if r.killed else ""
        self.progress.line(f"trial {r.number} ({label(r.params)}) {r.reason}{ended}")


def first_run_of(trials: Sequence[FrozenTrial], cand: Candidate) -> int | None:
    """The number of the first finished ok run of ``cand``: what a re-measure re-runs."""
    for t in trials:
        if t.state == TrialState.COMPLETE and t.params == cand.params and TrialRecord.from_trial(t).is_ok:
            return t.number
    return None


def _finished_baseline(
    trials: Sequence[FrozenTrial], record_of: Callable[[FrozenTrial], TrialRecord]
) -> FrozenTrial | None:
    """The baseline trial once it finished (not interrupted): decided by the trials, not an attr."""
    for t in trials:
        record = record_of(t)
        if t.state.is_finished() and record.role == "baseline" and not record.is_interrupted:
            return t
    return None


def _more_savers(settings: Mapping[str, Any]) -> str:
    """What saves more memory than the baseline, among the knobs the sweep has (no quantization
    advice to a trainer that has no quantization knob)."""
    knobs = [k for k in settings.get("knobs") or [] if isinstance(k, Mapping)]
    held = settings.get("held_back")
    held = held if isinstance(held, Mapping) else {}
    savers = []
    for k in knobs:  # the fidelity knobs' values held back below the baseline's, then extra savers
        values = dict.fromkeys([*(held.get(k.get("name")) or []), *(k.get("extra_savers") or [])])
        if values:
            savers.append(f"{k.get('name')} {', '.join(map(str, values))}")
    if savers:
        return f"--allow-extra-savers tries savers beyond the baseline ({'; '.join(savers)})"
    return "a knob of the trainer that saves memory (for --cmd: declared with --knob, saving values first)"
