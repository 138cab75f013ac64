"""Building the report: the study, read once (never written), into a ``Report``."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.knobs import trainer_fidelity
from autotune.core.record import TrialRecord, count_trials
from autotune.core.space import same_param
from autotune.core.units import format_gb
from autotune.core.verdict import peak_disagreement, speed_disagreement
from autotune.errors import AutotuneError
from autotune.report.model import (
    WINNER_UNMEASURED,
    Report,
    RuledOut,
    TrialRow,
    beaten_on_fidelity,
    busy_note,
    diff,
    headroom_left,
    knob_names,
    pick_best,
    row_from_trial,
    winner_kind,
)
from autotune.report.opening import DEFAULT_WORKDIR
from autotune.report.phases import (
    PHASES_EXERCISED,
    VALIDATION_SKIPPED,
    phase_lines,
    validation_ran,
    validation_skipped,
)
from autotune.report.text import fmt as _fmt
from autotune.report.text import gb as _gb
from autotune.report.text import val as _val
from autotune.report.winning import adapter_for, add_command, data_warnings
from autotune.store.optuna_private import read_study_trials
from autotune.store.settings import settings_of
from autotune.store.study import card_gb_of
from autotune.trainers import TrainerAdapter, adapter_class


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
    settings = settings_of(sattrs)
    base: dict[str, Any] = dict(sattrs.get("baseline_params") or {})
    trainer = str(settings.get("trainer") or "unknown")
    card = dict(settings.get("card") or {})
    if (exact := card_gb_of(sattrs)) is not None:
        card["vram_gb"] = exact  # the settings keep 0.01 GB: a small emulated card needs its bytes
    if not _tiered(trainer):  # the VRAM tiers are the LTX-2 trainer's; a tier means nothing to others
        card.pop("tier", None)
    headroom = settings.get("headroom")
    headroom = float(headroom) if isinstance(headroom, (int, float)) else None
    knobs = knob_names(settings, base)
    root = workdir or (Path(sattrs["workdir"]) if sattrs.get("workdir") else DEFAULT_WORKDIR)
    report_dir = report_dir or root / study.study_name
    baseline_number = sattrs.get("baseline_trial")
    baseline_number = int(baseline_number) if isinstance(baseline_number, int) else None
    fidelity: dict[str, Any] = dict(trainer_fidelity(trainer, knobs))

    trials = read_study_trials(study)
    counts = count_trials(TrialRecord.from_trial(t) for t in trials)
    rows = [row_from_trial(t, base, knobs, baseline_number) for t in trials]
    by_number = {r.number: r for r in rows}
    baseline = by_number.get(baseline_number) if baseline_number is not None else None

    options = settings.get("trainer_options")
    report = Report(
        trainer_options=dict(options) if isinstance(options, Mapping) else {},
        full_steps=settings["full_steps"] if isinstance(settings.get("full_steps"), int) else None,
        launch_cwd=str(settings["launch_cwd"]) if settings.get("launch_cwd") else None,
        emulation=str(settings["emulation"]) if settings.get("emulation") else None,
        extra_savers=settings.get("allow_extra_savers") is True,
        held_back={
            str(k): list(v) for k, v in dict(settings.get("held_back") or {}).items() if isinstance(v, list)
        },
        host_changes=[str(c) for c in settings.get("host_changes") or ()],
        host_ram_gb=_number(settings.get("host_ram_gb", settings.get("machine_ram_gb"))),
        host_ram_given=isinstance(settings.get("host_ram_gb"), (int, float)),
        offload_knobs=any(
            isinstance(k, Mapping) and k.get("type") in ("count", "fraction")
            for k in settings.get("knobs") or []
        ),
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
        finished=counts.finished,
        interrupted=counts.interrupted,
        running=sum(r.state == "running" for r in rows),
    )
    for item in sattrs.get("ruled_out") or []:
        if isinstance(item, Mapping):
            params = dict(item.get("params") or {})
            report.ruled_out.append(
                RuledOut(
                    params=params,
                    changed=diff(params, base, knobs),
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
            beaten = beaten_on_fidelity(best, rows, fidelity, report.limit_gb)
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

    # Effective batch: the baseline's as recorded, on its trial or (no baseline trial) on the study.
    base_eff = baseline.get("effective_batch") if baseline is not None else None
    if base_eff is None:
        base_eff = sattrs.get("effective_batch")
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

    report.optuna_judges_fit, report.optuna_best = optuna_best(trials)
    report.memory_phases = phase_lines(rows)
    _add_warnings(
        report, beaten, base_eff, validated=validation_ran(rows, lambda r: _resolve(r.trial_dir, root))
    )
    add_command(report, report_dir, best_config_path, _resolve(best.trial_dir, root) if best else None)
    return report


def disagreement_warnings(report: Report) -> list[str]:
    """Where the trainer's own figures and ours differ by more than 10 %: both named, and why."""
    out = []
    speed = [
        (r, rel)
        for r in report.trials
        if r.get("timed_by") == "hook"
        and (rel := speed_disagreement(r.get("trainer_samples_per_s"), r.get("samples_per_s"))) is not None
    ]
    if speed:
        r, rel = speed[0]
        listed = ", ".join(str(t.number) for t, _ in speed)
        out.append(
            f"The trainer's own samples/s differs from ours by more than 10 % on trial(s) {listed} "
            f"(trial {r.number}: trainer {_fmt(r.get('trainer_samples_per_s'))}, ours "
            f"{_fmt(r.get('samples_per_s'))}, {rel * 100:+.0f} %): {_speed_note(report.trainer)}. Every "
            "trial is ranked by ours: the hook's CUDA-synchronized time of every optimizer step, warm-up "
            "left out, the batch credited per step."
        )
    for r in report.trials:
        if peak_disagreement(r.get("trainer_peak_vram_gb"), r.get("measured_peak_vram_gb")):
            judged = r.get("peak_vram_gb")
            out.append(
                f"Trial {r.number}: the trainer's own peak {_gb(r.get('trainer_peak_vram_gb'))} GiB is over "
                f"10 % above ours {_gb(r.get('measured_peak_vram_gb'))} GiB; fit was judged on "
                f"{_gb(judged)} GiB"
                + (
                    " (ours saw every phase on the device)"
                    if judged is not None and judged == r.get("measured_peak_vram_gb")
                    else " (the larger: ours may have missed a phase)"
                )
                + "."
            )
    return out


def _speed_note(trainer: str) -> str:
    try:
        return adapter_class(trainer).traits.speed_note
    except AutotuneError:
        return TrainerAdapter.traits.speed_note


def _add_warnings(report: Report, beaten: TrialRow | None, base_eff: Any, *, validated: bool = False) -> None:
    best, w = report.best, report.warnings
    w.extend(disagreement_warnings(report))
    if (busy := busy_note(report)) is not None:
        w.append(busy)
    if best is None:
        return
    if winner_kind(report) == WINNER_UNMEASURED:
        w.append(
            f"Fit not measured: the winner is the {WINNER_UNMEASURED} (no peak memory was read for it: "
            "no GPU driver and no emulated card, or a trainer that reports no peak with the hook off). "
            "Run on the target GPU, or on CPU pass --vram-gb N with the trial-side hook on, to judge fit."
        )
    if best.effective_batch_changed:
        w.append(
            f"The effective batch changed: the winner trains {best.get('effective_batch')} samples per "
            f"optimizer step, the baseline {base_eff} (batch size × gradient accumulation × GPUs). "
            "Scale the learning rate and the number of steps to match."
        )
    for knob, preferred in report.fidelity.items():
        if knob in best.params and not same_param(best.params[knob], preferred):
            w.append(_quality_note(knob, best.params[knob], preferred))
    w.extend(_adapter_notes(report))
    w.extend(data_warnings(report))
    w.extend(f"Trials changed for the sweep's host: {change}." for change in report.host_changes)
    left = headroom_left(report, best)
    keep = (
        f" It leaves {format_gb(left, 'GiB')} of the {format_gb(report.card_gb, 'GiB')} card free; keep that headroom."
        if left is not None and report.card_gb is not None
        else ""
    )
    if validation_skipped(report):
        w.append(VALIDATION_SKIPPED)
    short = (
        PHASES_EXERCISED
        if validated
        else "The trials were short runs: validation sampling and checkpoint saving were not exercised, "
        f"and {_longer_input(report.trainer)} can peak higher later."
    )
    w.append(short + keep)
    if beaten is not None:
        w.append(
            f"Near-tie decided by fidelity: trial {beaten.number} measured "
            f"{_fmt(beaten.get('samples_per_s'))} samples/s against the winner's "
            f"{_fmt(best.get('samples_per_s'))}, within the measured noise; the winner keeps "
            "higher-fidelity settings."
        )
    if report.optuna_judges_fit and report.optuna_best != best.number:
        w.append(_optuna_differs(report, best, beaten))


def optuna_best(trials: Sequence[FrozenTrial]) -> tuple[bool, int | None]:
    """(whether Optuna's tools judge fit here, the trial ``optuna best-trial`` answers).

    As ``Study.best_trial`` does: once any trial carries constraint values, the fastest
    COMPLETE trial whose values are all <= 0 (the earliest among equals); else no verdict.
    """
    if not any(t.constraints for t in trials):
        return False, None
    feasible = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.value is not None
        and all(v <= 0 for v in t.constraints.values())
    ]
    if not feasible:
        return True, None
    return True, max(feasible, key=lambda t: (t.value, -t.number)).number


def _optuna_differs(report: Report, best: TrialRow, beaten: TrialRow | None) -> str:
    """One line naming both trials when Optuna's own best is not autotune's winner."""
    n = report.optuna_best
    tools = "Optuna's own best (`optuna best-trial`, `study.best_trial`)"
    if n is None:
        return (
            f"{tools} finds no feasible trial, while the winner is trial {best.number}: its fit was not "
            "measured (no peak VRAM figure), and Optuna counts an unmeasured fit as not fitting."
        )
    row = next((r for r in report.trials if r.number == n), None)
    speed = f" ({_fmt(row.get('samples_per_s'))} samples/s)" if row is not None else ""
    if beaten is not None and beaten.number == n:
        why = "a near-tie decided for fidelity (above)."
    elif best.record().fits is None:
        why = "the winner's fit was not measured, and Optuna counts an unmeasured fit as not fitting."
    else:
        why = "they rank equal measures in a different order."
    return f"{tools} is trial {n}{speed}, not the winner, trial {best.number}: {why}"


def _adapter_notes(report: Report) -> list[str]:
    """What the sweep's trainer wants every reader of a winner to know (its ``report_notes``)."""
    try:
        traits = adapter_for(report).traits
    except AutotuneError:
        return []
    has_own_peak = report.best is not None and report.best.get("trainer_peak_vram_gb") is not None
    return [*traits.report_notes, *([traits.peak_note] if traits.peak_note and has_own_peak else [])]


def _tiered(trainer: str) -> bool:
    """Whether the trainer's configs come in VRAM tiers (so the card's tier means something)."""
    try:
        cls = adapter_class(trainer)
    except AutotuneError:
        return True  # a trainer this version does not know: show what the study recorded
    return cls.traits.tiered


def _longer_input(trainer: str) -> str:
    try:
        return adapter_class(trainer).traits.longer_input
    except AutotuneError:
        return TrainerAdapter.traits.longer_input


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
