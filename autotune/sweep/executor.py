"""One trial, start to end: started in the study, rendered, launched, watched, measured, recorded.

One ``TrialExecutor`` per card a sweep runs trials on: its card (the NVML indices it samples
and drains), its environment (a pinned worker's ``CUDA_VISIBLE_DEVICES``), its progress view
and its stop event. It writes the trial through its scheduler, which decides whether the
write still belongs to it (a shared study's claim).

The launch itself is its ``CardWatch``'s (``sweep.watch``): the process run in a worker thread,
its pid recorded on the trial at once (a resume can end what a dead sweep left running), the card
drained after.
"""

from __future__ import annotations

import statistics
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NoReturn

from optuna.trial import FrozenTrial, TrialState

from autotune.core.outcome import Outcome
from autotune.core.record import TrialRecord
from autotune.core.space import Candidate
from autotune.core.units import plain
from autotune.core.verdict import study_value
from autotune.errors import CandidateRefused, ConfigError, SweepInterrupted, TrialOutputError
from autotune.execution.proctree import MARK_VAR
from autotune.execution.runner import RunLimits, make_trial_dir, output_error
from autotune.store.identity import ProcessIdentity
from autotune.sweep.conclude import fastest_fitting
from autotune.sweep.fitcheck import first_without_peak
from autotune.sweep.measure import measure, one_line, summary
from autotune.sweep.naming import accumulation_for, label
from autotune.sweep.options import DEFAULT_STALL_TIMEOUT_S, DEFAULT_TRIAL_TIMEOUT_S
from autotune.sweep.progress import Progress
from autotune.sweep.samecommand import earlier_same, launch_digest, reused_attrs
from autotune.sweep.scheduler import Scheduler, Step, TrialHandle
from autotune.sweep.setup import Card, SweepPlan
from autotune.sweep.watch import CardWatch


class TrialExecutor:
    """Runs the trials of one card (``card``: its NVML indices; ``env``: added to every trial)."""

    def __init__(
        self,
        plan: SweepPlan,
        scheduler: Scheduler,
        *,
        card: Card,
        env: Mapping[str, str],
        progress: Progress,
        stop: threading.Event,
        interrupted: Callable[[], SweepInterrupted],
    ) -> None:
        self.plan, self.scheduler, self.card, self.env = plan, scheduler, card, dict(env)
        self.progress, self.stop, self.interrupted = progress, stop, interrupted
        self.watch = CardWatch(plan.nvml, card, progress, stop)

    def run(
        self,
        cand: Candidate,
        *,
        role: str,
        step: Step | None = None,
        steps: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> FrozenTrial:
        """Run ``cand`` as one trial and return it finished; raises ``SweepInterrupted`` on a stop."""
        plan, scheduler = self.plan, self.scheduler
        space = plan.space
        params = dict(cand.params)
        # No batch knob in play (a template without {batch_size}): the baseline's batch, unchanged.
        base_bs = max(1, plan.target_effective // max(1, plan.base_ga * plan.num_gpus))
        bs = int(params[space.batch_knob]) if space.batch_knob else base_bs
        ga, effective = accumulation_for(bs, plan.target_effective, plan.num_gpus)
        tag = uuid.uuid4().hex
        me = ProcessIdentity.current()
        attrs = TrialRecord.attrs_of(
            **me.as_attrs(),
            role=role,
            trial_tag=tag,
            gradient_accumulation_steps=ga,
            effective_batch=effective,
            steps=steps or plan.steps,
            **(extra or {}),
        )
        with scheduler.start_trial(step, cand, plan.distributions, attrs) as handle:
            return self._run_started(
                handle, params, role=role, ga=ga, effective=effective, tag=tag, steps=steps
            )

    def _run_started(
        self,
        handle: TrialHandle,
        params: dict[str, Any],
        *,
        role: str,
        ga: int,
        effective: int,
        tag: str,
        steps: int | None,
    ) -> FrozenTrial:
        """The rest of ``run``, once its trial is started: every write of it goes through ``handle``."""
        plan, opts, study = self.plan, self.plan.opts, self.scheduler.study
        trial = handle.trial
        if role == "baseline":  # at once: a kill after it finishes must not make a resume run it again
            study.set_attr("baseline_trial", trial.number)
        trial_dir = plan.study_dir / f"trial-{trial.number:04d}"
        estimate = self._estimate_s()
        self.progress.trial_started(
            trial.number, label(params), estimate, note=f" ({role})" if role != "search" else ""
        )
        attrs_end = TrialRecord.attrs_of(trial_dir=str(trial_dir), log_path=str(trial_dir / "stdout.log"))
        try:
            try:
                make_trial_dir(trial_dir, plan.workdir)
            except OSError as exc:  # a read-only or full study folder: not the candidate's fault
                raise output_error(exc, trial_dir) from None
            spec = plan.adapter.render(
                plan.baseline,
                params,
                gradient_accumulation_steps=ga,
                steps=steps or plan.steps,
                trial_dir=trial_dir,
            )
        except TrialOutputError as exc:
            self._stop_and_raise(handle, attrs_end, exc)
        except (CandidateRefused, ConfigError) as exc:
            attrs_end.update(
                TrialRecord.attrs_of(outcome=Outcome.CONFIG_ERROR.value, reason=one_line(str(exc)))
            )
            self.progress.trial_finished(trial.number, f"config_error: {one_line(str(exc))}")
            return self._finish(handle, attrs_end)
        except BaseException as exc:  # the trainer not found, say: no trial may stay RUNNING
            self._stop_and_raise(handle, attrs_end, exc)
        digest = launch_digest(spec, trial_dir)
        spec = replace(spec, env={**spec.env, MARK_VAR: tag, **self.env})
        attrs_end.update(TrialRecord.attrs_of(command=spec.shell_command(), launch_digest=digest))
        twin = earlier_same(study.trials(), digest, trial.number, study.record) if role == "search" else None
        if twin is not None:  # the very command ran already: never twice in one study
            attrs_end.update(reused_attrs(twin))
            self.progress.trial_finished(trial.number, one_line(str(attrs_end["reason"])))
            return self._finish(handle, attrs_end)
        # Written with the pid when the process starts (one write): a resume needs both together.
        launched = TrialRecord.attrs_of(
            command=attrs_end["command"], trial_dir=str(trial_dir), launch_digest=digest
        )

        limits = RunLimits(
            wall_timeout_s=opts.trial_timeout_s or DEFAULT_TRIAL_TIMEOUT_S,
            stall_timeout_s=opts.stall_timeout_s or DEFAULT_STALL_TIMEOUT_S,
            host_ram_limit_gb=plan.host_ram_gb,
        )
        before = self.watch.memory_used()
        result, error = self.watch.run(spec, trial_dir, limits, handle, launched)
        if isinstance(error, TrialOutputError):
            self._stop_and_raise(handle, attrs_end, error)
        if error is not None:
            attrs_end.update(
                TrialRecord.attrs_of(
                    outcome=Outcome.CRASH.value, reason=one_line(f"could not start: {error}")
                )
            )
            self.progress.trial_finished(trial.number, f"crash: {attrs_end['reason']}")
            self._finish(handle, attrs_end)
            raise error
        assert result is not None
        if result.hook_lines_rejected:
            self.progress.line(
                f"trial {trial.number}: {result.hook_lines_rejected} line(s) of hook.jsonl were not "
                f"signed by the hook and were set aside in {trial_dir / 'hook.rejected.jsonl'}: the "
                "trainer (or another program) wrote them; its step times and peaks come from the "
                "hook's own lines only"
            )
        judged = measure(
            plan.adapter,
            result,
            trial_dir,
            effective,
            card_gb=self.card.vram_gb,
            headroom=opts.headroom,
            # A trainer's whole-card figure is of device 0 (LTX-2 asks nvidia-smi for the
            # index it sees, 0 under a pinned CUDA_VISIBLE_DEVICES): the trial's card only
            # when that is where it runs, or when no NVML says otherwise.
            trainer_card_is_the_trials=not self.card.indices or self.card.indices[0] == 0,
            host_ram_gb=plan.host_ram_gb,
            steps=steps or plan.steps,
        )
        attrs_end.update(judged.attrs)
        finished = self._finish(handle, attrs_end)
        self.progress.trial_finished(trial.number, summary({**dict(trial.user_attrs), **attrs_end}))
        if (no_peak := first_without_peak(study, trial.number, attrs_end)) is not None:
            self.progress.line(no_peak)
        self._update_best_line()
        if result.interrupted or self.stop.is_set():
            raise self.interrupted()
        self.watch.drain(before, opts.drain_timeout_s)
        return finished

    def _stop_and_raise(self, handle: TrialHandle, attrs_end: dict[str, Any], exc: BaseException) -> NoReturn:
        """The trial cannot be prepared, through no fault of its candidate (its folder cannot be
        written, the trainer is not found, Ctrl-C): record the trial ``interrupted`` (a resume runs
        it again, none stays RUNNING) and stop the sweep with the error, which says what to do."""
        reason = one_line(str(exc)) or type(exc).__name__
        attrs_end.update(TrialRecord.attrs_of(outcome=Outcome.INTERRUPTED.value, reason=reason))
        self.progress.trial_finished(handle.trial.number, f"interrupted: {attrs_end['reason']}")
        self._finish(handle, attrs_end)
        raise exc

    @staticmethod
    def _finish(handle: TrialHandle, attrs: Mapping[str, Any]) -> FrozenTrial:
        """The trial's last write: its attrs and the state the verdict gives them (``study_value``)."""
        return handle.finish(attrs, study_value(attrs))

    # between and around trials

    def _estimate_s(self) -> float | None:
        study = self.scheduler.study
        walls = [
            w
            for t in study.trials((TrialState.COMPLETE, TrialState.FAIL))
            if (w := study.memo(t, "wall_s", _wall_s)) is not None
        ]
        return statistics.median(walls) if walls else None

    def _update_best_line(self) -> None:
        best = fastest_fitting(self.scheduler.study, self.plan.space)
        if best is not None:
            record = TrialRecord.from_trial(best)
            unmeasured = "" if record.fit_measured else "; fit not measured"
            self.progress.set_best(
                f"{plain(record.samples_per_s or 0.0)} samples/s (trial {best.number}{unmeasured})"
            )


def _wall_s(trial: FrozenTrial) -> float | None:
    """A finished trial's own wall time, for the estimate (None: interrupted, or not recorded)."""
    record = TrialRecord.from_trial(trial)
    return None if record.is_interrupted else record.wall_s
