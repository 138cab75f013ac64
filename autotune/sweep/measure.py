"""What a finished trial measured: its metrics, outcome and the user attrs they become.

Pure of the study: the executor writes what ``measure`` returns. ``metrics.json`` in the
trial folder keeps the whole record (the trainer's metrics and ours), for the report and
for a person reading the folder.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core import outcome as oc
from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome
from autotune.core.units import format_gb
from autotune.core.verdict import fits, judged_peak, samples_per_s
from autotune.execution.runner import RunResult
from autotune.trainers.base import TrainerAdapter


def measure(
    adapter: TrainerAdapter,
    result: RunResult,
    trial_dir: Path,
    effective: int,
    *,
    card_gb: float,
    headroom: float,
) -> dict[str, Any]:
    """Metrics, outcome and the user attrs they become; also writes ``metrics.json``."""
    output = _read_output(result)
    try:
        metrics = adapter.read_metrics(trial_dir, output)
    except Exception as exc:  # the contract says never; a bug there must not lose the trial
        metrics = TrialMetrics(source=f"read_metrics failed: {exc}")
    if result.measured_peak_vram_gb is not None:
        metrics.measured_peak_vram_gb = result.measured_peak_vram_gb
    why = oc.explain(
        result.returncode,
        result.signal,
        timed_out=result.timed_out,
        stalled=result.stalled,
        interrupted=result.interrupted,
        output=result.output_tail,
        metrics=metrics,
    )
    outcome, reason = Outcome(why.outcome), str(why.reason)
    attrs: dict[str, Any] = {"outcome": outcome.value, "reason": one_line(reason)}
    sps = samples_per_s(metrics, effective)
    peak = judged_peak(metrics)
    for key, value in (
        ("step_time_s", metrics.step_time_s),
        ("step_time_spread_s", metrics.step_time_spread_s),
        ("samples_per_s", sps),
        ("peak_vram_gb", peak),
        ("trainer_peak_vram_gb", metrics.trainer_peak_vram_gb),
        ("measured_peak_vram_gb", metrics.measured_peak_vram_gb),
        ("peak_host_rss_gb", result.peak_host_rss_gb),
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


def _read_output(result: RunResult, limit: int = 4 * 1024 * 1024) -> str:
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


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def summary(attrs: Mapping[str, Any]) -> str:
    """The progress line of a finished trial: its speed, peak and fit, or its outcome and why."""
    outcome = attrs.get("outcome")
    if outcome == Outcome.OK.value:
        sps, peak = attrs.get("samples_per_s"), attrs.get("peak_vram_gb")
        fit = {True: "fits", False: "over the headroom", None: "fit unknown"}[attrs.get("fits")]
        peak_txt = f", peak {format_gb(peak)}" if isinstance(peak, (int, float)) else ""
        return f"ok: {sps:.3g} samples/s{peak_txt}, {fit}"
    return f"{outcome}: {one_line(str(attrs.get('reason', '')), 160)}"
