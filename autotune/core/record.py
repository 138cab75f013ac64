"""One trial as the study stores it: the only code that knows the trial user-attr keys.

Why one type: the sweep writes a trial's attrs, and the strategy's history, the
report, ``autotune status`` and resume read them back. With the keys spelled in one
place a renamed or new attr cannot be read one way and written another.

Pure: a record is built from anything shaped like Optuna's ``FrozenTrial``
(``number``, ``state``, ``params``, ``value``, ``user_attrs``) and gives back the
attrs dict to store (``TrialRecord.attrs_of``). Values are read as stored: the
typed properties only say ``None`` where a value is missing or of the wrong type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune.core.outcome import Outcome

#: Every user-attr key a trial may carry, with what it holds.
KEYS: dict[str, str] = {
    # who runs it and how
    "role": "baseline, search, remeasure or confirm",
    "trial_tag": "the value of AUTOTUNE_TRIAL_MARK its processes carry",
    "steps": "optimizer steps it was run with",
    "gradient_accumulation_steps": "accumulation derived from its batch size",
    "effective_batch": "batch size x accumulation x GPUs",
    "confirm_of": "the trial whose candidate this longer run confirms",
    "remeasure_of": "the trial whose candidate this run measures again (a near-tie within the noise)",
    "trial_dir": "its folder",
    "log_path": "its log: stdout.log, or stderr.log when that holds the line its reason quotes",
    "command": "the shell command that launched it",
    "launch_digest": "sha256 of its rendered launch (argv, files, env), its own folder left out",
    "same_command_as": "the earlier trial whose identical command it reused instead of running",
    "orchestrator_pid": "pid of the sweep running it",
    "orchestrator_host": "host of that sweep",
    "orchestrator_start": "start time of that sweep's process",
    "orchestrator_place": "boot id and pid namespace of that sweep (same machine or not)",
    "pid": "pid of the trial's process",
    "pgid": "its process group",
    "pid_start": "start time of that pid (pids are reused)",
    "process_mark": "the runner's environment mark on its processes",
    # how it ended
    "outcome": "an Outcome value",
    "reason": "one line on why it ended so",
    "wall_s": "seconds it ran",
    "spent_s": "seconds of trial time it counts for (set when it was recovered)",
    # what it measured
    "step_time_s": "steady-state seconds per optimizer step",
    "step_time_spread_s": "spread of the step time",
    "steps_run": "optimizer steps it really ran (a script without {steps} runs its own length)",
    "steady_steps": "steps its step time was taken over (past the warm-up, full batches)",
    "spread_unknown": "true when the speed is one figure (a trainer's average): no spread was measured",
    "samples_per_s": "throughput",
    "peak_vram_gb": "the judged peak: the larger of the trainer's and ours",
    "trainer_peak_vram_gb": "the trainer's own peak",
    "measured_peak_vram_gb": "autotune's own peak (NVML or the hook)",
    "peak_host_rss_gb": "host RAM peak",
    "trainer_step_time_s": "the trainer's own step time (its log, bar or metrics file), beside ours",
    "trainer_samples_per_s": "the trainer's own samples/s (its stated figure, else the batch over its step time)",
    "timed_by": "whose step times decided samples/s: hook (ours, every optimizer step) or trainer",
    "peak_disagrees": "true when the trainer's peak exceeds ours by more than 10 %",
    "headroom_gb": "card size minus the judged peak",
    "peak_phase": "the phase whose memory set the hook's peak: training, validation or save",
    "memory_note": "the report's memory-phase line: the phase that set the peak, the data bucket trained",
    "fits": "whether the judged peak is within the headroom line (and the host RAM peak within the host line)",
    "host_fits": "whether the host RAM peak is within the host line (--host-ram-gb less the headroom)",
    "oom_tried_gb": "what the failed allocation asked for",
    "oom_free_gb": "what was free then",
    "oom_total_gb": "the card's total as the OOM message says",
    "busy_host": "why the host was busy while it ran (others on its GPU, others' CPU load); absent: quiet",
}

#: The measured figures the report shows for a trial (in this order).
MEASURES = (
    "step_time_s",
    "step_time_spread_s",
    "spread_unknown",
    "steps_run",
    "steady_steps",
    "samples_per_s",
    "trainer_step_time_s",
    "trainer_samples_per_s",
    "timed_by",
    "peak_vram_gb",
    "trainer_peak_vram_gb",
    "measured_peak_vram_gb",
    "headroom_gb",
    "fits",
    "peak_host_rss_gb",
    "host_fits",
    "gradient_accumulation_steps",
    "effective_batch",
    "oom_tried_gb",
    "oom_free_gb",
    "oom_total_gb",
    "busy_host",
)

#: Optuna's trial states by name, as the report spells them.
_STATES = {
    "COMPLETE": "complete",
    "FAIL": "fail",
    "RUNNING": "running",
    "PRUNED": "pruned",
    "WAITING": "waiting",
}


class TrialLike(Protocol):
    """What a record is built from: Optuna's ``FrozenTrial`` has all of it."""

    @property
    def number(self) -> int: ...

    @property
    def params(self) -> dict[str, Any]: ...

    @property
    def value(self) -> float | None: ...

    @property
    def user_attrs(self) -> dict[str, Any]: ...

    @property
    def state(self) -> Any: ...


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class TrialRecord:
    """A trial's params, state and user attrs, read through typed properties."""

    number: int
    state: str = "complete"  # complete, fail, running, pruned, waiting
    params: Mapping[str, Any] = field(default_factory=dict)
    value: float | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)

    # -- building and storing ---------------------------------------------------------------
    @classmethod
    def from_trial(cls, trial: TrialLike) -> TrialRecord:
        """A read-only view of a stored trial (``FrozenTrial`` or alike): its dicts are not copied."""
        state = getattr(trial.state, "name", trial.state)
        return cls(
            number=trial.number,
            state=_STATES.get(str(state), str(state).lower()),
            params=trial.params,
            value=trial.value,
            attrs=trial.user_attrs,
        )

    @staticmethod
    def attrs_of(**values: Any) -> dict[str, Any]:
        """The attrs dict to store for ``values`` (keyword = key); an unknown key is a bug, raised."""
        unknown = sorted(set(values) - set(KEYS))
        if unknown:
            raise KeyError(f"unknown trial attrs {unknown}; add them to autotune.core.record.KEYS")
        return dict(values)

    def get(self, key: str) -> Any:
        """One stored attr, raw (``None`` when absent); ``key`` must be one of ``KEYS``."""
        if key not in KEYS:
            raise KeyError(f"unknown trial attr {key!r}")
        return self.attrs.get(key)

    def measures(self) -> dict[str, Any]:
        """The measured figures it has (``MEASURES`` order), raw as stored."""
        return {k: self.attrs[k] for k in MEASURES if self.attrs.get(k) is not None}

    # -- how it ended ---------------------------------------------------------------------------
    @property
    def outcome(self) -> str | None:
        value = self.attrs.get("outcome")
        return None if value is None else str(value)

    @property
    def reason(self) -> str:
        return str(self.attrs.get("reason") or "")

    @property
    def role(self) -> str | None:
        value = self.attrs.get("role")
        return None if value is None else str(value)

    @property
    def is_ok(self) -> bool:
        return self.attrs.get("outcome") == Outcome.OK.value

    @property
    def is_interrupted(self) -> bool:
        """Ctrl-C or a dead orchestrator: not the candidate's fault, and run again."""
        return self.attrs.get("outcome") == Outcome.INTERRUPTED.value

    @property
    def confirm_of(self) -> int | None:
        value = self.attrs.get("confirm_of")
        return value if isinstance(value, int) else None

    @property
    def remeasure_of(self) -> int | None:
        value = self.attrs.get("remeasure_of")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def trial_dir(self) -> str | None:
        value = self.attrs.get("trial_dir")
        return value if isinstance(value, str) else None

    @property
    def wall_s(self) -> float | None:
        return _number(self.attrs.get("wall_s"))

    @property
    def spent_s(self) -> float | None:
        return _number(self.attrs.get("spent_s"))

    # -- what it measured -----------------------------------------------------------------------
    @property
    def samples_per_s(self) -> float | None:
        return _number(self.attrs.get("samples_per_s"))

    @property
    def step_time_s(self) -> float | None:
        return _number(self.attrs.get("step_time_s"))

    @property
    def step_time_spread_s(self) -> float | None:
        return _number(self.attrs.get("step_time_spread_s"))

    @property
    def relative_spread(self) -> float | None:
        """Spread over step time (0.02 is 2 %), as the strategy and the near-tie rule want it."""
        step, spread = self.step_time_s, self.step_time_spread_s
        if step is None or spread is None or step <= 0:
            return None
        return spread / step

    @property
    def spread_unknown(self) -> bool:
        """The speed is one figure: its noise was not measured (never invented)."""
        return self.attrs.get("spread_unknown") is True

    @property
    def busy_host(self) -> str | None:
        """Why the host was busy while the trial ran; ``None``: it was not (or not known)."""
        value = self.attrs.get("busy_host")
        return value if isinstance(value, str) and value else None

    @property
    def fit_measured(self) -> bool:
        """Whether the trial's fit was judged on a peak (or recorded): ``False`` is "fit not measured"."""
        return self.fits is not None or self.peak_vram_gb is not None

    @property
    def peak_vram_gb(self) -> float | None:
        return _number(self.attrs.get("peak_vram_gb"))

    @property
    def memory_note(self) -> str | None:
        """What set its memory peak and on which data (recorded when judged); ``None``: nothing known."""
        value = self.attrs.get("memory_note")
        return value if isinstance(value, str) and value else None

    @property
    def fits(self) -> bool | None:
        value = self.attrs.get("fits")
        return value if isinstance(value, bool) else None

    # -- its processes (for ending what a dead sweep left behind) --------------------------------
    @property
    def pid(self) -> int | None:
        value = self.attrs.get("pid")
        return value if isinstance(value, int) else None

    @property
    def pgid(self) -> int | None:
        """Its recorded process group (a runner's trial leads its own: usually its pid)."""
        value = self.attrs.get("pgid")
        return value if isinstance(value, int) else None

    @property
    def pid_start(self) -> float | None:
        return _number(self.attrs.get("pid_start"))

    @property
    def trial_tag(self) -> str | None:
        value = self.attrs.get("trial_tag")
        return value if isinstance(value, str) else None

    @property
    def process_mark(self) -> str | None:
        value = self.attrs.get("process_mark")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class TrialCounts:
    """How many trials a study has run: the one count every view says (the sweep's last line,
    ``status``, the report), with one meaning.

    ``finished``: finished trials that are results (ok or failed for the candidate's sake), which is
    what ``--max-trials`` counts; ``outcomes`` breaks exactly those down (it sums to ``finished``).
    ``interrupted``: trials cut short by Ctrl-C or a dead orchestrator, not the candidate's fault and
    run again, so never counted as finished; shown beside the count when there are any.
    """

    finished: int
    interrupted: int
    outcomes: dict[str, int]

    def phrase(self) -> str:
        """``9 trials finished`` or ``9 trials finished (+2 interrupted, run again)``."""
        text = f"{self.finished} trial{'' if self.finished == 1 else 's'} finished"
        return text + (f" (+{self.interrupted} interrupted, run again)" if self.interrupted else "")


def count_trials(records: Iterable[TrialRecord]) -> TrialCounts:
    """The counts of ``records`` (every trial of the study; running and waiting ones are left out)."""
    outcomes: dict[str, int] = {}
    finished = interrupted = 0
    for r in records:
        if r.state not in ("complete", "fail", "pruned"):
            continue
        if r.is_interrupted:
            interrupted += 1
            continue
        finished += 1
        key = r.outcome or r.state
        outcomes[key] = outcomes.get(key, 0) + 1
    return TrialCounts(finished, interrupted, dict(sorted(outcomes.items())))


def busy_speed_note(winner: TrialRecord | None, baseline: TrialRecord | None) -> str | None:
    """The one sentence every view gives (report head and Warnings, the sweep's last lines) when the
    winner's or the baseline's speed was measured while the host was busy; ``None`` when neither was.

    A busy host slows a trial by whatever else ran, so the speed-up between the two is suspect.
    """
    busy = [
        (role, r)
        for role, r in (("winner", winner), ("baseline", baseline))
        if r is not None and r.busy_host is not None
    ]
    if winner is not None and baseline is not None and winner.number == baseline.number:
        busy = busy[:1]
    if not busy:
        return None
    which = " and ".join(f"the {role}'s (trial {r.number}: {r.busy_host})" for role, r in busy)
    return (
        f"Measured on a busy host: {which} speed; the speed-up is suspect. Run the sweep again on a "
        "quiet host (a new study, or --study NAME) to trust it."
    )
