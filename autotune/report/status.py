"""``autotune status``: a sweep's progress, read from its study without disturbing it.

Safe from another shell while the sweep runs: it opens the database read-only in
spirit (never creates it, never writes), and SQLite's WAL journal plus a connect
timeout keep both sides clear of "database is locked".
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from autotune.config.knobs import trainer_fidelity
from autotune.core import verdict
from autotune.core.record import TrialRecord, count_trials
from autotune.core.units import format_duration, format_gb, plain
from autotune.report.model import knob_names
from autotune.store import study as st
from autotune.store import urls
from autotune.store.identity import ProcessIdentity
from autotune.store.settings import settings_of
from autotune.store.storage import open_storage


def collect(*, storage: str | None, workdir: Path | None, study: str | None) -> dict[str, Any]:
    """Everything the status view shows, as plain data (``--json`` prints it as is)."""
    url = storage or urls.default_storage_url(workdir or urls.DEFAULT_WORKDIR)
    s = st.SweepStudy.load(open_storage(url, read_only=True), study)
    attrs = s.user_attrs
    settings = settings_of(attrs)
    trials = s.trials()
    records = [TrialRecord.from_trial(t) for t in trials]
    now = dt.datetime.now()
    counts = count_trials(records)
    running = []
    for t, r in zip(trials, records, strict=True):
        if t.state != TrialState.RUNNING:
            continue
        owner = ProcessIdentity.from_attrs(t.user_attrs)
        running.append(
            {
                "number": t.number,
                "params": dict(t.params),
                "role": r.get("role"),
                "elapsed_s": (now - t.datetime_start).total_seconds() if t.datetime_start else None,
                "orchestrator_pid": owner.pid if owner else None,
                "orchestrator_alive": owner.alive() if owner else False,
                "trial_dir": r.get("trial_dir"),
            }
        )
    by_number = {r.number: r for r in records}
    best_no = attrs.get("best_trial")
    best = by_number.get(best_no) if isinstance(best_no, int) else None
    if best is None:  # the sweep has not picked yet: the same rule as the sweep and the report
        best, _ = verdict.pick_winner(
            (r for r in records if r.state == "complete"),
            trainer_fidelity(
                str(settings.get("trainer")), knob_names(settings, attrs.get("baseline_params") or {})
            ),
            _limit_gb(attrs),
        )
    base_no = attrs.get("baseline_trial")
    base = by_number.get(base_no) if isinstance(base_no, int) else None
    study_dir = Path(attrs["workdir"]) / s.name if attrs.get("workdir") else None
    report = study_dir / "report.md" if study_dir and (study_dir / "report.md").is_file() else None
    return {
        "study": s.name,
        "storage": urls.redact_url(url),
        "trainer": settings.get("trainer"),
        "card": _card(settings.get("card"), st.card_gb_of(attrs)),
        "headroom": settings.get("headroom"),
        "steps": settings.get("steps"),
        "trials": len(trials),
        "counted_trials": counts.finished,
        "interrupted_trials": counts.interrupted,
        "outcomes": counts.outcomes,
        "running": running,
        "spent_s": s.spent_s(now),
        "baseline": _brief(base),
        "best": _brief(best),
        "stop_reason": attrs.get("stop_reason") or _unrecorded_stop(attrs),
        "search_left": attrs.get("search_left"),
        "ruled_out": len(attrs.get("ruled_out") or []),
        "report": str(report) if report else None,
    }


def _card(card: Any, exact: float | None) -> Any:
    """The settings' card with its exact size (the settings keep 0.01 GB)."""
    return {**card, "vram_gb": exact} if isinstance(card, dict) and exact is not None else card


def _unrecorded_stop(attrs: dict[str, Any]) -> str | None:
    """A run that ended without recording why (killed, or its database write failed, as on a
    full disk): say so, rather than nothing or an older run's reason."""
    owner = ProcessIdentity.from_attrs(attrs.get("orchestrator") or {})
    if "stop_reason" not in attrs or owner is None or owner.alive():
        return None
    return (
        "before it finished, without recording why (it was killed, or could not write the study: "
        "see its output); run the same command again to resume"
    )


def _limit_gb(attrs: Any) -> float | None:
    """The headroom line of the study's card (its exact size), when the study says both."""
    settings = attrs.get("settings") if isinstance(attrs, dict) else None
    gb = st.card_gb_of(attrs) if isinstance(attrs, dict) else None
    headroom = settings.get("headroom") if isinstance(settings, dict) else None
    if gb is None:
        return None
    return verdict.fit_limit_gb(gb, float(headroom) if isinstance(headroom, (int, float)) else 0.0)


def _brief(r: TrialRecord | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "number": r.number,
        "params": dict(r.params),
        "outcome": r.get("outcome"),
        "samples_per_s": r.get("samples_per_s"),
        "peak_vram_gb": r.get("peak_vram_gb"),
        "fits": r.get("fits"),
        "fit_measured": r.fit_measured,
        "busy_host": r.busy_host,
    }


def render(info: dict[str, Any]) -> str:
    """The status as a few lines of text."""
    card = info.get("card") or {}
    size = card.get("vram_gb")
    size_text = format_gb(size) if isinstance(size, (int, float)) else "size unknown"
    lines = [
        f"study {info['study']} ({info['storage']})",
        f"  trainer {info.get('trainer')}, card {card.get('name')} ({size_text}), "
        f"headroom {info.get('headroom')}, {info.get('steps')} steps per trial",
        f"  trials: {info['counted_trials']} finished"
        + (f" ({', '.join(f'{k} {v}' for k, v in info['outcomes'].items())})" if info["outcomes"] else "")
        + (
            f", +{info['interrupted_trials']} interrupted (run again, not counted)"
            if info.get("interrupted_trials")
            else ""
        )
        + f", trial time spent {format_duration(info['spent_s'])}",
    ]
    for r in info["running"]:
        state = (
            "running" if r["orchestrator_alive"] else "left running by a stopped sweep (resume to re-run it)"
        )
        elapsed = format_duration(r["elapsed_s"]) if r["elapsed_s"] is not None else "?"
        lines.append(f"  trial {r['number']} {state}: {_params(r['params'])} for {elapsed}")
    for key in ("baseline", "best"):
        b = info.get(key)
        if b is None:
            lines.append(f"  {key}: none yet")
            continue
        sps = b.get("samples_per_s")
        speed = f"{plain(sps)} samples/s" if isinstance(sps, (int, float)) else str(b.get("outcome"))
        peak = b.get("peak_vram_gb")
        peak_txt = f", peak {format_gb(peak)}" if isinstance(peak, (int, float)) else ""
        if b.get("outcome") == "ok" and b.get("fit_measured") is False:  # never called a fit
            peak_txt += " (fastest; fit not measured)" if key == "best" else ", fit not measured"
        if b.get("busy_host"):
            peak_txt += f"; host busy: {b['busy_host']}"
        lines.append(f"  {key}: trial {b['number']} {_params(b['params'])}: {speed}{peak_txt}")
    if info.get("ruled_out"):
        lines.append(f"  ruled out without running: {info['ruled_out']} candidate(s)")
    if info.get("stop_reason"):
        lines.append(f"  last run stopped: {info['stop_reason']}")
    if info.get("search_left"):
        lines.append(f"  search: {info['search_left']}")
    if info.get("report"):
        lines.append(f"  report: {info['report']}")
    return "\n".join(lines)


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())
