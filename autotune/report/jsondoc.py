"""The report as JSON (``report.json``): the contract scripts read (docs/report.md), as plain data."""

from __future__ import annotations

import json
from typing import Any

from autotune.report.model import MEASURES, Report, TrialRow, winner_kind


def _json_trial(row: TrialRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number": row.number,
        "state": row.state,
        "params": row.params,
        "outcome": row.outcome,
    }
    if row.reason:
        out["reason"] = row.reason
    if row.trial_dir:
        out["trial_dir"] = row.trial_dir  # where its logs, config and hook file are
    if row.remeasure_of is not None:
        out["remeasure_of"] = row.remeasure_of  # a near-tie's contender, run again
    out.update(row.measures)
    if "step_time_s" in out and "step_time_spread_s" not in out:
        out["step_time_spread_s"] = None  # said, not left out: one figure, its spread unknown
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
    """The JSON contract (docs/report.md) as plain data."""
    r = report
    doc = {
        "study": r.study,
        "trainer": r.trainer,
        "card": r.card,
        **({"emulation": r.emulation} if r.emulation else {}),  # how the card was emulated
        "headroom": r.headroom,
        "extra_savers": {"allowed": r.extra_savers, "held_back": r.held_back},
        "steps": r.steps,
        "config_path": r.config_path,
        "status": {
            "finished": r.finished,
            "interrupted": r.interrupted,
            "running": r.running,
            "ok": sum(t.outcome == "ok" for t in r.trials),
            "ruled_out": len(r.ruled_out),
        },
        "baseline_params": r.baseline_params,
        "baseline": _json_pick(r.baseline),
        "best": _json_pick(r.best),
        "winner": winner_kind(r),  # "fastest that fits", "fastest; fit not measured", or None
        "speedup": r.speedup,
        "optuna_best_trial": r.optuna_best,  # what `optuna best-trial` answers (fit as a constraint)
        "command": r.command,
        "best_config_path": r.best_config_path,
        "warnings": r.warnings,
        "trials": [_json_trial(t) for t in r.trials],
        "ruled_out": [
            {"params": x.params, "reason": x.reason, "by_trials": x.by_trials} for x in r.ruled_out
        ],
    }
    if r.memory_phases:  # LTX-2 trials: the phase that set each trial's peak, the bucket judged
        doc["memory_phases"] = r.memory_phases
    return doc


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, ensure_ascii=False) + "\n"
