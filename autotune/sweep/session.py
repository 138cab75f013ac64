"""One run of a sweep (a resume is another run of the same study): setup, loops, conclusion.

For each trial: ask the strategy -> render the candidate with the trainer's adapter into
its own folder -> run it with the runner (own process group, limits) -> read its metrics
-> classify the outcome -> tell the study, with the user attrs the study promises (``core/record.py``). Between
trials the GPU drains back to its idle level.

Why it is built this way:
- The baseline runs first: a config error must not burn the night, and an OOM there means
  nothing the trainer ships fits this card.
- All state lives in the study, so a resume (same command) recomputes the history from it
  and continues; trials a dead orchestrator left RUNNING are ended, marked ``interrupted``
  and run again; finished ones never are.
- Ctrl-C / SIGTERM end the running trial through the runner's stop event, record it
  ``interrupted`` and leave with exit code 130.
- Every card runs its own loop, executor and scheduler; only the sweep that started the
  study concludes it (best config, ``--confirm``, report): workers only run trials and stop
  when nothing is left to run anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TextIO, cast

from autotune.core.strategy import Strategy
from autotune.core.units import format_gb
from autotune.errors import AutotuneError, ClaimLost, SweepInterrupted
from autotune.gpu.nvml import Nvml
from autotune.gpu.probe import VisibleGpu
from autotune.store import generation, urls
from autotune.store.identity import ProcessIdentity
from autotune.store.storage import open_storage, storage_failure
from autotune.store.study import CARD_BYTES_ATTR, CARD_GB_ATTR, GIB, SweepStudy
from autotune.store.urls import redact_url
from autotune.sweep import conclude
from autotune.sweep.executor import TrialExecutor
from autotune.sweep.fitcheck import check_fit
from autotune.sweep.loop import Interrupt, LoopStop, SearchLoop
from autotune.sweep.naming import label
from autotune.sweep.options import SweepOptions, SweepResult
from autotune.sweep.parallel import DEFAULT_LEASE_S, LinePrefixer
from autotune.sweep.progress import Progress
from autotune.sweep.scheduler import ClaimedScheduler, LocalScheduler, Scheduler
from autotune.sweep.setup import StrategyFactory, SweepPlan, plan_sweep, trial_env


class SweepSession:
    """A sweep on this machine: its setup, one search loop per card, then (``concludes``) the conclusion.

    ``pin``: the card the first loop runs its trials on (``CUDA_VISIBLE_DEVICES`` set to its
    UUID); ``siblings``: the other cards of this machine, one loop thread each (``--parallel``);
    ``claims``: False for a study this process runs alone (no claims, no other workers);
    ``concludes``: False for ``autotune worker``, which leaves the best config, the
    confirmation and the report to the sweep that started the study.
    """

    def __init__(
        self,
        opts: SweepOptions,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        nvml: Nvml | bool | None = True,
        pin: VisibleGpu | None = None,
        siblings: Sequence[VisibleGpu] = (),
        lease_s: float = DEFAULT_LEASE_S,
        claims: bool = True,
        concludes: bool = True,
        strategy_factory: StrategyFactory = Strategy,
    ) -> None:
        out = stream or sys.stderr
        self._out, self._out_lock = out, threading.Lock()
        if pin is not None and siblings:
            stream, tty = cast(TextIO, LinePrefixer(out, _prefix(pin), self._out_lock)), False
        self.opts = opts
        self.progress = Progress(stream or sys.stderr, tty=tty)
        self.interrupt = Interrupt()
        self.stop = LoopStop(self.interrupt)
        self._nvml_arg = nvml
        self.pin, self.siblings, self.lease_s = pin, list(siblings), lease_s
        self.claims, self.concludes, self.strategy_factory = claims, concludes, strategy_factory
        self.sibling_errors: list[tuple[VisibleGpu, BaseException]] = []
        self.t0 = time.monotonic()

    def run(self) -> SweepResult:
        with self._signals():
            try:
                return self._run()
            except Exception as exc:
                where = self.opts.storage or urls.default_storage_url(
                    self.opts.workdir.expanduser().resolve()
                )
                failure = storage_failure(exc, where)
                if failure is None:
                    raise
                raise failure from None
            finally:
                self.progress.close()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM set the stop event (the runner ends the trial); main thread only."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, _frame: FrameType | None) -> None:
            if self.interrupt.signum is not None:
                self.progress.line("still ending the running trial (it gets a grace period, then SIGKILL)...")
                return
            self.interrupt.signum = signum
            self.stop.event.set()
            self.progress.line(
                f"{signal.Signals(signum).name}: ending the running trial and recording it as interrupted..."
            )

        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self) -> SweepResult:
        plan = plan_sweep(self.opts, self._nvml_arg, pin=self.pin, strategy_factory=self.strategy_factory)
        scheduler, claimed = self._open(plan)
        executor = TrialExecutor(
            plan,
            scheduler,
            card=plan.card,
            env=trial_env(self.pin),
            progress=self.progress,
            stop=self.stop.event,
            interrupted=self.interrupt.error,
        )
        loop = SearchLoop(plan, scheduler, executor, progress=self.progress, stop=self.stop)
        threads = [self._start_sibling(gpu, plan, claimed) for gpu in self.siblings] if claimed else []
        try:
            stop_reason = loop.run()
        except SweepInterrupted:
            self.stop.event.set()
            self._record_interrupted(scheduler.study)
            raise
        except BaseException as stopped:
            self.stop.event.set()
            if self.concludes:
                _record_stop(scheduler.study, storage_failure(stopped, plan.storage_url) or stopped)
            raise
        finally:
            for t in threads:
                t.join()
            for gpu, exc in self.sibling_errors:
                if not isinstance(exc, SweepInterrupted):  # Ctrl-C: said once, by this worker
                    self.progress.line(f"the worker on {_prefix(gpu).strip()} stopped: {exc}")
        study = scheduler.study
        if not self.concludes:  # a worker leaves the best, confirmation and report to the sweep
            return conclude.result(
                study, plan.study_name, redact_url(plan.storage_url), None, stop_reason, [], self.t0
            )
        return self._conclude(plan, loop, executor, stop_reason)

    def _record_interrupted(self, study: SweepStudy) -> None:
        """``status`` must say this run was interrupted, not repeat the last run's stop reason."""
        name = signal.Signals(self.interrupt.signum).name if self.interrupt.signum else "a stop request"
        try:
            study.set_attr("stop_reason", f"interrupted by {name} (run the same command again to resume)")
        except Exception as exc:  # the study may be what failed; the interrupt is still reported
            self.progress.line(f"the stop reason was not recorded: {exc}")

    def _open(self, plan: SweepPlan) -> tuple[Scheduler, ClaimedScheduler | None]:
        """The study, through this run's scheduler, taken charge of; says what a resume found."""
        opts, card = self.opts, plan.card
        storage = open_storage(plan.storage_url)
        scheduler: Scheduler
        claimed: ClaimedScheduler | None = None
        if self.claims:
            scheduler = claimed = ClaimedScheduler.open(
                storage,
                plan,
                label=f"gpu {self.pin.cuda_index}" if self.pin is not None else "",
                lease_s=self.lease_s,
                on_lost=self.stop.on_lost,
                concludes=self.concludes,
            )
        else:
            scheduler = LocalScheduler.open(storage, plan)
        study = scheduler.study
        generation.check(plan.study_dir, study.trials(), redact_url(plan.storage_url))
        study.mark_folder = plan.study_dir
        me = ProcessIdentity.current()
        for rec in scheduler.begin(me):
            self.progress.line(
                f"trial {rec.number} ({label(rec.params)}) was left running by a stopped sweep: "
                f"recorded as interrupted{' and its processes ended' if rec.killed_pids else ''}; it runs again"
            )
        if "baseline_params" not in study.user_attrs:
            study.set_attr(
                "baseline_params", {**plan.base_params, "gradient_accumulation_steps": plan.base_ga}
            )
        if self.concludes:  # this run's own reason is recorded when it stops (``status``)
            study.set_attr("stop_reason", None)
            study.set_attr("search_left", None)
        study.set_attr("effective_batch", plan.target_effective)
        study.set_attr(CARD_GB_ATTR, plan.card.vram_gb)  # exact (the settings round it): fit constraints
        study.set_attr(CARD_BYTES_ATTR, round(plan.card.vram_gb * GIB))
        done = study.counted_trials()
        fit = check_fit(plan)
        self.progress.line(
            f"autotune sweep: study {plan.study_name!r} in {redact_url(plan.storage_url)}"
            + (f" (resuming: {done} trial{'s' if done != 1 else ''} done)" if done else "")
            + f"; trainer {opts.trainer}, card {card.name}"
            + ("" if card.name.startswith(("emulated", "planned")) else f" ({format_gb(card.vram_gb)})")
            + f": {fit.banner((1 - opts.headroom) * card.vram_gb, opts.headroom)}"
        )
        if (warning := fit.warning()) is not None:
            self.progress.line(warning)
        if plan.knobs_left_out:
            swept = ", ".join(plan.space.names) or "none: the baseline alone runs"
            self.progress.line(
                f"knobs swept: {swept}; not swept, as the command never receives them: "
                f"{', '.join(plan.knobs_left_out)} (name one in the template, or its key in --config, to sweep it)"
            )
        if card.emulation:
            self.progress.line(f"card {card.emulation}")
        if (steps_warning := plan.adapter.steps_warning(plan.baseline, plan.steps)) is not None:
            self.progress.line(steps_warning)
        for change in plan.settings.get("host_changes", ()):
            self.progress.line(f"trials changed for this host: {change}")
        for line in plan.data_warnings():
            self.progress.line(f"data: {line}")
        return scheduler, claimed

    def _conclude(
        self, plan: SweepPlan, loop: SearchLoop, executor: TrialExecutor, stop_reason: str
    ) -> SweepResult:
        """The winner (confirmed with ``--confirm``), what was ruled out, the reports, the result."""
        study = loop.scheduler.study
        best_trial = conclude.pick_best(study, plan.space, plan.strategy)
        if best_trial is not None and plan.opts.confirm and stop_reason == "done":
            best_trial = conclude.confirm(
                study,
                plan.space,
                plan.strategy,
                best_trial,
                steps=plan.steps,
                progress=self.progress,
                limit_reached=loop.limit_reached,
                run=lambda cand, steps, extra: executor.run(cand, role="confirm", steps=steps, extra=extra),
            )
        study.set_attr("best_trial", best_trial)
        study.set_attr("stop_reason", stop_reason)
        study.set_attr("search_left", conclude.search_left(stop_reason, study, plan.space, plan.strategy))
        conclude.record_remeasured(study, self.progress)
        conclude.record_ruled_out(study, plan.space, plan.strategy)
        reports = conclude.write_reports(study, plan.study_dir, self.progress)
        return conclude.result(
            study, plan.study_name, redact_url(plan.storage_url), best_trial, stop_reason, reports, self.t0
        )

    def _start_sibling(self, gpu: VisibleGpu, plan: SweepPlan, root: ClaimedScheduler) -> threading.Thread:
        """Another card of this machine: its own loop, executor, claims and stop, in a thread."""
        progress = Progress(cast(TextIO, LinePrefixer(self._out, _prefix(gpu), self._out_lock)), tty=False)
        stop = LoopStop(self.interrupt)
        self.stop.event.children.append(stop.event)
        scheduler = root.sibling(f"gpu {gpu.cuda_index}", stop.on_lost)
        executor = TrialExecutor(
            plan,
            scheduler,
            card=dataclasses.replace(plan.card, indices=(gpu.nvml_index,)),
            env=trial_env(gpu),
            progress=progress,
            stop=stop.event,
            interrupted=self.interrupt.error,
        )
        loop = SearchLoop(plan, scheduler, executor, progress=progress, stop=stop)

        def run() -> None:
            try:
                loop.run()
            except BaseException as exc:
                self.sibling_errors.append((gpu, exc))
                if not isinstance(exc, (AutotuneError, ClaimLost)):
                    self.stop.event.set()

        t = threading.Thread(target=run, name=f"worker-{_prefix(gpu).strip()}", daemon=True)
        t.start()
        return t


def _record_stop(study: SweepStudy, exc: BaseException) -> None:
    """Why this run stopped before its end, for ``autotune status`` (best effort: the database
    may be what failed)."""
    lines = str(exc).strip().splitlines()
    why = lines[0] if lines else type(exc).__name__
    with contextlib.suppress(Exception):
        study.set_attr("stop_reason", f"stopped early: {why}"[:500])


def _prefix(gpu: VisibleGpu) -> str:
    return f"[gpu {gpu.cuda_index}] "
