"""The best-config report people read in the morning.

It answers at a glance: what won, how much faster than the baseline, how safe it
is, why everything else lost, and what command to run now. ``build_report`` reads
a study (read-only) into a plain ``Report``; ``render_markdown``, ``render_html``
and ``render_json`` only format it, so they are pure and exactly testable.
``write_reports`` is what the sweep calls at its end.

The study is read through the contract in the helper brief: study user attrs
``settings``, ``baseline_params``, ``ruled_out``, ``baseline_trial``, ``workdir``
(and optionally ``best_trial``, the sweep's own pick), trial params and user attrs.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import hashlib
import inspect
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.yamlconf import load_yaml
from autotune.errors import AutotuneError, StorageError, UsageError
from autotune.report import svgchart
from autotune.store.sqlite import check_sqlite_file
from autotune.store.storage import new_rdb_storage
from autotune.store.urls import DB_FILE, DEFAULT_WORKDIR, redact_url
from autotune.trainers import Baseline, TrainerAdapter, get_adapter

REPORT_FORMATS = ("md", "html", "json")
#: Preferred values for near-ties when the trainer's knob file names none.
DEFAULT_FIDELITY: dict[str, Any] = {"quantization": "none", "optimizer": "adamw"}
#: Colours by outcome, shared by the chart and its legend.
OUTCOME_COLORS = {
    "ok": "#1a9850",
    "over": "#f39c12",  # ok, but above the headroom limit
    "oom": "#d7191c",
    "host_oom": "#8e0152",
    "timeout": "#7b3294",
    "stalled": "#5e3c99",
    "nan": "#2c7bb6",
    "config_error": "#555555",
    "crash": "#000000",
    "interrupted": "#999999",
    "running": "#bbbbbb",
}
LINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")
MEASURES = (
    "step_time_s",
    "step_time_spread_s",
    "samples_per_s",
    "peak_vram_gb",
    "trainer_peak_vram_gb",
    "measured_peak_vram_gb",
    "headroom_gb",
    "fits",
    "gradient_accumulation_steps",
    "effective_batch",
    "oom_tried_gb",
    "oom_free_gb",
    "oom_total_gb",
)


class StudyNotFoundError(UsageError):
    """No study database at the given place, or no study of that name in it."""


class ReportError(AutotuneError):
    """The report or the winning config cannot be produced from what the study holds."""


# --- the data -----------------------------------------------------------------------------------


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
    is_baseline: bool = False
    is_best: bool = False
    effective_batch_changed: bool = False

    def get(self, key: str) -> Any:
        return self.measures.get(key)

    @property
    def label(self) -> str:
        return "running" if self.outcome is None and self.state == "running" else (self.outcome or self.state)


@dataclass
class RuledOut:
    params: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]
    reason: str
    by_trials: list[int]


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
    command: str | None = None  # launch the full training with the winning config
    best_config_path: str | None = None
    timelines: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # trial -> (t, GiB)
    confirmed_by: int | None = None  # the longer re-run that confirmed the winner
    trainer_options: dict[str, Any] = field(default_factory=dict)  # how the sweep built its adapter
    baseline_effective_batch: int | None = None

    @property
    def card_gb(self) -> float | None:
        v = self.card.get("vram_gb")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def limit_gb(self) -> float | None:
        """The most peak VRAM a config may use and still count as fitting."""
        if self.card_gb is None:
            return None
        return self.card_gb * (1.0 - (self.headroom or 0.0))


# --- opening a study read-only ------------------------------------------------------------------


def default_storage(workdir: Path | None = None) -> str:
    return f"sqlite:///{(workdir or DEFAULT_WORKDIR).as_posix()}/{DB_FILE}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The study storage, opened for reading: never creates a database or its tables."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StudyNotFoundError(
            f"--storage {redact_url(url)!r} is not a database URL; use sqlite:///PATH/studies.db or "
            "postgresql://USER@HOST/DB"
        ) from None
    connect_args: dict[str, Any] = {}
    open_url = url
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or not Path(db).is_file():
            raise StudyNotFoundError(
                f"no study database at {db or url!r}; run 'autotune sweep' first, or point "
                "--storage (or --workdir) at the sweep's studies.db"
            )
        check_sqlite_file(Path(db))  # not SQLite, damaged, another program's, a newer Optuna's
        # SQLite's own read-only mode: even Optuna's start-up bookkeeping cannot write.
        open_url = f"sqlite:///file:{quote(str(Path(db).resolve()))}?mode=ro&uri=true"
        connect_args["timeout"] = 20  # a live sweep may hold the lock for a moment
    elif parsed.get_backend_name().startswith("postgres"):
        connect_args["connect_timeout"] = 20
    shown = redact_url(url)
    try:
        parsed.get_dialect()
    except Exception:  # sqlalchemy has no such database kind: the URL is wrong, not the database
        raise StudyNotFoundError(
            f"--storage {shown!r}: unknown database kind {parsed.drivername!r}; use sqlite:///PATH/studies.db "
            "or postgresql://USER@HOST/DB"
        ) from None
    try:
        return new_rdb_storage(
            open_url, {"connect_args": connect_args}, create=False, skip_compatibility_check=True
        )
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {shown}: {_first_line(exc)} (is it an autotune study database?)"
        ) from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def open_study(url: str, name: str | None) -> optuna.Study:
    """Load study ``name`` (or the only one) from ``url`` without writing to it."""
    storage = open_storage(url)
    try:
        names = optuna.study.get_all_study_names(storage=storage)
    except Exception as exc:
        raise StorageError(
            f"cannot read studies from {redact_url(url)}: {_first_line(exc)} (is it an autotune study database?)"
        ) from None
    if name is None:
        if not names:
            raise StudyNotFoundError(f"{redact_url(url)} holds no study yet; run 'autotune sweep' first")
        if len(names) > 1:
            listed = ", ".join(sorted(names))
            raise StudyNotFoundError(
                f"{redact_url(url)} holds several studies ({listed}); pick one with --study NAME"
            )
        name = names[0]
    elif name not in names:
        listed = ", ".join(sorted(names)) or "none"
        raise StudyNotFoundError(f"no study named {name!r} in {redact_url(url)} (studies there: {listed})")
    return optuna.load_study(study_name=name, storage=storage)


# --- building the report ------------------------------------------------------------------------


def _state(trial: FrozenTrial) -> str:
    return {
        TrialState.COMPLETE: "complete",
        TrialState.FAIL: "fail",
        TrialState.RUNNING: "running",
        TrialState.PRUNED: "pruned",
        TrialState.WAITING: "waiting",
    }[trial.state]


def _knob_names(settings: Mapping[str, Any], baseline_params: Mapping[str, Any]) -> list[str]:
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


def _same(a: Any, b: Any) -> bool:
    """Param equality where ``None`` and ``"none"`` are one value (YAML null in the study)."""

    def norm(v: Any) -> Any:
        return "none" if v is None else v

    return bool(norm(a) == norm(b))


def _diff(
    params: Mapping[str, Any], base: Mapping[str, Any], knobs: Sequence[str]
) -> dict[str, tuple[Any, Any]]:
    order = list(knobs) + sorted(k for k in params if k not in knobs)
    return {k: (base.get(k), params[k]) for k in order if k in params and not _same(params[k], base.get(k))}


def _load_fidelity(trainer: str) -> dict[str, Any]:
    try:
        from configs import config_file

        text = config_file("knobs", f"{trainer}.yaml").read_text(encoding="utf-8")
        data = load_yaml(text, f"configs/knobs/{trainer}.yaml")
    except (OSError, AutotuneError):
        return dict(DEFAULT_FIDELITY)
    fid = data.get("fidelity") if isinstance(data, Mapping) else None
    return dict(fid) if isinstance(fid, Mapping) else dict(DEFAULT_FIDELITY)


def _resolve(path: str | None, root: Path | None) -> Path | None:
    if not path:
        return None
    p = Path(path)
    return p if p.is_absolute() or root is None else root / p


def read_timeline(path: Path) -> list[tuple[float, float]]:
    """``memory.csv`` as (seconds, VRAM GiB) pairs; rows without a VRAM reading are left out."""
    out: list[tuple[float, float]] = []
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                try:
                    t, v = float(row.get("t_s") or ""), float(row.get("vram_gb") or "")
                except ValueError:
                    continue
                if math.isfinite(t) and math.isfinite(v):
                    out.append((t, v))
    except OSError:
        return []
    return out


def _fits(row: TrialRow, limit_gb: float | None) -> bool | None:
    fits = row.get("fits")
    if isinstance(fits, bool):
        return fits
    peak = row.get("peak_vram_gb")
    if isinstance(peak, (int, float)) and limit_gb is not None:
        return bool(peak <= limit_gb)
    return None


def _rel_noise(row: TrialRow) -> float:
    st, sp = row.get("step_time_s"), row.get("step_time_spread_s")
    if isinstance(st, (int, float)) and isinstance(sp, (int, float)) and st > 0:
        return float(sp) / float(st)
    return 0.0


def _fidelity_score(row: TrialRow, fidelity: Mapping[str, Any]) -> int:
    return sum(1 for k, v in fidelity.items() if k in row.params and _same(row.params[k], v))


#: Run-to-run noise floor for near-ties (the strategy's ``min_noise``).
MIN_NOISE = 0.015


def _candidates(rows: Sequence[TrialRow], limit_gb: float | None) -> list[TrialRow]:
    """Trials that may win: ran ok, measured, fit; confirmation re-runs are not candidates."""
    return [
        r
        for r in rows
        if r.outcome == "ok"
        and r.confirm_of is None
        and isinstance(r.get("samples_per_s"), (int, float))
        and _fits(r, limit_gb) is not False
    ]


def _tied(a: TrialRow, b: TrialRow) -> bool:
    """Whether the slower of two trials is within the noise of the faster (as the strategy judges)."""
    lo, hi = sorted((float(a.get("samples_per_s")), float(b.get("samples_per_s"))))
    return lo >= hi * (1.0 - max(_rel_noise(a), _rel_noise(b), MIN_NOISE))


def _beaten_on_fidelity(best: TrialRow, ok: Sequence[TrialRow]) -> TrialRow | None:
    """The fastest trial faster than ``best`` but within noise of it: the near-tie fidelity decided."""
    faster = [
        r for r in ok if r is not best and float(r.get("samples_per_s")) > float(best.get("samples_per_s"))
    ]
    if not faster:
        return None
    top = max(faster, key=lambda r: (r.get("samples_per_s"), -r.number))
    return top if _tied(top, best) else None


def pick_best(
    rows: Sequence[TrialRow], fidelity: Mapping[str, Any], limit_gb: float | None
) -> tuple[TrialRow | None, TrialRow | None]:
    """The fastest ok trial that fits, near-ties (within noise) going to fidelity.

    The sweep records its own pick (study attr ``best_trial``), which the report
    prefers; this is the same rule, for a study that is still running.
    Returns (winner, the faster trial it beat on fidelity, or None).
    """
    ok = _candidates(rows, limit_gb)
    if not ok:
        return None, None
    fastest = max(ok, key=lambda r: (r.get("samples_per_s"), -r.number))
    tied = [r for r in ok if _tied(r, fastest)]
    best = max(tied, key=lambda r: (_fidelity_score(r, fidelity), r.get("samples_per_s"), -r.number))
    return best, _beaten_on_fidelity(best, ok)


def _fmt(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, no exponent (table cells)."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    decimals = max(0, min(4, digits - 1 - math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def _gb(x: Any) -> str:
    """Two decimals, as the trainer prints; tiny (emulated demo) figures keep three digits."""
    if not isinstance(x, (int, float)):
        return "—"
    return f"{x:.2f}" if abs(x) >= 0.1 or x == 0 else f"{x:.3g}"


def _val(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _changes(changed: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k} {_val(a)} → {_val(b)}" for k, (a, b) in changed.items())


def _quality_note(knob: str, value: Any, preferred: Any) -> str:
    if knob == "quantization":
        return (
            f"The winner keeps quantization {_val(value)} (the full-precision choice is {_val(preferred)}): "
            "quantized base weights can lower the quality of the trained LoRA. Compare its samples "
            "against a full-precision run before relying on it."
        )
    if knob == "optimizer":
        return (
            f"The winner uses the {_val(value)} optimizer (full precision: {_val(preferred)}): an 8-bit "
            "optimizer state usually trains close to AdamW but can converge differently; watch the loss."
        )
    return f"The winner uses {knob} {_val(value)} rather than the higher-fidelity {_val(preferred)}; it may affect quality."


def _row_from_trial(
    t: FrozenTrial, base: Mapping[str, Any], knobs: Sequence[str], baseline_number: int | None
) -> TrialRow:
    attrs = t.user_attrs
    measures = {k: attrs[k] for k in MEASURES if attrs.get(k) is not None}
    outcome = attrs.get("outcome")
    state = _state(t)
    if outcome is None and state == "fail":
        outcome = "crash"
    return TrialRow(
        number=t.number,
        state=state,
        params=dict(t.params),
        changed=_diff(t.params, base, knobs),
        outcome=str(outcome) if outcome is not None else None,
        reason=str(attrs.get("reason") or ""),
        measures=measures,
        trial_dir=attrs.get("trial_dir"),
        confirm_of=attrs["confirm_of"] if isinstance(attrs.get("confirm_of"), int) else None,
        is_baseline=t.number == baseline_number,
    )


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


def build_report(
    study: optuna.Study,
    *,
    workdir: Path | None = None,
    report_dir: Path | None = None,
    best_config_path: Path | None = None,
) -> Report:
    """Read ``study`` (never writes to it) into a ``Report``.

    ``workdir`` is the sweep's folder (default: the study's ``workdir`` attr, else
    ``./autotune-runs``); ``report_dir`` the study's own folder in it, where the
    sweep writes its reports and winning config (default: ``<workdir>/<study>``).
    ``best_config_path`` is where the winning config is (or will be) written; the
    launch command names it (default: ``<report_dir>/best-config.yaml``).
    """
    sattrs = study.user_attrs
    settings: dict[str, Any] = dict(sattrs.get("settings") or {})
    base: dict[str, Any] = dict(sattrs.get("baseline_params") or {})
    trainer = str(settings.get("trainer") or "unknown")
    card = dict(settings.get("card") or {})
    headroom = settings.get("headroom")
    headroom = float(headroom) if isinstance(headroom, (int, float)) else None
    knobs = _knob_names(settings, base)
    root = workdir or (Path(sattrs["workdir"]) if sattrs.get("workdir") else DEFAULT_WORKDIR)
    report_dir = report_dir or root / study.study_name
    baseline_number = sattrs.get("baseline_trial")
    baseline_number = int(baseline_number) if isinstance(baseline_number, int) else None
    fidelity = {k: v for k, v in _load_fidelity(trainer).items() if k in knobs or not knobs}

    trials = study.get_trials(deepcopy=False)
    rows = [_row_from_trial(t, base, knobs, baseline_number) for t in trials]
    by_number = {r.number: r for r in rows}
    baseline = by_number.get(baseline_number) if baseline_number is not None else None

    options = settings.get("trainer_options")
    report = Report(
        trainer_options=dict(options) if isinstance(options, Mapping) else {},
        study=study.study_name,
        trainer=trainer,
        card=card,
        headroom=headroom,
        steps=settings.get("steps") if isinstance(settings.get("steps"), int) else None,
        config_path=str(settings["config_path"]) if settings.get("config_path") else None,
        knobs=knobs,
        baseline_params=base,
        fidelity=fidelity,
        trials=rows,
        ruled_out=[],
        baseline=baseline,
        best=None,
        speedup=None,
        warnings=[],
        finished=sum(r.state in ("complete", "fail", "pruned") for r in rows),
        running=sum(r.state == "running" for r in rows),
    )
    for item in sattrs.get("ruled_out") or []:
        if isinstance(item, Mapping):
            params = dict(item.get("params") or {})
            report.ruled_out.append(
                RuledOut(
                    params=params,
                    changed=_diff(params, base, knobs),
                    reason=str(item.get("reason") or ""),
                    by_trials=[int(n) for n in item.get("by_trials") or []],
                )
            )

    # The winner: the sweep's own pick when it recorded one, else the same rule recomputed.
    beaten: TrialRow | None = None
    best: TrialRow | None = None
    if "best_trial" in sattrs:  # the sweep finished and picked (None: nothing fit or survived confirmation)
        chosen = sattrs.get("best_trial")
        if isinstance(chosen, int) and chosen in by_number and by_number[chosen].outcome == "ok":
            best = by_number[chosen]
            beaten = _beaten_on_fidelity(best, _candidates(rows, report.limit_gb))
    else:
        best, beaten = pick_best(rows, fidelity, report.limit_gb)
    confirmed = sattrs.get("confirmed_by")
    report.confirmed_by = confirmed if isinstance(confirmed, int) and confirmed in by_number else None
    report.best = best
    if best is not None:
        best.is_best = True
    base_sps = baseline.get("samples_per_s") if baseline is not None and baseline.outcome == "ok" else None
    if best is not None and isinstance(base_sps, (int, float)) and base_sps > 0:
        report.speedup = round(float(best.get("samples_per_s")) / float(base_sps), 4)

    # Effective batch: the baseline's, from its trial or from its params.
    base_eff = baseline.get("effective_batch") if baseline is not None else None
    if base_eff is None and isinstance(base.get("batch_size"), int):
        base_eff = (
            base["batch_size"]
            * int(base.get("gradient_accumulation_steps") or 1)
            * int(card.get("count") or 1)
        )
    report.baseline_effective_batch = base_eff if isinstance(base_eff, int) else None
    for r in rows:
        eff = r.get("effective_batch")
        r.effective_batch_changed = eff is not None and base_eff is not None and eff != base_eff

    # Timelines of the leading trials: the winner, the baseline, then the fastest others.
    leading: list[TrialRow] = [r for r in (best, baseline) if r is not None]
    for r in sorted(
        (r for r in rows if r.outcome == "ok"), key=lambda r: (-(r.get("samples_per_s") or 0), r.number)
    ):
        if len(leading) >= 4:
            break
        if r not in leading:
            leading.append(r)
    for r in leading:
        folder = _resolve(r.trial_dir, root)
        if folder is not None:
            points = read_timeline(folder / "memory.csv")
            if points:
                report.timelines[r.number] = points

    _add_warnings(report, beaten, base_eff)
    _add_command(report, report_dir, best_config_path)
    return report


def _add_warnings(report: Report, beaten: TrialRow | None, base_eff: Any) -> None:
    best, w = report.best, report.warnings
    if best is None:
        return
    if best.effective_batch_changed:
        w.append(
            f"The effective batch changed: the winner trains {best.get('effective_batch')} samples per "
            f"optimizer step, the baseline {base_eff} (batch size × gradient accumulation × GPUs). "
            "Scale the learning rate and the number of steps to match."
        )
    for knob, preferred in report.fidelity.items():
        if knob in best.params and not _same(best.params[knob], preferred):
            w.append(_quality_note(knob, best.params[knob], preferred))
    if report.trainer == "ltx2":
        w.append(
            "The LTX-2 trainer's own peak ('Peak GPU memory') is device-wide nvidia-smi memory, sampled "
            "only at a few points (start, first step, every 200 steps, end) and including other "
            "processes; autotune's own measure is shown beside it."
        )
    left = _headroom_left(report, best)
    keep = (
        f" It leaves {_gb(left)} GiB of the {_gb(report.card_gb)} GiB card free; keep that headroom."
        if left is not None
        else ""
    )
    w.append(
        "The trials were short runs: validation sampling and checkpoint saving were not exercised, and "
        "a longer clip in the data can peak higher later." + keep
    )
    if beaten is not None:
        w.append(
            f"Near-tie decided by fidelity: trial {beaten.number} measured "
            f"{_fmt(beaten.get('samples_per_s'))} samples/s against the winner's "
            f"{_fmt(best.get('samples_per_s'))}, within the measured noise; the winner keeps "
            "higher-fidelity settings."
        )


def _headroom_left(report: Report, row: TrialRow) -> float | None:
    left = row.get("headroom_gb")
    if isinstance(left, (int, float)):
        return float(left)
    peak = row.get("peak_vram_gb")
    if isinstance(peak, (int, float)) and report.card_gb is not None:
        return report.card_gb - float(peak)
    return None


def _option_value(text: Any) -> Any:
    """A trainer option as the study stores it (text) back to its value: lists, booleans, None."""
    if isinstance(text, str) and (text[:1] in "[({" or text in ("True", "False", "None")):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def _adapter(report: Report) -> TrainerAdapter:
    """The sweep's adapter, rebuilt with the trainer options it ran with (e.g. ``trainer_dir``)."""
    options = {k: _option_value(v) for k, v in report.trainer_options.items()}
    if options:
        try:
            return get_adapter(report.trainer, **options)
        except AutotuneError:
            pass  # options from another version of the adapter: the bare adapter still knows its format
    return get_adapter(report.trainer)


#: File suffix of each built-in trainer's own config format (sana's is a runnable script of flags).
_SUFFIXES = {"sana": ".sh"}


def _config_suffix(adapter: TrainerAdapter) -> str:
    return str(getattr(adapter, "config_suffix", None) or _SUFFIXES.get(adapter.name, ".yaml"))


def _add_command(report: Report, report_dir: Path, best_config_path: Path | None) -> None:
    if report.best is None:
        return
    try:
        adapter = _adapter(report)
    except AutotuneError as exc:
        report.warnings.append(f"No launch command: {exc}")
        return
    path = best_config_path or report_dir / f"best-config{_config_suffix(adapter)}"
    report.best_config_path = str(path)
    kwargs: dict[str, Any] = {}
    try:
        accepts = inspect.signature(adapter.training_command).parameters
    except (TypeError, ValueError):
        accepts = {}  # type: ignore[assignment]
    if "baseline" in accepts and report.config_path:
        # Adapters that launch several GPUs or read the trainer dir from the config want the whole picture.
        try:
            kwargs["baseline"] = adapter.load_baseline(Path(report.config_path))
        except AutotuneError:
            pass
        else:
            if "params" in accepts:
                kwargs["params"] = report.best.params
            if "gradient_accumulation_steps" in accepts:
                kwargs["gradient_accumulation_steps"] = _best_gas(report)
    try:
        report.command = adapter.training_command(path, **kwargs)
    except AutotuneError as exc:
        report.warnings.append(f"No launch command: {exc}")


def _best_gas(report: Report) -> int:
    gas = report.best.get("gradient_accumulation_steps") if report.best is not None else None
    if isinstance(gas, int):
        return gas
    return int(report.baseline_params.get("gradient_accumulation_steps") or 1)


def load_baseline(report: Report) -> tuple[TrainerAdapter, Baseline]:
    """The adapter and the baseline config the sweep started from, as it is on disk now."""
    adapter = _adapter(report)
    baseline = adapter.load_baseline(Path(report.config_path) if report.config_path else None)
    return adapter, baseline


def winning_config(report: Report, expected_hash: str | None = None) -> str:
    """The winning config in the trainer's own format: the baseline with only the winning knobs changed."""
    best = report.best
    if best is None:
        raise ReportError(
            f"study {report.study!r} has no config that fit yet ({_trials(report.finished)} finished, "
            f"{report.running} running); nothing to write"
        )
    adapter, baseline = load_baseline(report)
    if expected_hash and not _hash_matches(expected_hash, baseline):
        report.warnings.append(
            f"The baseline config {report.config_path} seems to have changed since the sweep measured it "
            "(its hash differs from the study's): the written config carries those changes too."
        )
    return adapter.final_config(baseline, best.params, gradient_accumulation_steps=_best_gas(report))


def _hash_matches(expected: str, baseline: Baseline) -> bool:
    """Whether ``expected`` (hex, maybe ``sha256:``-prefixed or shortened) is the baseline's hash."""
    want = expected.split(":", 1)[-1].strip().lower()
    if len(want) < 8:
        return True  # too short to judge
    texts = [baseline.text, json.dumps(baseline.data, sort_keys=True, default=str)]
    return any(hashlib.sha256(t.encode("utf-8")).hexdigest().startswith(want) for t in texts)


# --- rendering: Markdown ------------------------------------------------------------------------


def _card_line(r: Report) -> str:
    c = r.card
    if not c:
        return "unknown"
    count = c.get("count")
    text = str(c.get("name") or "unknown card")
    if isinstance(count, int) and count > 1:
        text += f" × {count}"
    if r.card_gb is not None:
        text += f", {_gb(r.card_gb)} GiB"
    if c.get("tier"):
        text += f" (tier {c['tier']})"
    return text


def _measure_line(row: TrialRow) -> str:
    return (
        f"{_fmt(row.get('samples_per_s'))} samples/s, {_fmt(row.get('step_time_s'))} s/step, "
        f"peak {_gb(row.get('peak_vram_gb'))} GiB"
    )


def _trials(n: int) -> str:
    return f"{n} trial" if n == 1 else f"{n} trials"


def _progress(r: Report) -> str:
    ok = sum(t.outcome == "ok" for t in r.trials)
    text = f"{_trials(r.finished)} finished ({ok} ok, {r.finished - ok} failed), {r.running} running"
    if r.ruled_out:
        text += f", {len(r.ruled_out)} ruled out without running"
    return text


def _summary(r: Report) -> list[tuple[str, str]]:
    """(label, text) pairs for the head of every format."""
    items = [("Card", _card_line(r))]
    trainer = r.trainer
    if r.config_path:
        trainer += f", from {Path(r.config_path).name}"
    extras = []
    if r.steps is not None:
        extras.append(f"{r.steps} steps per trial")
    if r.headroom is not None:
        extras.append(f"headroom {r.headroom * 100:g} %")
    if extras:
        trainer += f" ({', '.join(extras)})"
    items.append(("Trainer", trainer))
    if r.baseline is None:
        items.append(("Baseline", "not run yet"))
    elif r.baseline.outcome == "ok":
        items.append(("Baseline", f"trial {r.baseline.number}: {_measure_line(r.baseline)}"))
    else:
        items.append(
            ("Baseline", f"trial {r.baseline.number}: {r.baseline.label} ({_reason(r, r.baseline)})")
        )
    if r.best is None:
        items.append(
            (
                "Winner",
                f"none yet: {_trials(r.finished)} finished, {r.running} running; no config has fit yet",
            )
        )
    else:
        b = r.best
        what = _changes(b.changed) or "the baseline config unchanged"
        left = _headroom_left(r, b)
        text = f"trial {b.number} ({what}): {_measure_line(b)}"
        if left is not None:
            text += f", {_gb(left)} GiB left"
        if r.confirmed_by is not None:
            text += f"; confirmed by a longer run, trial {r.confirmed_by}"
        items.append(("Winner", text))
        if r.speedup is not None:
            items.append(("Speed-up", f"{r.speedup:.2f}× the baseline's samples/s"))
    items.append(("Progress", _progress(r)))
    return items


def _reason(r: Report, row: TrialRow) -> str:
    """Why the trial ended as it did, in one cell: OOM sizes, the sweep's reason, fit, batch."""
    parts = []
    if row.outcome == "oom" and oom_text(row):
        parts.append(oom_text(row))
    if row.reason and row.reason not in parts:
        parts.append(row.reason)
    if row.outcome == "ok" and _fits(row, r.limit_gb) is False:
        limit = f" ({_gb(r.limit_gb)} GiB)" if r.limit_gb is not None else ""
        parts.append(f"peak above the headroom limit{limit}: does not fit")
    if row.effective_batch_changed:
        parts.append(f"effective batch {row.get('effective_batch')} (baseline {r.baseline_effective_batch})")
    return "; ".join(parts)


def _step_cell(row: TrialRow) -> str:
    st = row.get("step_time_s")
    if st is None:
        return "—"
    sp = row.get("step_time_spread_s")
    return f"{_fmt(st)} s ± {_fmt(sp, 2)}" if sp is not None else f"{_fmt(st)} s"


def _peak_cells(r: Report, row: TrialRow) -> tuple[str, str, str]:
    left = _headroom_left(r, row)
    both = f"{_gb(row.get('trainer_peak_vram_gb'))} / {_gb(row.get('measured_peak_vram_gb'))}"
    if row.get("trainer_peak_vram_gb") is None and row.get("measured_peak_vram_gb") is None:
        both = "—"
    return _gb(row.get("peak_vram_gb")), both, (_gb(left) if left is not None else "—")


def _trial_title(row: TrialRow) -> str:
    tags = [t for t, on in (("winner", row.is_best), ("baseline", row.is_baseline)) if on]
    if row.confirm_of is not None:
        tags.append(f"confirms {row.confirm_of}")
    return f"{row.number}" + (f" ({', '.join(tags)})" if tags else "")


TABLE_HEAD = (
    "#",
    "knobs vs baseline",
    "outcome",
    "step time",
    "samples/s",
    "peak GiB",
    "trainer / ours GiB",
    "left GiB",
    "reason",
)


def _trial_cells(r: Report, row: TrialRow) -> list[str]:
    peak, both, left = _peak_cells(r, row)
    return [
        _trial_title(row),
        _changes(row.changed) or "—",
        "ok, too big" if row.outcome == "ok" and _fits(row, r.limit_gb) is False else row.label,
        _step_cell(row),
        _fmt(row.get("samples_per_s")),
        peak,
        both,
        left,
        _reason(r, row),
    ]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def render_markdown(report: Report) -> str:
    r = report
    out = [f"# autotune report: {r.study}", ""]
    out += [f"- **{label}:** {text}" for label, text in _summary(r)]
    out.append("")
    if r.command:
        out += ["## Launch the full training", "", "```bash", r.command, "```", ""]
        out.append(
            f"The winning config is `{r.best_config_path}`: the baseline with only the winning knobs "
            "changed (`autotune report --write-config FILE` writes it anywhere)."
        )
        out.append("")
    if r.warnings:
        out += ["## Warnings", ""]
        out += [f"- {w}" for w in r.warnings]
        out.append("")
    out += ["## Trials", ""]
    if r.trials:
        out += _md_table(TABLE_HEAD, [_trial_cells(r, t) for t in r.trials])
    else:
        out.append("No trial has started yet.")
    out.append("")
    if r.ruled_out:
        out += ["## Ruled out without running", ""]
        out += _md_table(
            ("knobs vs baseline", "reason", "by trials"),
            [
                (_changes(x.changed) or "—", x.reason, ", ".join(str(n) for n in x.by_trials) or "—")
                for x in r.ruled_out
            ],
        )
        out.append("")
    return "\n".join(out)


# --- rendering: JSON ----------------------------------------------------------------------------


def _json_trial(row: TrialRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number": row.number,
        "state": row.state,
        "params": row.params,
        "outcome": row.outcome,
    }
    if row.reason:
        out["reason"] = row.reason
    out.update(row.measures)
    return out


def _json_pick(row: TrialRow | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out: dict[str, Any] = {
        "trial": row.number,
        "params": row.params,
        "outcome": row.outcome,
        "samples_per_s": row.get("samples_per_s"),
        "step_time_s": row.get("step_time_s"),
        "peak_vram_gb": row.get("peak_vram_gb"),
    }
    for k in MEASURES:
        if k not in out and row.get(k) is not None:
            out[k] = row.get(k)
    return out


def report_dict(report: Report) -> dict[str, Any]:
    """The JSON contract (DESIGN.md, "The report") as plain data."""
    r = report
    return {
        "study": r.study,
        "trainer": r.trainer,
        "card": r.card,
        "headroom": r.headroom,
        "steps": r.steps,
        "config_path": r.config_path,
        "status": {
            "finished": r.finished,
            "running": r.running,
            "ok": sum(t.outcome == "ok" for t in r.trials),
            "ruled_out": len(r.ruled_out),
        },
        "baseline_params": r.baseline_params,
        "baseline": _json_pick(r.baseline),
        "best": _json_pick(r.best),
        "speedup": r.speedup,
        "command": r.command,
        "best_config_path": r.best_config_path,
        "warnings": r.warnings,
        "trials": [_json_trial(t) for t in r.trials],
        "ruled_out": [
            {"params": x.params, "reason": x.reason, "by_trials": x.by_trials} for x in r.ruled_out
        ],
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, ensure_ascii=False) + "\n"


# --- rendering: HTML ----------------------------------------------------------------------------


_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1120px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.summary dt { font-weight: 600; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
tr.best td { background: #fff7d6; font-weight: 600; }
pre { background: #f4f4f4; padding: 10px; overflow-x: auto; }
.warn li { margin-bottom: 4px; }
figure { margin: 12px 0; } figcaption { font-size: 0.9em; color: #555; }
"""


def _point_for(r: Report, row: TrialRow) -> svgchart.Point | None:
    sps = row.get("samples_per_s")
    peak = row.get("peak_vram_gb")
    if peak is None:
        peak = row.get("measured_peak_vram_gb")
    key = row.label
    if row.outcome == "ok" and _fits(row, r.limit_gb) is False:
        key = "over"
    color = OUTCOME_COLORS.get(key, "#000000")
    title = f"trial {row.number}: {row.label}; {_changes(row.changed) or 'baseline knobs'}"
    if row.outcome == "oom":
        tried, free, total = row.get("oom_tried_gb"), row.get("oom_free_gb"), row.get("oom_total_gb")
        if tried is not None and free is not None and total is not None:
            peak = float(total) - float(free) + float(tried)  # what it needed, at least
        elif peak is None:
            peak = r.card_gb
    if peak is None:
        return None
    label = f"#{row.number}"
    if row.is_best:
        label = f"winner #{row.number}"
    elif row.is_baseline:
        label = f"baseline #{row.number}"
    return svgchart.Point(
        x=float(peak),
        y=float(sps) if isinstance(sps, (int, float)) else 0.0,
        color=color,
        label=label,
        marker="circle" if isinstance(sps, (int, float)) else "cross",
        title=title,
        highlight=row.is_best,
    )


def _vram_lines(r: Report) -> list[svgchart.RefLine]:
    out = []
    if r.card_gb is not None:
        out.append(svgchart.RefLine(r.card_gb, f"card {_gb(r.card_gb)} GiB", "#d7191c"))
        if r.headroom and r.limit_gb is not None:
            out.append(
                svgchart.RefLine(r.limit_gb, f"headroom limit {_gb(r.limit_gb)} GiB", "#e66101", dashed=True)
            )
    return out


def speed_chart(r: Report) -> str | None:
    """Samples/s against peak VRAM, one point per trial; None when nothing can be placed."""
    points = [p for p in (_point_for(r, t) for t in r.trials) if p is not None]
    if not points:
        return None
    x_max = max([p.x for p in points] + [r.card_gb or 0.0]) * 1.05
    y_max = max(p.y for p in points) * 1.15 or 1.0
    seen: list[tuple[str, str]] = []
    for p in points:
        if p.color not in [c for c, _ in seen]:
            name = next((k for k, v in OUTCOME_COLORS.items() if v == p.color), "?")
            seen.append((p.color, "ok, over the headroom limit" if name == "over" else name))
    axes = svgchart.Axes("peak VRAM (GiB)", "samples / s", x_max, y_max, legend=seen)
    return svgchart.scatter(axes, points, _vram_lines(r), "samples per second against peak VRAM")


def memory_chart(r: Report) -> str | None:
    """VRAM over time for the leading trials; None when no timeline was recorded."""
    if not r.timelines:
        return None
    series = []
    legend = []
    for i, (number, pts) in enumerate(r.timelines.items()):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        row = next(t for t in r.trials if t.number == number)
        name = f"trial {number}" + (" (winner)" if row.is_best else " (baseline)" if row.is_baseline else "")
        series.append(svgchart.Series(svgchart.downsample(pts), color, name))
        legend.append((color, name))
    x_max = max(p[0] for s in series for p in s.points) or 1.0
    y_max = max([p[1] for s in series for p in s.points] + [r.card_gb or 0.0]) * 1.05
    axes = svgchart.Axes("time since start (s)", "VRAM (GiB)", x_max, y_max, legend=legend)
    return svgchart.lines(axes, series, _vram_lines(r), "VRAM over time for the leading trials")


def render_html(report: Report) -> str:
    """One self-contained page: no scripts, no external resources, charts as inline SVG."""
    r = report
    e = escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>autotune report: {e(r.study)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autotune report: {e(r.study)}</h1>",
        '<dl class="summary">',
    ]
    out += [f"<dt>{e(label)}</dt><dd>{e(text)}</dd>" for label, text in _summary(r)]
    out.append("</dl>")
    if r.command:
        out += [
            "<h2>Launch the full training</h2>",
            f"<pre><code>{e(r.command)}</code></pre>",
            f"<p>The winning config is <code>{e(r.best_config_path or '')}</code>: the baseline with only "
            "the winning knobs changed.</p>",
        ]
    if r.warnings:
        out += (
            ["<h2>Warnings</h2>", '<ul class="warn">'] + [f"<li>{e(w)}</li>" for w in r.warnings] + ["</ul>"]
        )
    chart = speed_chart(r)
    if chart:
        out += [
            "<h2>Speed against memory</h2>",
            f'<figure id="speed-chart">{chart}<figcaption>One point per trial, coloured by outcome; '
            "failed trials (×) sit at the memory they needed, at zero speed. The winner is ringed.</figcaption>"
            "</figure>",
        ]
    mem = memory_chart(r)
    if mem:
        out += [
            "<h2>Memory over time</h2>",
            f'<figure id="memory-chart">{mem}<figcaption>Sampled VRAM of the leading trials.</figcaption></figure>',
        ]
    out.append("<h2>Trials</h2>")
    if r.trials:
        out.append(
            "<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in TABLE_HEAD) + "</tr></thead><tbody>"
        )
        for t in r.trials:
            cls = ' class="best"' if t.is_best else ""
            out.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in _trial_cells(r, t)) + "</tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p>No trial has started yet.</p>")
    if r.ruled_out:
        out += [
            "<h2>Ruled out without running</h2>",
            "<table><thead><tr><th>knobs vs baseline</th><th>reason</th><th>by trials</th></tr></thead><tbody>",
        ]
        for x in r.ruled_out:
            by = ", ".join(str(n) for n in x.by_trials) or "—"
            out.append(
                f"<tr><td>{e(_changes(x.changed) or '—')}</td><td>{e(x.reason)}</td><td>{e(by)}</td></tr>"
            )
        out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


RENDERERS = {"md": render_markdown, "html": render_html, "json": render_json}


# --- writing ------------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file, so a reader never sees half a report; scripts (``#!``) run.

    A folder that cannot be made, a full or read-only disk: ``ReportError`` naming the path
    (the temporary file is removed; an earlier file at ``path`` stays as it was)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        if text.startswith("#!"):
            tmp.chmod(0o755)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ReportError(
            f"cannot write {path}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else "")
            + "; pick another path, or make room on that disk"
        ) from None


def write_reports(study: optuna.Study, out_dir: Path) -> list[Path]:
    """Write report.md, report.html, report.json and (when a config fit) the winning config
    into ``out_dir`` (the sweep passes the study's own folder, ``<workdir>/<study>``).

    Called by the sweep at its end; a winning config that cannot be rendered (the
    baseline file moved) is noted in the reports, not raised.
    """
    report = build_report(study, report_dir=out_dir)
    written: list[Path] = []
    if report.best is not None and report.best_config_path:
        try:
            text = winning_config(report, settings_hash(study))
        except AutotuneError as exc:
            report.warnings.append(f"The winning config was not written: {exc}")
            report.command = None
        else:
            path = Path(report.best_config_path)
            write_text_atomic(path, text)
            written.append(path)
    for fmt, render in RENDERERS.items():
        path = out_dir / f"report.{fmt}"
        write_text_atomic(path, render(report))
        written.append(path)
    return written


def settings_hash(study: optuna.Study) -> str | None:
    settings = study.user_attrs.get("settings") or {}
    value = settings.get("base_config_hash") if isinstance(settings, Mapping) else None
    return str(value) if value else None
