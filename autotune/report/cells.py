"""What every format shows the same way: the summary lines and the trial table's cells."""

from __future__ import annotations

from pathlib import Path

from autotune.core.units import format_gb, step_time
from autotune.core.verdict import fit_limit_gb, peak_disagreement, speed_disagreement
from autotune.report.model import (
    WINNER_UNMEASURED,
    Report,
    TrialRow,
    busy_note,
    headroom_left,
    oom_text,
    row_fits,
    winner_kind,
)
from autotune.report.text import changes as _changes
from autotune.report.text import config_text
from autotune.report.text import fmt as _fmt
from autotune.report.text import gb as _gb
from autotune.report.text import trials_text as _trials


def _card_line(r: Report) -> str:
    c = r.card
    if not c:
        return "unknown"
    count = c.get("count")
    text = str(c.get("name") or "unknown card")
    if isinstance(count, int) and count > 1:
        text += f" × {count}"
    if r.card_gb is not None:
        text += f", {format_gb(r.card_gb, 'GiB')}"  # a small emulated card in MiB
    if c.get("tier"):
        text += f" (tier {c['tier']})"
    return text


def _measure_line(row: TrialRow) -> str:
    st = row.get("step_time_s")
    step = step_time(st) if isinstance(st, (int, float)) else "— s"
    return f"{_fmt(row.get('samples_per_s'))} samples/s, {step}/step, peak {_size(row.get('peak_vram_gb'))}"


def _size(gb: object) -> str:
    """A memory figure in the report's prose: GiB, or MiB below 1 GiB (a small emulated card)."""
    return format_gb(gb, "GiB") if isinstance(gb, (int, float)) else "— GiB"


def _busy(row: TrialRow) -> str:
    return " (HOST BUSY while measured: speed suspect)" if row.get("busy_host") else ""


def _progress(r: Report) -> str:
    ok = sum(t.outcome == "ok" for t in r.trials)
    text = f"{_trials(r.finished)} finished ({ok} ok, {r.finished - ok} failed), {r.running} running"
    if r.interrupted:
        text += f", {r.interrupted} interrupted (run again, not counted)"
    if r.ruled_out:
        text += f", {len(r.ruled_out)} ruled out without running"
    return text


def savers_line(r: Report) -> str:
    """Whether savers that cost quality beyond the baseline's were allowed, and what was held back."""
    if r.extra_savers:
        return "--allow-extra-savers: savers beyond the baseline's (which may cost quality) were tried too"
    text = "only the baseline's own savers were relaxed (no --allow-extra-savers)"
    if r.held_back:
        held = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in r.held_back.items())
        text += f"; held back, since they would lower the quality the baseline keeps: {held}"
    return text


def summary(r: Report) -> list[tuple[str, str]]:
    """(label, text) pairs for the head of every format."""
    items = [("Card", _card_line(r))]
    if r.emulation:
        items.append(("Emulation", r.emulation))
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
    items.append(("Savers", savers_line(r)))
    if r.host_ram_gb is not None and (r.offload_knobs or any(t.get("host_fits") is False for t in r.trials)):
        whose = "--host-ram-gb" if r.host_ram_given else "this machine's RAM; set it with --host-ram-gb"
        line = fit_limit_gb(r.host_ram_gb, r.headroom or 0.0)
        text = f"fits at <= {_gb(line)} GiB of the trial's processes' RSS ({_gb(r.host_ram_gb)} GiB: {whose})"
        if r.best is not None and r.best.get("peak_host_rss_gb") is not None:
            text += f"; the winner peaked at {_gb(r.best.get('peak_host_rss_gb'))} GiB"
        items.append(("Host RAM", text))
    if r.baseline is None:
        items.append(("Baseline", "not run yet"))
    elif r.baseline.outcome == "ok":
        items.append(
            ("Baseline", f"trial {r.baseline.number}: {_measure_line(r.baseline)}{_busy(r.baseline)}")
        )
    else:
        items.append(("Baseline", f"trial {r.baseline.number}: {r.baseline.label} ({reason(r, r.baseline)})"))
    if r.best is None:
        items.append(
            (
                "Winner",
                f"none yet: {_trials(r.finished)} finished, {r.running} running; no config has fit yet",
            )
        )
    else:
        b = r.best
        what = f"changed: {_changes(b.changed)}" if b.changed else "the baseline config unchanged"
        left = headroom_left(r, b)
        text = f"trial {b.number} ({config_text(b.params, r.knobs)}; {what}): {_measure_line(b)}{_busy(b)}"
        if winner_kind(r) == WINNER_UNMEASURED:  # a speed-up stays, the word "fits" never comes near it
            text = (
                f"{WINNER_UNMEASURED}: {text} (no peak memory was read: how much of your card it "
                "needs is not known)"
            )
        elif left is not None:
            text += f", {_size(left)} left"
        if r.confirmed_by is not None:
            text += f"; confirmed by a longer run, trial {r.confirmed_by}"
        items.append(("Winner", text))
        if r.speedup is not None:
            suspect = " (MEASURED ON A BUSY HOST: suspect, see Warnings)" if busy_note(r) else ""
            items.append(("Speed-up", f"{r.speedup:.2f}× the baseline's samples/s{suspect}"))
    items.append(("Progress", _progress(r)))
    return items


def reason(r: Report, row: TrialRow) -> str:
    """Why the trial ended as it did, in one cell: OOM sizes, the sweep's reason, fit, batch."""
    parts = []
    if row.outcome == "oom" and oom_text(row):
        parts.append(oom_text(row))
    if row.reason and row.reason not in parts:
        parts.append(row.reason)
    if row.outcome == "ok" and row_fits(row, r.limit_gb) is False:
        host_over = row.get("host_fits") is False  # block swap, offload: the host ran short, not the card
        peak = row.get("peak_vram_gb")
        device_over = peak is not None and r.limit_gb is not None and peak > r.limit_gb
        if device_over or not host_over:
            limit = f" ({_size(r.limit_gb)})" if r.limit_gb is not None else ""
            parts.append(f"peak above the headroom limit{limit}: does not fit")
        if host_over:
            host = row.get("peak_host_rss_gb")
            shown = f" {_gb(host)} GiB" if host is not None else ""
            parts.append(
                f"host RAM peak{shown} above the host line (--host-ram-gb less the headroom): does not fit"
            )
    run = row.get("steps_run")
    if isinstance(run, int) and row.outcome == "ok" and isinstance(r.steps, int) and run != r.steps:
        parts.append(f"ran {run} steps (the script's own length; {r.steps} asked)")
    rel = speed_disagreement(row.get("trainer_samples_per_s"), row.get("samples_per_s"))
    if rel is not None and row.get("timed_by") == "hook":
        parts.append(f"the trainer's own samples/s is {rel * 100:+.0f} % off the hook's (see Warnings)")
    if peak_disagreement(row.get("trainer_peak_vram_gb"), row.get("measured_peak_vram_gb")):
        parts.append(
            f"the trainer's peak {_gb(row.get('trainer_peak_vram_gb'))} GiB is over 10 % above ours "
            f"{_gb(row.get('measured_peak_vram_gb'))} GiB; judged on {_gb(row.get('peak_vram_gb'))} GiB"
        )
    if row.get("busy_host"):
        if row.outcome == "ok":
            parts.append(f"HOST BUSY while it ran, its speed is suspect: {row.get('busy_host')}")
        else:
            parts.append(f"host busy while it ran: {row.get('busy_host')}")
    if row.effective_batch_changed:
        parts.append(f"effective batch {row.get('effective_batch')} (baseline {r.baseline_effective_batch})")
    return "; ".join(parts)


def _step_cell(row: TrialRow) -> str:
    st = row.get("step_time_s")
    if st is None:
        return "—"
    sp = row.get("step_time_spread_s")
    return step_time(st, sp) if sp is not None else f"{step_time(st)} (spread unknown)"


def _peak_cells(r: Report, row: TrialRow) -> tuple[str, str, str]:
    left = headroom_left(r, row)
    both = f"{_gb(row.get('trainer_peak_vram_gb'))} / {_gb(row.get('measured_peak_vram_gb'))}"
    if row.get("trainer_peak_vram_gb") is None and row.get("measured_peak_vram_gb") is None:
        both = "—"
    return _gb(row.get("peak_vram_gb")), both, (_gb(left) if left is not None else "—")


def _speed_pair(row: TrialRow) -> str:
    """The trainer's own samples/s beside ours (the hook's); ``—`` for a figure not had."""
    trainer, ours = row.get("trainer_samples_per_s"), row.get("samples_per_s")
    mine = ours if row.get("timed_by") == "hook" else None  # else the trainer's own figure ranked it
    if trainer is None and mine is None:
        return "—"
    return f"{_fmt(trainer) if trainer is not None else '—'} / {_fmt(mine) if mine is not None else '—'}"


def _trial_title(row: TrialRow) -> str:
    tags = [t for t, on in (("winner", row.is_best), ("baseline", row.is_baseline)) if on]
    if row.confirm_of is not None:
        tags.append(f"confirms {row.confirm_of}")
    if row.remeasure_of is not None:
        tags.append(f"re-measures {row.remeasure_of}")
    return f"{row.number}" + (f" ({', '.join(tags)})" if tags else "")


TABLE_HEAD = (
    "#",
    "knobs vs baseline",
    "outcome",
    "step time",
    "samples/s",
    "trainer / ours samples/s",
    "peak GiB",
    "trainer / ours GiB",
    "left GiB",
    "reason",
)


def outcome_cell(r: Report, row: TrialRow) -> str:
    """``ok``, ``ok, too big``, ``ok, fit not measured`` (never a fit unless measured), then ``host busy``."""
    text = row.label
    if row.outcome == "ok":
        fit = row_fits(row, r.limit_gb)
        text = "ok, too big" if fit is False else "ok, fit not measured" if fit is None else "ok"
    return text + (", host busy" if row.get("busy_host") else "")


def trial_cells(r: Report, row: TrialRow) -> list[str]:
    peak, both, left = _peak_cells(r, row)
    return [
        _trial_title(row),
        _changes(row.changed) or "—",
        outcome_cell(r, row),
        _step_cell(row),
        _fmt(row.get("samples_per_s")),
        _speed_pair(row),
        peak,
        both,
        left,
        reason(r, row),
    ]
