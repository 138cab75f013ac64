"""Sweeps shared by several workers: every GPU of a machine, many machines on one study.

Every ``autotune sweep`` is a worker of its study: it claims each candidate before it
creates the trial (``autotune.store.claims``), renews that claim while the trial runs, and
writes the result only while the claim still holds. So a second worker joining the same
study (``autotune worker`` on another machine, or one thread per card with
``--parallel``) never starts a candidate another one runs or ran, the strategy sees the
candidates running elsewhere as such, and the trial of a worker that died is failed as
``interrupted`` by whoever notices first and run again.

The sweep that started the study concludes it (best config, ``--confirm``, report);
workers only run trials and stop when nothing is left to run anywhere.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, cast

from optuna.trial import FrozenTrial, TrialState

from autotune.core.units import format_duration
from autotune.errors import (
    AutotuneError,
    ClaimLost,
    StorageError,
    StudyMismatchError,
    SweepInterrupted,
    UsageError,
)
from autotune.gpu.nvml import Nvml
from autotune.gpu.probe import VisibleGpu, probe
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store import urls
from autotune.store.claims import Claim, ClaimBook, Heartbeat
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import (
    Reaped,
    Recovered,
    end_trial_processes,
    fail_trial,
    is_interrupted,
    reap_stale,
)
from autotune.store.storage import open_storage
from autotune.store.urls import redact_url
from autotune.store.workers import Waiting, attach_or_fail, claim_next
from autotune.sweep.engine import Sweep, SweepOptions, SweepResult, label
from autotune.sweep.parallel import DEFAULT_LEASE_S, LinePrefixer, cards_for_parallel

#: Study user attr with the options the sweep was started with, so ``autotune worker`` needs
#: only the study's name and database.
OPTIONS_ATTR = "sweep_options"


class _FanoutEvent(threading.Event):
    """The sweep's stop event: setting it (Ctrl-C) also stops every sibling worker."""

    def __init__(self) -> None:
        super().__init__()
        self.children: list[threading.Event] = []

    def set(self) -> None:
        super().set()
        for child in self.children:
            child.set()


class ClaimedStudy(st.SweepStudy):
    """A ``SweepStudy`` whose trials are claimed: one worker per candidate run, with a heartbeat."""

    book: ClaimBook
    pending: Claim | None = None
    _claim: Claim | None = None
    _heartbeat: Heartbeat | None = None

    def _reread(self, trial_id: int, fresh: FrozenTrial | None = None) -> None:
        """Several workers write this study: after each write of ours read every trial again
        (the single-orchestrator study reads back only the trial it wrote), so counts and
        limits never lag behind the other workers by more than one of our writes."""
        self._trials = None

    def use(self, book: ClaimBook, on_lost: Callable[[], None]) -> ClaimedStudy:
        """Claim through ``book``; ``on_lost`` is called if another worker reaps a running claim."""
        self.book, self.on_lost = book, on_lost
        self.pending = self._claim = self._heartbeat = None
        return self

    concludes = True  # False for ``autotune worker``

    def check_not_running_elsewhere(self, me: ProcessIdentity) -> None:
        """Workers may join a study anywhere (the claims keep them apart); a second concluding
        sweep of the same study on this machine is still refused, as for any sweep."""
        if self.concludes:
            super().check_not_running_elsewhere(me)

    def claim(self, me: ProcessIdentity) -> None:
        """Only the sweep that concludes the study stands for it (``autotune status``, the check above)."""
        if self.concludes:
            super().claim(me)

    def recover_stale(self, me: ProcessIdentity, *, kill: Any = None) -> list[Recovered]:
        """Fail the trials of dead workers (claims) and of dead unclaimed sweeps on this machine."""
        self.refresh()
        out = [
            Recovered(r.number, r.params, list(r.killed))
            for r in reap_stale(self.study, self.book, end_processes=self.end_processes)
        ]
        claimed = {c.trial_id for c in self.book.all_claims()}
        for t in self.trials((TrialState.RUNNING,)):
            if op.trial_id(t) in claimed:
                continue
            owner = ProcessIdentity.from_attrs(t.user_attrs)
            if owner is None or owner.alive():
                continue  # another machine's, or still running: not ours to end
            killed = end_trial_processes(t)
            if fail_trial(
                self.study, op.trial_id(t), "interrupted: the sweep running it stopped; it is run again"
            ):
                out.append(Recovered(t.number, dict(t.params), killed))
        return out

    def end_processes(self, trial_id: int) -> list[int]:
        """End what is left of a dead worker's trial on this machine (its trainer has its own
        session, so it outlives the worker and holds the card); the pids ended."""
        return end_trial_processes(self.storage.get_trial(trial_id))

    def start_trial(
        self, params: Mapping[str, Any], dists: Mapping[str, Any], attrs: Mapping[str, Any]
    ) -> FrozenTrial:
        claim = self.pending
        self.pending = None
        if claim is None:  # a trial the loop did not claim (the winner's confirmation): claim it now
            study_params = {k: st.to_study_value(v) for k, v in params.items()}
            self.refresh()
            seen = sum(1 for t in self.trials() if t.params == study_params)
            claim = self.book.try_claim(study_params, seen)
            if claim is None:
                raise ClaimLost(
                    f"another worker of study {self.name!r} started the same run of {study_params} a "
                    "moment ago; it is left to that worker"
                )
        trial = super().start_trial(params, dists, {**attrs, "worker": self.book.worker.name})
        if not attach_or_fail(self.study, self.book, claim, op.trial_id(trial)):
            raise ClaimLost(
                f"this worker stalled for longer than its lease ({self.book.lease_s:g}s) while starting "
                f"trial {trial.number}; another worker took the candidate"
            )
        self._claim = claim
        self._heartbeat = Heartbeat(self.book, claim, self.book.lease_s / 6, self.on_lost).__enter__()
        return trial

    def finish_trial(self, trial: FrozenTrial, attrs: Mapping[str, Any], value: float | None) -> FrozenTrial:
        claim, hb = self._claim, self._heartbeat
        self._claim = self._heartbeat = None
        if hb is not None:
            hb.__exit__(None, None, None)
        if claim is None:
            return super().finish_trial(trial, attrs, value)
        if not self.book.renew(claim):  # reaped: the trial was failed and handed on; write nothing
            self.on_lost()
            return self.storage.get_trial(op.trial_id(trial))
        # The renewal leaves a whole lease to write the result before anyone may reap it.
        finished = super().finish_trial(trial, attrs, value)
        self.book.finish(claim)
        return finished


class SharedSweep(Sweep):
    """A sweep that claims its trials, so others may run the same study at the same time.

    ``pin``: the card this worker runs its trials on (``CUDA_VISIBLE_DEVICES`` set to its
    UUID); ``siblings``: the other cards of this machine, one worker thread each
    (``--parallel``); ``concludes``: False for ``autotune worker``, which leaves the best
    config, the confirmation and the report to the sweep that started the study.
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
        concludes: bool = True,
    ) -> None:
        out = stream or sys.stderr
        self._out, self._out_lock = out, threading.Lock()
        if pin is not None and siblings:
            stream, tty = cast(TextIO, LinePrefixer(out, _prefix(pin), self._out_lock)), False
        super().__init__(opts, stream=stream, tty=tty, nvml=nvml)
        self.stop = self._fanout = _FanoutEvent()
        self.pin, self.sibling_gpus, self.lease_s, self.concludes = pin, list(siblings), lease_s, concludes
        self.lost = threading.Event()
        self._root: SharedSweep = self  # the worker that owns the terminal and the signal handlers
        self.sibling_errors: list[tuple[VisibleGpu, BaseException]] = []

    def _on_lost(self) -> None:
        """Another worker reaped our running claim: end the trial (the runner stops on ``stop``)."""
        self.lost.set()
        threading.Event.set(self.stop)  # this worker's trial only, not its siblings (as Ctrl-C does)

    # hooks of Sweep

    def _open_study(
        self, storage: Any, name: str, settings: Mapping[str, Any], workdir: Path
    ) -> st.SweepStudy:
        handle = ClaimedStudy.open_or_create(storage, name, settings, workdir=workdir)[0]
        assert isinstance(handle, ClaimedStudy)
        handle.concludes = self.concludes
        label = f"gpu {self.pin.cuda_index}" if self.pin is not None else ""
        book = ClaimBook(
            op.engine(storage), handle.study_id, worker=ProcessIdentity.current(label), lease_s=self.lease_s
        )
        handle.use(book, self._on_lost)
        if OPTIONS_ATTR not in handle.user_attrs:
            handle.set_attr(OPTIONS_ATTR, options_to_attr(self.opts))
        return handle

    def _card(self, baseline: Any) -> Any:
        card = super()._card(baseline)
        if self.pin is None:
            return card
        gpus_per_trial = max(1, int(getattr(baseline, "num_gpus", 1) or 1))
        if gpus_per_trial > 1:
            raise UsageError(
                f"this config launches each trial on {gpus_per_trial} GPUs, but --parallel and "
                "'autotune worker' run one single-GPU trial per card; plan for one GPU "
                "('autotune plan --gpus 1 ...') to sweep card by card, or run 'autotune sweep' without "
                "--parallel to give every trial all the cards"
            )
        # One single-GPU trial per card: the card is the pinned one (all of one model, checked).
        return dataclasses.replace(card, count=1, indices=(self.pin.nvml_index,))

    def _trial_env(self) -> dict[str, str]:
        return {} if self.pin is None else {"CUDA_VISIBLE_DEVICES": self.pin.uuid}

    def _limit_reached(self) -> str | None:
        why = super()._limit_reached()
        if why is None and self.opts.max_trials is not None:
            running = len(self.study.book.in_flight())  # type: ignore[attr-defined]
            if self.study.counted_trials() + running >= self.opts.max_trials:
                return f"max-trials ({self.opts.max_trials}) reached (counting the {running} running)"
        return why

    # the search, claimed

    def _search(self, strategy: Any, base_cand: Any) -> str:
        threads = [self._start_sibling(gpu, strategy, base_cand) for gpu in self.sibling_gpus]
        try:
            return self._claimed_search(strategy, base_cand)
        except BaseException:
            self.stop.set()
            raise
        finally:
            for t in threads:
                t.join()
            for gpu, exc in self.sibling_errors:
                if not isinstance(exc, SweepInterrupted):  # Ctrl-C: said once, by this worker
                    self.progress.line(f"the worker on {_prefix(gpu).strip()} stopped: {exc}")

    def _claimed_search(self, strategy: Any, base_cand: Any) -> str:
        from autotune.core.strategy import Observation

        study = self.study
        assert isinstance(study, ClaimedStudy)
        space = self.ctx.space
        base_params = {k: st.to_study_value(v) for k, v in base_cand.params.items()}
        poll_s = min(2.0, self.lease_s / 10)
        checked_baseline = False
        waiting_said = False

        def fresh() -> list[FrozenTrial]:
            study.refresh()  # the study caches its trials; other workers' show up after this
            return study.trials()

        while True:
            # The study caches its trials until our own next write; other workers' trials show
            # up after a refresh: in ``propose`` (the decision) and after waiting (the limits).
            if (why := self._limit_reached()) is not None:
                return why
            role = "search"

            def propose(trials: Sequence[FrozenTrial], in_flight: Sequence[Mapping[str, Any]]) -> Any:
                # Decide from this snapshot only (the one the claim's run number is counted on):
                # a baseline seen unfinished in an older read may have finished since.
                nonlocal checked_baseline, role
                base = _finished_baseline(trials)
                if base is None:  # the baseline first, alone: everyone else waits for its verdict
                    busy = any(
                        t.state == TrialState.RUNNING and t.user_attrs.get("role") == "baseline"
                        for t in trials
                    ) or any(dict(p) == base_params for p in in_flight)
                    role = "baseline"
                    return None if busy else base_params
                if not checked_baseline:  # a failed baseline stops every worker, with its diagnosis
                    if study.user_attrs.get("baseline_trial") != base.number:
                        study.set_attr("baseline_trial", base.number)
                    self._check_baseline(base)
                    checked_baseline = True
                role = "search"
                history = self._history()  # the snapshot ``trials`` came from (read_trials below)
                for p in in_flight:
                    history.append(
                        Observation(candidate=space.candidate(dict(p)), outcome=None, samples_per_s=None,
                                    peak_vram_gb=None, fits=None, spread=None)
                    )  # fmt: skip
                cand = strategy.next_candidate(history)
                return None if cand is None else {k: st.to_study_value(v) for k, v in cand.params.items()}

            step = claim_next(
                study.study,
                study.book,
                propose,
                on_reaped=self._say_reaped,
                read_trials=fresh,
                end_processes=study.end_processes,
            )
            if step is None:
                return "done"
            if isinstance(step, Waiting):
                if not waiting_said:
                    self.progress.line(
                        f"waiting: {step.in_flight} trial(s) run elsewhere and nothing else can start before "
                        "their results"
                    )
                    waiting_said = True
                self.stop.wait(poll_s)
                study.refresh()
                continue
            waiting_said = False
            study.pending = step
            self.lost.clear()
            try:
                self._run_trial(space.candidate(dict(step.params)), role=role)
            except (ClaimLost, SweepInterrupted) as exc:
                study.pending = None
                if isinstance(exc, SweepInterrupted) and not (
                    self.lost.is_set() and self._root._signal is None
                ):
                    raise  # Ctrl-C or SIGTERM
                # The claim was lost (cut off from the database longer than the lease): the trial
                # was handed on, nothing of it recorded here. Carry on with the next candidate.
                self.stop.clear()
                self.lost.clear()
                what = (
                    exc if isinstance(exc, ClaimLost) else "this worker lost its claim on the running trial"
                )
                self.progress.line(f"{what}; another worker runs that candidate, going on with the next one")

    def _say_reaped(self, r: Reaped) -> None:
        """A dead worker's trial was failed (its leftover processes here ended first): say so."""
        ended = f"; its leftover processes ({', '.join(map(str, r.killed))}) were ended" if r.killed else ""
        self.progress.line(f"trial {r.number} ({label(r.params)}) {r.reason}{ended}")

    # sibling workers, one thread per card of this machine

    def _start_sibling(self, gpu: VisibleGpu, strategy: Any, base_cand: Any) -> threading.Thread:
        from autotune.sweep.progress import Progress

        w = copy.copy(self)
        w.pin, w.sibling_gpus = gpu, []
        w.progress = Progress(cast(TextIO, LinePrefixer(self._out, _prefix(gpu), self._out_lock)), tty=False)
        w.stop = w._fanout = _FanoutEvent()
        self._fanout.children.append(w.stop)
        w.lost = threading.Event()
        w._root = self
        w.card = dataclasses.replace(self.card, indices=(gpu.nvml_index,))
        study = self.study
        assert isinstance(study, ClaimedStudy)
        twin = ClaimedStudy(study.storage, study.study)
        book = ClaimBook(
            op.engine(study.storage),
            study.study_id,
            worker=ProcessIdentity.current(f"gpu {gpu.cuda_index}"),
            lease_s=self.lease_s,
        )
        w.study = twin.use(book, w._on_lost)

        def run() -> None:
            try:
                w._claimed_search(strategy, base_cand)
            except BaseException as exc:
                self.sibling_errors.append((gpu, exc))
                if not isinstance(exc, (AutotuneError, ClaimLost)):
                    self.stop.set()

        t = threading.Thread(target=run, name=f"worker-{_prefix(gpu).strip()}", daemon=True)
        t.start()
        return t


def _finished_baseline(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The baseline trial once it finished (not interrupted): decided by the trials, not an attr."""
    for t in trials:
        if t.state.is_finished() and t.user_attrs.get("role") == "baseline" and not is_interrupted(t):
            return t
    return None


def _prefix(gpu: VisibleGpu) -> str:
    return f"[gpu {gpu.cuda_index}] "


# --- options stored on the study, for ``autotune worker`` -------------------------------------------

_NOT_STORED = {"study", "storage", "workdir", "confirm", "demo"}


def options_to_attr(opts: SweepOptions) -> dict[str, Any]:
    """The sweep's options as JSON, minus where it ran (study, storage, workdir) and its conclusion."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name in _NOT_STORED:
            continue
        value = getattr(opts, f.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, dict):
            value = {k: str(v) if isinstance(v, Path) else v for k, v in value.items()}
        out[f.name] = value
    out["demo"] = opts.demo
    return out


def options_from_attr(stored: Mapping[str, Any], **where: Any) -> SweepOptions:
    names = {f.name for f in dataclasses.fields(SweepOptions)}
    kwargs = {k: v for k, v in stored.items() if k in names}
    for key in ("config", "knob_file"):
        if kwargs.get(key) is not None:
            kwargs[key] = Path(kwargs[key])
    kwargs.update(where)
    kwargs["confirm"] = False
    return SweepOptions(**kwargs)


# --- entry points ------------------------------------------------------------------------------------


def visible_gpus(nvml: Nvml | bool | None) -> list[VisibleGpu]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applied); none without a driver."""
    if nvml is False or nvml is None:
        return []
    result = probe(None if nvml is True else (lambda: nvml))
    return list(result.gpus) if result.available else []


def run_sweep(
    opts: SweepOptions,
    *,
    parallel: bool = False,
    lease_s: float = DEFAULT_LEASE_S,
    stream: TextIO | None = None,
    tty: bool | None = None,
    nvml: Nvml | bool | None = True,
) -> SweepResult:
    """``autotune sweep``: one worker, or with ``parallel`` one per card of this machine."""
    if not parallel:
        return SharedSweep(opts, stream=stream, tty=tty, nvml=nvml, lease_s=lease_s).run()
    cards = cards_for_parallel(visible_gpus(nvml))
    return SharedSweep(
        opts, stream=stream, tty=tty, nvml=nvml, pin=cards[0], siblings=cards[1:], lease_s=lease_s
    ).run()


def run_worker(
    study: str,
    storage: str,
    *,
    gpu: int | None = None,
    workdir: Path | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    wait_s: float = 0.0,
    stream: TextIO | None = None,
    nvml: Nvml | bool | None = True,
) -> SweepResult:
    """``autotune worker``: join a study another ``autotune sweep`` started, on one card or all."""
    st.validate_study_name(study)
    urls.check_storage_url(storage)
    stored = _wait_for_study(study, storage, wait_s, stream or sys.stderr)
    gpus = visible_gpus(nvml)
    pin: VisibleGpu | None = None
    siblings: list[VisibleGpu] = []
    if gpu is not None:
        if not 0 <= gpu < len(gpus):
            raise UsageError(
                f"--gpu {gpu}: this process sees {len(gpus)} GPU(s) (numbered 0 to {len(gpus) - 1} as CUDA "
                "numbers them, after CUDA_VISIBLE_DEVICES); pick one of those, or leave --gpu out to use all"
            )
        pin = gpus[gpu]
        os.environ["CUDA_VISIBLE_DEVICES"] = pin.uuid  # from here on this process sees only its card
    elif gpus:
        cards = cards_for_parallel(gpus)
        pin, siblings = cards[0], cards[1:]
    default_workdir = Path(str(stored.get("workdir") or urls.DEFAULT_WORKDIR))
    if workdir is None:
        workdir = default_workdir if default_workdir.is_dir() else urls.DEFAULT_WORKDIR
    opts = options_from_attr(stored[OPTIONS_ATTR], study=study, storage=storage, workdir=workdir)
    worker = SharedSweep(
        opts, stream=stream, nvml=nvml, pin=pin, siblings=siblings, lease_s=lease_s, concludes=False
    )
    try:
        return worker.run()
    except StudyMismatchError as exc:
        raise StudyMismatchError(
            f"this worker cannot join study {study!r}: {exc}\nA worker runs the study's own trials, so its "
            "card (model and memory) and the trainer's config must be the study's. Run this worker on a "
            "machine with the study's card, or start a separate study for this card (autotune sweep "
            "--study OTHER_NAME ...)."
        ) from None


def _wait_for_study(name: str, url: str, wait_s: float, stream: TextIO) -> dict[str, Any]:
    """The study's user attrs once it exists and holds the sweep's options (waits up to ``wait_s``).

    Says once that it waits, and why, so a worker started before its sweep is not silent.
    """
    deadline = time.monotonic() + wait_s
    shown = redact_url(url)
    path = urls.sqlite_path(url)
    said = False
    while True:
        try:
            if path is not None and not path.exists():  # the sweep has not created it yet
                raise StorageError(f"no study database at {path} yet")
            storage = open_storage(url, create=False)
            if name in st.study_names(storage):
                attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
                if OPTIONS_ATTR in attrs:
                    op.engine(storage).dispose()
                    return dict(attrs)
            op.engine(storage).dispose()
            problem = f"no study {name!r} in {shown} yet"
        except StorageError as exc:
            problem = str(exc)
        if time.monotonic() >= deadline:
            raise StorageError(
                f"{problem}; start it with 'autotune sweep --study {name} --storage {shown} ...' (on any "
                "machine), or let this worker wait for it with --wait DURATION"
            )
        if not said:
            print(
                f"waiting up to {format_duration(wait_s)} for study {name!r}: {problem}",
                file=stream,
                flush=True,
            )
            said = True
        time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))


__all__ = [
    "DEFAULT_LEASE_S",
    "ClaimLost",
    "ClaimedStudy",
    "SharedSweep",
    "options_from_attr",
    "options_to_attr",
    "run_sweep",
    "run_worker",
]
