"""The report's data: a study read into rows, and who won (by ``autotune.core.verdict``'s rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.core import verdict
from autotune.core.record import KEYS, MEASURES, TrialLike, TrialRecord, busy_speed_note
from autotune.core.space import same_param
from autotune.report.text import gb as _gb

__all__ = ["MEASURES", "Report", "RuledOut", "TrialRow", "knob_names", "pick_best"]


@dataclass
class TrialRow:
    """One trial as the report shows it."""

    number: int
    state: str  # complete, fail, running, pruned, waiting
    params: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]  # knob -> (baseline value, this trial's value)
    outcome: str | None  # None while running
    reason: str = ""
    measures: dict[str, Any] = field(default_factory=dict)  # only those it has, see MEASURES
    trial_dir: str | None = None
    confirm_of: int | None = None  # a longer re-run that confirms this trial's candidate
    remeasure_of: int | None = None  # a run again of this trial's candidate: a near-tie within the noise
    is_baseline: bool = False
    is_best: bool = False
    effective_batch_changed: bool = False
    memory_note: str | None = None  # the phase that set its peak, the bucket it trained (as recorded)

    def get(self, key: str) -> Any:
        """A measured figure by its record key (``autotune.core.record.KEYS``; a typo raises)."""
        if key not in KEYS:
            raise KeyError(f"unknown trial attr {key!r}")
        return self.measures.get(key)

    def record(self) -> TrialRecord:
        """The row as a stored trial, for the verdict (which alone picks the winner)."""
        attrs = TrialRecord.attrs_of(**self.measures, outcome=self.outcome, confirm_of=self.confirm_of)
        return TrialRecord(self.number, self.state, self.params, None, attrs)

    @property
    def label(self) -> str:
        return "running" if self.outcome is None and self.state == "running" else (self.outcome or self.state)


@dataclass
class RuledOut:
    params: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]
    reason: str
    by_trials: list[int]


def busy_note(report: Report) -> str | None:
    """``core.record.busy_speed_note`` for the report's winner and baseline."""
    best, base = report.best, report.baseline
    return busy_speed_note(
        best.record() if best is not None else None,
        base.record() if base is not None and base.outcome == "ok" else None,
    )


@dataclass
class Report:
    """Everything the three formats show; built once by ``build_report``."""

    study: str
    trainer: str
    card: dict[str, Any]  # name, vram_gb, count, tier
    headroom: float | None  # fraction of the card kept free
    steps: int | None
    config_path: str | None  # the baseline config the sweep started from
    knobs: list[str]
    baseline_params: dict[str, Any]
    fidelity: dict[str, Any]
    trials: list[TrialRow]
    ruled_out: list[RuledOut]
    baseline: TrialRow | None
    best: TrialRow | None
    speedup: float | None
    warnings: list[str]
    finished: int
    running: int
    #: Trials cut short (Ctrl-C, a dead orchestrator) and run again: not in ``finished``.
    interrupted: int = 0
    command: str | None = None  # launch the full training with the winning config
    best_config_path: str | None = None
    timelines: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # trial -> (t, GiB)
    confirmed_by: int | None = None  # the longer re-run that confirmed the winner
    trainer_options: dict[str, Any] = field(default_factory=dict)  # how the sweep built its adapter
    full_steps: int | None = None  # the full training's step count (``--full-steps``), for the command
    launch_cwd: str | None = None  # the folder a template trainer's trials ran in
    baseline_effective_batch: int | None = None
    #: Optuna's own feasible best (what ``optuna best-trial`` answers); ``None``: none, or a study
    #: stored before trials carried fit constraints (see ``optuna_best``).
    optuna_best: int | None = None
    optuna_judges_fit: bool = False
    #: How the card was emulated (``settings["emulation"]``: counted on CPU, capped on a larger GPU,
    #: or why not); ``None``: a real card, or a study from before it was recorded.
    emulation: str | None = None
    #: What every trial ran differently on the sweep's host (``settings["host_changes"]``: a
    #: setting that needs CUDA turned off where there is none).
    host_changes: list[str] = field(default_factory=list)
    #: Per trial: the phase (training, validation, save) that set its peak, the data bucket judged.
    memory_phases: list[str] = field(default_factory=list)
    #: The host RAM the trials were judged against (GB) and whether ``--host-ram-gb`` set it (else
    #: the machine's); shown where offload knobs were swept or a run passed the host line.
    host_ram_gb: float | None = None
    host_ram_given: bool = False
    offload_knobs: bool = False
    #: Whether ``--allow-extra-savers`` let the sweep try savers that cost quality beyond the
    #: baseline's, and (when not) the fidelity knobs' values it held back for that reason.
    extra_savers: bool = False
    held_back: dict[str, list[Any]] = field(default_factory=dict)
    #: What ``report.winning`` read once for this report (the adapter, the baseline on disk or why
    #: it could not be read): the launch command, the data warnings and the winning config share it.
    on_disk: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def card_gb(self) -> float | None:
        v = self.card.get("vram_gb")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def limit_gb(self) -> float | None:
        """The most peak VRAM a config may use and still count as fitting."""
        if self.card_gb is None:
            return None
        return verdict.fit_limit_gb(self.card_gb, self.headroom or 0.0)


def knob_names(settings: Mapping[str, Any], baseline_params: Mapping[str, Any]) -> list[str]:
    knobs = settings.get("knobs")
    names: list[str] = []
    if isinstance(knobs, Mapping):
        names = [str(k) for k in knobs]
    elif isinstance(knobs, list):
        for k in knobs:
            if isinstance(k, Mapping) and "name" in k:
                names.append(str(k["name"]))
            elif isinstance(k, str):
                names.append(k)
    if not names:
        names = [k for k in baseline_params if k != "gradient_accumulation_steps"]
    return names


def diff(
    params: Mapping[str, Any], base: Mapping[str, Any], knobs: Sequence[str]
) -> dict[str, tuple[Any, Any]]:
    """Knob -> (baseline value, this value) for every knob that differs (``None`` and ``none`` alike)."""
    order = list(knobs) + sorted(k for k in params if k not in knobs)
    return {
        k: (base.get(k), params[k]) for k in order if k in params and not same_param(params[k], base.get(k))
    }


def row_from_trial(
    t: TrialLike, base: Mapping[str, Any], knobs: Sequence[str], baseline_number: int | None
) -> TrialRow:
    rec = TrialRecord.from_trial(t)
    outcome = rec.outcome
    if outcome is None and rec.state == "fail":
        outcome = "crash"
    return TrialRow(
        number=rec.number,
        state=rec.state,
        params=dict(rec.params),
        changed=diff(rec.params, base, knobs),
        outcome=outcome,
        reason=rec.reason,
        measures=rec.measures(),
        trial_dir=rec.get("trial_dir"),
        confirm_of=rec.confirm_of,
        remeasure_of=rec.remeasure_of,
        is_baseline=rec.number == baseline_number,
        memory_note=rec.memory_note,
    )


def row_fits(row: TrialRow, limit_gb: float | None) -> bool | None:
    """The row's fit as the verdict judges it (recorded, else its peak against the limit)."""
    return verdict.record_fits(row.record(), limit_gb)


#: How every format names the winner: a fit that was not measured is never called a fit.
WINNER_FITS = "fastest that fits"
WINNER_UNMEASURED = "fastest; fit not measured"


def winner_kind(report: Report) -> str | None:
    """``fastest that fits`` or ``fastest; fit not measured`` for the report's winner; ``None``: none."""
    if report.best is None:
        return None
    return WINNER_FITS if row_fits(report.best, report.limit_gb) is not None else WINNER_UNMEASURED


def pick_best(
    rows: Sequence[TrialRow], fidelity: Mapping[str, Any], limit_gb: float | None
) -> tuple[TrialRow | None, TrialRow | None]:
    """The fastest ok trial that fits, near-ties (within noise) going to fidelity.

    The sweep records its own pick (study attr ``best_trial``), which the report
    prefers; this is the same rule (``autotune.core.verdict``), for a study that is
    still running. Returns (winner, the faster trial it beat on fidelity, or None).
    """
    pairs = [(row, row.record()) for row in rows]
    lookup = {id(rec): row for row, rec in pairs}
    best, beaten = verdict.pick_winner([rec for _, rec in pairs], fidelity, limit_gb)
    return (
        lookup[id(best)] if best is not None else None,
        lookup[id(beaten)] if beaten is not None else None,
    )


def beaten_on_fidelity(
    best: TrialRow, rows: Sequence[TrialRow], fidelity: Mapping[str, Any], limit_gb: float | None
) -> TrialRow | None:
    """For the sweep's own pick: the faster trial within its noise that fidelity beat, if any."""
    pairs = [(row, row.record()) for row in rows]
    lookup = {id(rec): row for row, rec in pairs}
    beaten = verdict.beaten_by_fidelity(best.record(), [rec for _, rec in pairs], fidelity, limit_gb)
    return lookup[id(beaten)] if beaten is not None else None


def oom_text(row: TrialRow) -> str:
    """``tried 2.00 GiB with 1.12 GiB free of 79.60 GiB`` from the trial's OOM details."""
    tried, free, total = row.get("oom_tried_gb"), row.get("oom_free_gb"), row.get("oom_total_gb")
    if tried is None:
        return ""
    text = f"tried {_gb(tried)} GiB"
    if free is not None:
        text += f" with {_gb(free)} GiB free"
        if total is not None:
            text += f" of {_gb(total)} GiB"
    return text


def headroom_left(report: Report, row: TrialRow) -> float | None:
    left = row.get("headroom_gb")
    if isinstance(left, (int, float)):
        return float(left)
    peak = row.get("peak_vram_gb")
    if isinstance(peak, (int, float)) and report.card_gb is not None:
        return report.card_gb - float(peak)
    return None
