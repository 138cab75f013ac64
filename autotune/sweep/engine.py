"""The sweep loop: baseline first, then the candidates the strategy picks, every trial recorded.

For each trial: ask the strategy -> render the candidate with the trainer's
adapter into its own folder -> run it with the runner (own process group, limits)
-> read its metrics -> classify the outcome -> tell the study, with the user
attrs DESIGN.md promises. Between trials the GPU drains back to its idle level.

Why it is built this way:
- The baseline runs first: a config error must not burn the night, and an OOM
  there means nothing the trainer ships fits this card.
- All state lives in the study, so a resume (same command) recomputes the
  history from it and continues; trials a dead orchestrator left RUNNING are
  ended, marked ``interrupted`` and run again; finished ones never are.
- Ctrl-C / SIGTERM end the running trial through the runner's stop event, record
  it ``interrupted`` and leave with exit code 130.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

from optuna.trial import FrozenTrial, TrialState

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome
from autotune.core.record import TrialRecord
from autotune.core.units import format_duration, format_gb
from autotune.core.verdict import fits, judged_peak, pick_winner, samples_per_s
from autotune.errors import (
    AutotuneError,
    BaselineFailedError,
    CandidateRefused,
    ConfigError,
    NvmlUnavailable,
    SweepInterrupted,
    TrialOutputError,
    UsageError,
)
from autotune.execution.launch import LaunchSpec
from autotune.execution.proctree import MARK_VAR
from autotune.execution.runner import output_error
from autotune.gpu.nvml import GIB, Nvml, open_nvml
from autotune.store import study as st
from autotune.store import urls
from autotune.store.identity import ProcessIdentity
from autotune.store.recovery import is_interrupted
from autotune.store.storage import open_storage
from autotune.sweep.defaults import (
    DEFAULT_HEADROOM,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_STALL_TIMEOUT_S,
    DEFAULT_STEPS,
    DEFAULT_TRIAL_TIMEOUT_S,
)
from autotune.sweep.progress import Progress

CONFIRM_STEPS_FACTOR = 4  # --confirm re-runs the winner this many times longer
CONFIRM_ATTEMPTS = 3  # winners tried in turn when a confirmation fails
DRAIN_TIMEOUT_S = 120.0

# The demo: the built-in reference trainer on CPU with an emulated card, a few minutes.
DEMO_STUDY = "demo"
DEMO_STEPS = 12
DEMO_MAX_BATCH_SIZE = 8
DEMO_TRIAL_TIMEOUT_S = 120.0
DEMO_STALL_TIMEOUT_S = 120.0  # the reference trainer prints every 20 steps: a 12-step trial only at its end
DEMO_BUDGET_S = 150.0  # trial time: the demo ends in about 3 minutes even on a slow laptop


@dataclass
class SweepOptions:
    """Everything a sweep is run with (the CLI's flags, resolved)."""

    trainer: str = "reference"
    config: Path | None = None
    study: str | None = None
    storage: str | None = None
    workdir: Path = urls.DEFAULT_WORKDIR
    vram_gb: float | None = None
    steps: int | None = None
    budget_s: float | None = None
    max_trials: int | None = None
    trial_timeout_s: float | None = None
    stall_timeout_s: float | None = None
    headroom: float = DEFAULT_HEADROOM
    max_batch_size: int | None = None
    keep_effective_batch: bool = False
    allow_extra_savers: bool = False
    confirm: bool = False
    force: bool = False
    cmd: str | None = None
    trainer_options: dict[str, Any] = field(default_factory=dict)
    #: A knob file to use instead of ``configs/knobs/<trainer>.yaml`` (tests, custom trainers).
    knob_file: Path | None = None
    #: How long to wait after a trial for the GPU's memory to come back to its pre-trial level.
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    demo: bool = False

    @classmethod
    def demo_defaults(cls, **overrides: Any) -> SweepOptions:
        """``autotune sweep`` with no arguments: the reference trainer's low-VRAM baseline on CPU."""
        base: dict[str, Any] = {
            "trainer": "reference",
            "study": DEMO_STUDY,
            "steps": DEMO_STEPS,
            "max_batch_size": DEMO_MAX_BATCH_SIZE,
            "trial_timeout_s": DEMO_TRIAL_TIMEOUT_S,
            "stall_timeout_s": DEMO_STALL_TIMEOUT_S,
            "budget_s": DEMO_BUDGET_S,
            "demo": True,
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass(frozen=True)
class Card:
    """The card a sweep judges fit against (the smallest visible one, or a planned/emulated one)."""

    name: str
    vram_gb: float
    count: int
    tier: str | None
    indices: tuple[int, ...] = ()  # NVML indices to sample and drain; empty without a GPU

    def as_setting(self) -> dict[str, Any]:
        return {"name": self.name, "vram_gb": round(self.vram_gb, 2), "count": self.count, "tier": self.tier}


@dataclass
class SweepResult:
    study: str
    storage: str
    best_trial: int | None
    best_params: dict[str, Any] | None
    best_samples_per_s: float | None
    baseline_samples_per_s: float | None
    trials_run: int
    stop_reason: str
    reports: list[Path]
    wall_s: float


# --- pure helpers ---------------------------------------------------------------------------------


def accumulation_for(batch_size: int, target_effective: int, num_gpus: int = 1) -> tuple[int, int]:
    """``(gradient_accumulation_steps, effective_batch)`` that keep ``target_effective`` where possible.

    Accumulation only goes down: a batch past the target runs with accumulation 1
    and a larger effective batch, which the trial records.
    """
    per_step = max(1, batch_size) * max(1, num_gpus)
    ga = max(1, target_effective // per_step)
    return ga, per_step * ga


def label(params: Mapping[str, Any]) -> str:
    """A short human label for a candidate, like ``int8-quanto adamw8bit bs=4 ckpt``."""
    parts = []
    for key, value in params.items():
        if key == "batch_size":
            parts.append(f"bs={value}")
        elif key == "gradient_checkpointing":
            parts.append("ckpt" if value else "no-ckpt")
        elif key == "quantization":
            parts.append("no-quant" if value in (None, "none") else str(value))
        elif isinstance(value, bool):
            parts.append(key if value else f"no-{key}")
        else:
            parts.append(str(value))
    return " ".join(parts)


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def default_study_name(opts: SweepOptions) -> str:
    """Deterministic from the command, so running it again resumes: trainer and config file stem."""
    if opts.demo:
        return DEMO_STUDY
    stem = opts.config.stem if opts.config is not None else "default"
    raw = f"{opts.trainer}-{stem}"
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in raw)[:100]


# --- the sweep --------------------------------------------------------------------------------------


class Sweep:
    """One run of a sweep (a resume is another run of the same study)."""

    def __init__(
        self,
        opts: SweepOptions,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        nvml: Nvml | bool | None = True,
    ) -> None:
        self.opts = opts
        self.progress = Progress(stream or sys.stderr, tty=tty)
        self.stop = threading.Event()
        self._signal: int | None = None
        self._nvml_arg = nvml
        self.nvml: Nvml | None = None
        self.t0 = time.monotonic()

    # setup

    def _open_nvml(self) -> Nvml | None:
        if self._nvml_arg is True:
            try:
                return open_nvml()
            except NvmlUnavailable:
                return None
        return self._nvml_arg or None

    def _card(self, baseline: Any) -> Card:
        """The card to judge fit on: --vram-gb, else the reference trainer's emulated card, else the
        smallest visible GPU. The GPUs found are sampled and drained either way."""
        gpus = _visible_gpus(self.nvml)
        indices = tuple(i for i, _, _ in gpus)
        count = max(1, len(gpus))
        where = f" on {gpus[0][1]}" if gpus else " (CPU)"
        emulated = (
            (baseline.data.get("reference") or {}).get("emulated_vram_gb")
            if self.opts.trainer == "reference"
            else None
        )
        if self.opts.vram_gb is not None:
            gb = self.opts.vram_gb
            if self.opts.trainer == "reference":
                return Card(f"emulated {format_gb(gb)} card{where}", gb, count, _tier(gb), indices)
            name = gpus[0][1] if gpus else f"planned {gb:g} GB card"
            return Card(name, gb, count, _tier(gb), indices)
        if isinstance(emulated, (int, float)) and emulated > 0:
            return Card(
                f"emulated {format_gb(float(emulated))} card{where}",
                float(emulated),
                count,
                _tier(emulated),
                indices,
            )
        if gpus:
            _, name, total = min(gpus, key=lambda g: g[2])
            gb = total / GIB
            return Card(name, gb, count, _tier(gb), indices)
        raise UsageError(
            "no GPU found (NVML unavailable or no device), so there is no card to judge fit against; "
            "pass --vram-gb N to sweep for a card of N GB, or run 'autotune sweep' with no arguments "
            "for the CPU demo"
        )

    # the run

    def run(self) -> SweepResult:
        with self._signals():
            try:
                return self._run()
            finally:
                self.progress.close()

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM set the stop event (the runner ends the trial); main thread only."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, _frame: Any) -> None:
            if self._signal is not None:
                self.progress.line("still ending the running trial (it gets a grace period, then SIGKILL)...")
                return
            self._signal = signum
            self.stop.set()
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
        opts = self.opts
        workdir = opts.workdir.expanduser().resolve()
        storage_url = urls.check_storage_url(opts.storage or urls.default_storage_url(workdir))
        study_name = st.validate_study_name(opts.study or default_study_name(opts))

        from autotune.config.knobs import knob_path as knob_file_path
        from autotune.config.knobs import read_knob_file
        from autotune.core.space import Space
        from autotune.core.strategy import Strategy
        from autotune.trainers import get_adapter

        options = dict(opts.trainer_options)
        if opts.cmd is not None:
            options.setdefault("template", opts.cmd)
        self.adapter = adapter = get_adapter(opts.trainer, **options)
        baseline = adapter.load_baseline(opts.config)
        self.nvml = self._open_nvml()
        card = self._card(baseline)
        self.card = card
        if opts.trainer == "reference" and opts.vram_gb is not None:
            baseline = _with_emulated_vram(baseline, opts.vram_gb)
        self._gate(card)

        base_params = adapter.baseline_params(baseline)
        base_ga = int(base_params.pop("gradient_accumulation_steps", 1) or 1)
        num_gpus = max(1, int(getattr(baseline, "num_gpus", 1) or 1))
        target_effective = int(base_params.get("batch_size", 1)) * base_ga * num_gpus
        max_bs = opts.max_batch_size or DEFAULT_MAX_BATCH_SIZE
        limit = adapter.max_batch_size(baseline)
        if limit is not None:
            max_bs = min(max_bs, int(limit))
        if opts.keep_effective_batch:
            max_bs = min(max_bs, max(1, target_effective // num_gpus))
        max_bs = max(max_bs, int(base_params.get("batch_size", 1)))

        knob_path = opts.knob_file or knob_file_path(adapter.knob_file)
        knob_data = read_knob_file(knob_path)
        space = Space.from_mapping(
            knob_data,
            source=str(knob_path),
            max_batch_size=max_bs,
            allow_extra_savers=opts.allow_extra_savers,
        )
        knobs = st.knob_defs(knob_data)
        dists = st.distributions(knobs, max_bs)
        base_cand = space.candidate(base_params)
        strategy = Strategy(space, base_cand, card.vram_gb, opts.headroom)

        steps = opts.steps or DEFAULT_STEPS
        settings = {
            "trainer": opts.trainer,
            "config_path": str(baseline.path) if baseline.path else None,
            "base_config_hash": config_hash(baseline.text),
            "knobs": [
                {
                    "name": k.name,
                    "values": [st.to_study_value(v) for v in k.values],
                    "extra_savers": [st.to_study_value(v) for v in k.extra_savers],
                    "type": "int" if k.is_int else "choice",
                }
                for k in knobs
            ],
            "steps": steps,
            "headroom": opts.headroom,
            "max_batch_size": max_bs,
            "keep_effective_batch": opts.keep_effective_batch,
            "allow_extra_savers": opts.allow_extra_savers,
            "card": card.as_setting(),
            # How the trainer is launched (--cmd's template, --trainer-dir): part of what the sweep is.
            "trainer_options": {k: str(v) for k, v in sorted(options.items())},
        }
        storage = open_storage(storage_url)
        self.study = study = self._open_study(storage, study_name, settings, workdir)
        me = ProcessIdentity.current()
        study.check_not_running_elsewhere(me)
        study.claim(me)
        for rec in study.recover_stale(me):
            self.progress.line(
                f"trial {rec.number} ({label(rec.params)}) was left running by a stopped sweep: "
                f"recorded as interrupted{' and its processes ended' if rec.killed_pids else ''}; it runs again"
            )
        if "baseline_params" not in study.user_attrs:
            study.set_attr("baseline_params", {**base_params, "gradient_accumulation_steps": base_ga})
        study.set_attr("effective_batch", target_effective)
        self.ctx = _Context(
            adapter=adapter,
            baseline=baseline,
            space=space,
            dists=dists,
            steps=steps,
            target_effective=target_effective,
            num_gpus=num_gpus,
            storage_url=storage_url,
            study_dir=workdir / study_name,
        )
        done = study.counted_trials()
        self.progress.line(
            f"autotune sweep: study {study_name!r} in {storage_url}"
            + (f" (resuming: {done} trial{'s' if done != 1 else ''} done)" if done else "")
            + f"; trainer {opts.trainer}, card {card.name}"
            + ("" if card.name.startswith(("emulated", "planned")) else f" ({format_gb(card.vram_gb)})")
            + f": fits at <= {format_gb((1 - opts.headroom) * card.vram_gb)} ({opts.headroom:.0%} headroom)"
        )

        stop_reason = self._search(strategy, base_cand)
        if not self.concludes:  # a worker leaves the best, confirmation and report to the sweep
            return self._result(study_name, storage_url, None, stop_reason, [])
        best_trial = self._pick_best(strategy)
        if best_trial is not None and opts.confirm and stop_reason == "done":
            best_trial = self._confirm(strategy, best_trial)
        study.set_attr("best_trial", best_trial)
        study.set_attr("stop_reason", stop_reason)
        self._record_ruled_out(strategy)
        reports = self._write_reports()
        return self._result(study_name, storage_url, best_trial, stop_reason, reports)

    # hooks for workers sharing the study (autotune.sweep.shared overrides them)

    #: False for a worker that only runs trials: the sweep that started the study concludes it.
    concludes = True

    def _open_study(
        self, storage: Any, name: str, settings: Mapping[str, Any], workdir: Path
    ) -> st.SweepStudy:
        return st.SweepStudy.open_or_create(storage, name, settings, workdir=workdir)[0]

    def _trial_env(self) -> dict[str, str]:
        """Environment added to every trial (a pinned worker's ``CUDA_VISIBLE_DEVICES``)."""
        return {}

    # the search

    def _search(self, strategy: Any, base_cand: Any) -> str:
        """Run trials until the strategy is done or a limit stops it; returns why it stopped."""
        study = self.study
        base_no = self._baseline_trial()
        if base_no is None:
            if (why := self._limit_reached()) is not None:
                return why
            base_no = self._run_trial(base_cand, role="baseline").number
        base = study.trial(base_no)
        self._check_baseline(base)
        while True:
            study.refresh_if_changed()  # other writers' trials (our own are read back as written)
            history = self._history()
            if (why := self._limit_reached()) is not None:
                return why
            cand = strategy.next_candidate(history)
            if cand is None:
                return "done"
            self._run_trial(cand, role="search")

    def _baseline_trial(self) -> int | None:
        number = self.study.user_attrs.get("baseline_trial")
        if not isinstance(number, int):
            return None
        trial = self.study.trial(number)
        if trial.state == TrialState.RUNNING or is_interrupted(trial):
            return None  # it never finished: run the baseline again
        return number

    def _check_baseline(self, trial: FrozenTrial) -> None:
        outcome = trial.user_attrs.get("outcome")
        reason = trial.user_attrs.get("reason", "")
        log = trial.user_attrs.get("log_path", "")
        if outcome == Outcome.OK.value:
            return
        if outcome == Outcome.OOM.value:
            if self.opts.allow_extra_savers:
                self.progress.line(
                    "the baseline ran out of memory; --allow-extra-savers is on, so savers beyond it are tried"
                )
                return
            self._write_reports()
            raise BaselineFailedError(
                f"the baseline (trial {trial.number}, the trainer's own config) ran out of memory on this "
                f"{self.card.name} ({self.card.vram_gb:.1f} GB): nothing the trainer ships fits this card. "
                f"{reason}. What could: --allow-extra-savers tries savers beyond the baseline (such as "
                "lower-bit quantization), or a card with more memory. Log: " + str(log)
            )
        self._write_reports()
        hint = _BASELINE_HINTS.get(str(outcome), "see the log for why")
        raise BaselineFailedError(
            f"the baseline (trial {trial.number}) failed with outcome {outcome}: {reason}. "
            f"No relaxation can fix that, so the sweep stops here: {hint}; then start a new study "
            f"with --study NAME. Log: {log}"
        )

    def _limit_reached(self) -> str | None:
        if self.stop.is_set():
            raise self._interrupted()
        if self.opts.max_trials is not None and self.study.counted_trials() >= self.opts.max_trials:
            return f"max-trials ({self.opts.max_trials}) reached"
        if self.opts.budget_s is not None and self.study.spent_s() >= self.opts.budget_s:
            return f"budget ({format_duration(self.opts.budget_s)}) spent"
        return None

    def _interrupted(self) -> SweepInterrupted:
        name = signal.Signals(self._signal).name if self._signal else "stop"
        return SweepInterrupted(
            f"interrupted by {name}: the running trial was ended and recorded as interrupted; "
            "run the same command again to resume"
        )

    def _history(self, *, include_confirm: bool = False) -> list[Any]:
        """The strategy's view of the study: every finished trial but the interrupted, plus running elsewhere."""
        return [o for _, o in self._observations(include_confirm=include_confirm)]

    def _observations(self, *, include_confirm: bool = False) -> list[tuple[FrozenTrial, Any]]:
        from autotune.core.strategy import Observation

        out = []
        for t in self.study.trials():
            if is_interrupted(t) or (t.user_attrs.get("role") == "confirm" and not include_confirm):
                continue
            if t.state not in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING):
                continue
            try:
                cand = self.ctx.space.candidate(t.params)
            except ConfigError:
                continue  # params from another knob set (should not happen: settings are checked)
            a = t.user_attrs
            running = t.state == TrialState.RUNNING
            sps, step, step_spread = a.get("samples_per_s"), a.get("step_time_s"), a.get("step_time_spread_s")
            spread = None  # relative, as the strategy wants it: 0.02 is 2 %
            if isinstance(step, (int, float)) and isinstance(step_spread, (int, float)) and step > 0:
                spread = step_spread / step
            out.append(
                (
                    t,
                    Observation(
                        candidate=cand,
                        outcome=None if running else a.get("outcome", Outcome.CRASH.value),
                        samples_per_s=sps if isinstance(sps, (int, float)) else None,
                        peak_vram_gb=a.get("peak_vram_gb"),
                        fits=a.get("fits"),
                        spread=spread,
                    ),
                )
            )
        return out

    # one trial

    def _run_trial(
        self, cand: Any, *, role: str, steps: int | None = None, extra: Mapping[str, Any] | None = None
    ) -> FrozenTrial:
        from autotune.execution.runner import RunLimits, run_trial

        ctx, opts, study = self.ctx, self.opts, self.study
        params = dict(cand.params)
        bs = int(params.get(ctx.space.batch_knob or "batch_size", 1)) if ctx.space.batch_knob else 1
        ga, effective = accumulation_for(bs, ctx.target_effective, ctx.num_gpus)
        tag = uuid.uuid4().hex
        me = ProcessIdentity.current()
        attrs: dict[str, Any] = {
            **me.as_attrs(),
            "role": role,
            "trial_tag": tag,
            "gradient_accumulation_steps": ga,
            "effective_batch": effective,
            "steps": steps or ctx.steps,
            **(extra or {}),
        }
        trial = study.start_trial(params, ctx.dists, attrs)
        if role == "baseline":  # at once: a kill after it finishes must not make a resume run it again
            study.set_attr("baseline_trial", trial.number)
        trial_dir = ctx.study_dir / f"trial-{trial.number:04d}"
        estimate = self._estimate_s()
        self.progress.trial_started(
            trial.number, label(params), estimate, note=f" ({role})" if role != "search" else ""
        )
        attrs_end: dict[str, Any] = {"trial_dir": str(trial_dir), "log_path": str(trial_dir / "stdout.log")}
        try:
            try:
                trial_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a read-only or full study folder: not the candidate's fault
                raise output_error(exc, trial_dir) from None
            spec = ctx.adapter.render(
                ctx.baseline,
                params,
                gradient_accumulation_steps=ga,
                steps=steps or ctx.steps,
                trial_dir=trial_dir,
            )
        except TrialOutputError as exc:
            self._stop_for_output_error(trial, attrs_end, exc)
        except (CandidateRefused, ConfigError) as exc:
            attrs_end.update({"outcome": Outcome.CONFIG_ERROR.value, "reason": _one_line(str(exc))})
            self.progress.trial_finished(trial.number, f"config_error: {_one_line(str(exc))}")
            return study.finish_trial(trial, attrs_end, None)
        spec = replace(spec, env={**spec.env, MARK_VAR: tag, **self._trial_env()})
        attrs_end["command"] = spec.shell_command()
        study.set_trial_attrs(trial, {"command": attrs_end["command"], "trial_dir": str(trial_dir)})

        limits = RunLimits(
            wall_timeout_s=opts.trial_timeout_s or DEFAULT_TRIAL_TIMEOUT_S,
            stall_timeout_s=opts.stall_timeout_s or DEFAULT_STALL_TIMEOUT_S,
        )
        before = self._gpu_used()
        result, error = self._run_watched(run_trial, spec, trial_dir, limits, trial)
        if isinstance(error, TrialOutputError):
            self._stop_for_output_error(trial, attrs_end, error)
        if error is not None:
            attrs_end.update(
                {"outcome": Outcome.CRASH.value, "reason": _one_line(f"could not start: {error}")}
            )
            self.progress.trial_finished(trial.number, f"crash: {attrs_end['reason']}")
            study.finish_trial(trial, attrs_end, None)
            raise error
        assert result is not None
        attrs_end.update(self._measure(result, trial_dir, effective))
        attrs_end["wall_s"] = round(result.wall_s, 3)
        value = attrs_end.get("samples_per_s") if attrs_end["outcome"] == Outcome.OK.value else None
        finished = study.finish_trial(trial, attrs_end, value)
        self.progress.trial_finished(trial.number, _summary(attrs_end))
        self._update_best_line()
        if result.interrupted or self.stop.is_set():
            raise self._interrupted()
        self._drain(before)
        return finished

    def _stop_for_output_error(
        self, trial: FrozenTrial, attrs_end: dict[str, Any], exc: TrialOutputError
    ) -> NoReturn:
        """The trial folder cannot be written: record the trial ``interrupted`` (a resume runs it
        again) and stop the sweep with the error, which says where and what to do."""
        attrs_end.update({"outcome": Outcome.INTERRUPTED.value, "reason": _one_line(str(exc))})
        self.progress.trial_finished(trial.number, f"interrupted: {attrs_end['reason']}")
        self.study.finish_trial(trial, attrs_end, None)
        raise exc

    def _run_watched(
        self, run_trial: Any, spec: LaunchSpec, trial_dir: Path, limits: Any, trial: FrozenTrial
    ) -> tuple[Any, BaseException | None]:
        """Run the trial in a worker thread; meanwhile record its pid and keep the progress view live."""
        from autotune.execution.monitor import ResourceMonitor

        monitor = (
            ResourceMonitor(self.nvml, self.card.indices)
            if self.nvml is not None and self.card.indices
            else None
        )
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = run_trial(
                    spec,
                    trial_dir,
                    limits,
                    monitor=monitor,
                    stop=self.stop,
                    on_output=self.progress.on_output,
                )
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        done = threading.Event()
        worker = threading.Thread(target=work, name=f"trial-{trial.number}", daemon=True)
        worker.start()
        pid_recorded = False
        while not done.wait(0.05 if not pid_recorded else 0.25):  # wakes at once when the trial ends
            if not pid_recorded:
                pid_recorded = self._record_pid(trial, trial_dir)
            self.progress.tick()
        worker.join()
        return box.get("result"), box.get("error")

    def _record_pid(self, trial: FrozenTrial, trial_dir: Path) -> bool:
        """Store the trial's pid/pgid (from the runner's ``process.json``) so a resume can end it."""
        try:
            info = json.loads((trial_dir / "process.json").read_text(encoding="utf-8"))
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        attrs: dict[str, Any] = {"pid": pid, "pgid": pid}
        if info.get("mark"):
            attrs["process_mark"] = str(info["mark"])
        with contextlib.suppress(Exception):
            import psutil

            attrs["pid_start"] = psutil.Process(pid).create_time()
        self.study.set_trial_attrs(trial, attrs)
        return True

    def _measure(self, result: Any, trial_dir: Path, effective: int) -> dict[str, Any]:
        """Metrics, outcome and the user attrs they become; also writes ``metrics.json``."""
        from autotune.core import outcome as oc

        output = _read_output(result)
        try:
            metrics = self.ctx.adapter.read_metrics(trial_dir, output)
        except Exception as exc:  # the contract says never; a bug there must not lose the trial
            metrics = TrialMetrics(source=f"read_metrics failed: {exc}")
        if result.measured_peak_vram_gb is not None:
            metrics.measured_peak_vram_gb = result.measured_peak_vram_gb
        kwargs = {
            "timed_out": result.timed_out,
            "stalled": result.stalled,
            "interrupted": result.interrupted,
            "output": result.output_tail,
            "metrics": metrics,
        }
        why = oc.explain(result.returncode, result.signal, **kwargs)
        outcome, reason = Outcome(why.outcome), str(why.reason)
        attrs: dict[str, Any] = {"outcome": outcome.value, "reason": _one_line(reason)}
        sps = samples_per_s(metrics, effective)
        peak = judged_peak(metrics)
        card_gb, headroom = self.card.vram_gb, self.opts.headroom
        for key, value in (
            ("step_time_s", metrics.step_time_s),
            ("step_time_spread_s", metrics.step_time_spread_s),
            ("samples_per_s", sps),
            ("peak_vram_gb", peak),
            ("trainer_peak_vram_gb", metrics.trainer_peak_vram_gb),
            ("measured_peak_vram_gb", metrics.measured_peak_vram_gb),
            ("peak_host_rss_gb", getattr(result, "peak_host_rss_gb", None)),
        ):
            if value is not None and math.isfinite(value):
                attrs[key] = round(float(value), 6)
        if outcome == Outcome.OK and sps is None:
            attrs.update(
                {
                    "outcome": Outcome.CRASH.value,
                    "reason": "finished but no step time or samples/s could be read",
                }
            )
        if peak is not None:
            attrs["headroom_gb"] = round(card_gb - peak, 4)
        if attrs["outcome"] == Outcome.OK.value:
            attrs["fits"] = fits(peak, card_gb, headroom)
        if outcome == Outcome.OOM:
            details = oc.parse_oom(output)
            if details is not None:
                for key, value in (
                    ("oom_tried_gb", details.tried_gb),
                    ("oom_free_gb", details.free_gb),
                    ("oom_total_gb", details.total_gb),
                ):
                    if value is not None:
                        attrs[f"{key}"] = round(float(value), 4)
        record = {
            **metrics.to_dict(),
            **attrs,
            "returncode": result.returncode,
            "signal": result.signal,
            "wall_s": result.wall_s,
        }
        with contextlib.suppress(OSError):
            (trial_dir / "metrics.json").write_text(
                json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8"
            )
        return attrs

    # between and around trials

    def _gpu_used(self) -> dict[int, int] | None:
        if self.nvml is None or not self.card.indices:
            return None
        from autotune.gpu.drain import used_bytes

        result: dict[int, int] = used_bytes(self.nvml, self.card.indices)
        return result

    def _drain(self, before: dict[int, int] | None) -> None:
        if before is None or self.nvml is None:
            return
        from autotune.gpu.drain import wait_for_drain

        wait_for_drain(self.nvml, self.card.indices, before, self.opts.drain_timeout_s)

    def _estimate_s(self) -> float | None:
        walls = [
            float(t.user_attrs["wall_s"])
            for t in self.study.trials((TrialState.COMPLETE, TrialState.FAIL))
            if isinstance(t.user_attrs.get("wall_s"), (int, float)) and not is_interrupted(t)
        ]
        return statistics.median(walls) if walls else None

    def _update_best_line(self) -> None:
        best = self._fastest_fitting()
        if best is not None:
            self.progress.set_best(f"{best.user_attrs['samples_per_s']:.3g} samples/s (trial {best.number})")

    def _fastest_fitting(self) -> FrozenTrial | None:
        records = [TrialRecord.from_trial(t) for t in self.study.trials((TrialState.COMPLETE,))]
        best, _ = pick_winner(records, self.ctx.space.fidelity, None)
        return self.study.trial(best.number) if best is not None else None

    def _pick_best(self, strategy: Any) -> int | None:
        """The strategy's winner as a trial number (the latest non-confirm trial of that candidate)."""
        pairs = self._observations()
        best = strategy.best([o for _, o in pairs])
        if best is None:
            return None
        cand = getattr(best, "candidate", best)
        for t, o in reversed(pairs):
            if o.candidate == cand and t.user_attrs.get("outcome") == Outcome.OK.value:
                return t.number
        return None

    def _confirm(self, strategy: Any, best_trial: int) -> int | None:
        """Re-run the winner longer; a winner that fails its confirmation gives way to the next best."""
        rejected: set[Any] = set()
        number: int | None = best_trial
        for _ in range(CONFIRM_ATTEMPTS):
            if number is None:
                return None
            t = self.study.trial(number)
            cand = self.ctx.space.candidate(t.params)
            done = [
                c
                for c in self.study.trials((TrialState.COMPLETE, TrialState.FAIL))
                if c.user_attrs.get("confirm_of") == number and not is_interrupted(c)
            ]
            conf = done[-1] if done else None
            if conf is None:
                if (why := self._limit_reached()) is not None:
                    self.progress.line(f"not confirming trial {number}: {why}")
                    return number
                self.progress.line(
                    f"confirming the winner, trial {number}, with {self.ctx.steps * CONFIRM_STEPS_FACTOR} steps"
                )
                conf = self._run_trial(
                    cand,
                    role="confirm",
                    steps=self.ctx.steps * CONFIRM_STEPS_FACTOR,
                    extra={"confirm_of": number},
                )
            if (
                conf.user_attrs.get("outcome") == Outcome.OK.value
                and conf.user_attrs.get("fits") is not False
            ):
                self.study.set_attr("confirmed_by", conf.number)
                return number
            self.progress.line(
                f"trial {number}'s confirmation failed ({conf.user_attrs.get('reason')}); trying the next best"
            )
            rejected.add(cand)
            pairs = [(t, o) for t, o in self._observations() if o.candidate not in rejected]
            nxt = strategy.best([o for _, o in pairs])
            number = None
            if nxt is not None:
                c = getattr(nxt, "candidate", nxt)
                for t2, o in reversed(pairs):
                    if o.candidate == c and t2.user_attrs.get("outcome") == Outcome.OK.value:
                        number = t2.number
                        break
        return number

    def _record_ruled_out(self, strategy: Any) -> None:
        pairs = self._observations()
        by_cand: dict[Any, int] = {}
        for t, o in pairs:
            by_cand[o.candidate] = t.number
        out = []
        try:
            verdicts = strategy.ruled_out([o for _, o in pairs])
        except Exception:  # the report can live without it
            return
        for v in verdicts:
            by = getattr(v, "by", [])
            out.append(
                {
                    "params": dict(v.candidate.params),
                    "reason": str(getattr(v, "reason", "")),
                    "by_trials": sorted({by_cand[c] for c in by if c in by_cand}),
                }
            )
        self.study.set_attr("ruled_out", out)

    def _write_reports(self) -> list[Path]:
        from autotune.report.build import write_reports

        try:
            written = write_reports(self.study.study, self.ctx.study_dir)
        except AutotuneError as exc:
            self.progress.line(f"warning: the report could not be written: {exc}")
            return []
        return [Path(p) for p in written]

    def _result(self, name: str, url: str, best: int | None, why: str, reports: list[Path]) -> SweepResult:
        base_no = self.study.user_attrs.get("baseline_trial")
        base_sps = (
            self.study.trial(base_no).user_attrs.get("samples_per_s") if isinstance(base_no, int) else None
        )
        bt = self.study.trial(best) if best is not None else None
        return SweepResult(
            study=name,
            storage=url,
            best_trial=best,
            best_params=dict(bt.params) if bt else None,
            best_samples_per_s=bt.user_attrs.get("samples_per_s") if bt else None,
            baseline_samples_per_s=base_sps,
            trials_run=self.study.counted_trials(),
            stop_reason=why,
            reports=reports,
            wall_s=time.monotonic() - self.t0,
        )

    def _gate(self, card: Card) -> None:
        """The LTX-2 trainer needs 32 GB: below that, refuse unless --force."""
        if self.opts.trainer != "ltx2" or card.tier != "below-32GB" or self.opts.force:
            return
        from autotune.errors import UnsupportedCardError

        raise UnsupportedCardError(
            f"{card.name} has {card.vram_gb:.1f} GB: the LTX-2 trainer requires a 32 GB card and no tested "
            "config exists below it. Options: a larger card, --vram-gb N to plan for one, or --force to "
            "try the low-VRAM config at your own risk"
        )


_BASELINE_HINTS = {
    Outcome.TIMEOUT.value: "if the trainer is only slow here, raise --trial-timeout (or lower --steps)",
    Outcome.STALLED.value: "if the trainer is silent for long (loading a model), raise --stall-timeout",
    Outcome.CONFIG_ERROR.value: "fix the config (or the command) the trainer rejected",
    Outcome.HOST_OOM.value: "host RAM ran out: free memory, or use a machine with more RAM",
    Outcome.NAN.value: "the loss went NaN with the trainer's own config: check the data and learning rate",
    Outcome.CRASH.value: "fix what the log shows",
}


@dataclass
class _Context:
    adapter: Any
    baseline: Any
    space: Any
    dists: dict[str, Any]
    steps: int
    target_effective: int
    num_gpus: int
    storage_url: str
    study_dir: Path


# --- small helpers --------------------------------------------------------------------------------


def _tier(vram_gb: float) -> str | None:
    """The VRAM tier id (``below-32GB``, ``32GB``, ``40-60GB``, ``80GB+``) of a card size."""
    from autotune.gpu.tiers import classify

    try:
        return str(classify(vram_gb).tier)
    except (ValueError, AutotuneError):
        return None


def _visible_gpus(nvml: Nvml | None) -> list[tuple[int, str, int]]:
    """(NVML index, name, total bytes) of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` kept)."""
    if nvml is None:
        return []
    from autotune.gpu.probe import probe

    try:
        result = probe(lambda: nvml)
        return [(g.nvml_index, g.name, g.memory_total_bytes) for g in result.gpus]
    except Exception:
        return []


def _with_emulated_vram(baseline: Any, vram_gb: float) -> Any:
    """The reference trainer emulates the card on CPU: make its budget the card the sweep judges."""
    ref = baseline.data.get("reference")
    if not isinstance(ref, dict) or ref.get("emulated_vram_gb") == vram_gb:
        return baseline
    from autotune.config.yamlconf import RoundTripConfig, load_yaml

    doc = RoundTripConfig.from_text(baseline.text)
    doc.set("reference.emulated_vram_gb", vram_gb)
    text = doc.dump()
    return replace(baseline, text=text, data=load_yaml(text, str(baseline.path or "<baseline>")))


def _read_output(result: Any, limit: int = 4 * 1024 * 1024) -> str:
    """stdout then stderr, each at most its last ``limit`` bytes (metrics sit at the end)."""
    parts = []
    for path in (result.stdout_path, result.stderr_path):
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - limit))
                parts.append(fh.read().decode("utf-8", errors="replace"))
        except OSError:
            continue
    return "\n".join(parts)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _summary(attrs: Mapping[str, Any]) -> str:
    outcome = attrs.get("outcome")
    if outcome == Outcome.OK.value:
        sps, peak = attrs.get("samples_per_s"), attrs.get("peak_vram_gb")
        fit = {True: "fits", False: "over the headroom", None: "fit unknown"}[attrs.get("fits")]
        peak_txt = f", peak {format_gb(peak)}" if isinstance(peak, (int, float)) else ""
        return f"ok: {sps:.3g} samples/s{peak_txt}, {fit}"
    return f"{outcome}: {_one_line(str(attrs.get('reason', '')), 160)}"
