"""What a finished trial measured: its metrics, outcome and the user attrs they become.

Pure of the study: the executor writes what ``measure`` returns. ``metrics.json`` in the
trial folder keeps the whole record (the trainer's metrics and ours), for the report and
for a person reading the folder.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome, bare
from autotune.core.record import TrialRecord
from autotune.core.timing import too_short_text
from autotune.core.units import format_gb, plain, step_time
from autotune.core.verdict import Judgement, RunEnd, judge
from autotune.execution.runner import RunResult
from autotune.trainers.base import TrainerAdapter
from autotune.trainers.kit.common import read_trial_record
from autotune.trainers.kit.output import read_output
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME
from autotune.trainers.kit.readers.phases import read_phase_peaks

#: What the verdict reads of a run's end as the runner saw it (``RunResult`` and ``RunEnd`` alike).
AS_THE_RUNNER_SAW = (
    "returncode", "signal", "timed_out", "stalled", "interrupted", "wall_s", "peak_host_rss_gb", "busy",
)  # fmt: skip


def measure(
    adapter: TrainerAdapter,
    result: RunResult,
    trial_dir: Path,
    effective: int,
    *,
    card_gb: float,
    headroom: float,
    trainer_card_is_the_trials: bool = True,
    host_ram_gb: float | None = None,
    steps: int | None = None,
) -> Judgement:
    """The trial read (``adapter.read_metrics``) and judged (``verdict.judge``, the one place);
    also writes ``metrics.json``.

    Our peak is the larger of the hook's (read with the metrics) and NVML's per-process sum over
    the trial's tree (the monitor): both are the trial's own. ``trainer_card_is_the_trials``: a
    whole-card figure the trainer prints is about the trial's card (see ``verdict.judged_peak``)."""
    output = read_output(trial_dir, "", result.stdout_path, result.stderr_path)
    try:
        metrics = adapter.read_metrics(trial_dir, output)
    except Exception as exc:  # the contract says never; a bug there must not lose the trial
        metrics = TrialMetrics(source=f"read_metrics failed: {exc}")
    run = RunEnd(
        **{name: getattr(result, name) for name in AS_THE_RUNNER_SAW},
        output=result.output_tail,
        host_over_gb=host_ram_gb if result.end_reason == "host ram" else None,
        steps=steps,
        nvml_peak_gb=result.measured_peak_vram_gb,
        nvml_per_process=result.vram_source == "process",
    )
    verdict = judge(
        run,
        metrics,
        effective,
        card_gb,
        headroom,
        trainer_card_is_the_trials=trainer_card_is_the_trials,
        host_ram_gb=host_ram_gb,
    )
    ok = verdict.attrs.get("outcome") == Outcome.OK.value
    reason = str(verdict.attrs.get("reason") or "")
    log = result.stdout_path if ok else error_log(result.stdout_path, result.stderr_path, reason)
    log_attrs = TrialRecord.attrs_of(log_path=str(log))
    verdict = replace(verdict, attrs={**verdict.attrs, **memory_note(trial_dir), **log_attrs})
    record = {
        **metrics.to_dict(),
        **verdict.attrs,
        "returncode": result.returncode,
        "signal": result.signal,
        "wall_s": result.wall_s,
    }
    with contextlib.suppress(OSError):
        (trial_dir / "metrics.json").write_text(
            json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8"
        )
    return verdict


#: How much of a log's end ``error_log`` reads: the line a reason quotes is near the end.
_LOG_TAIL_BYTES = 256 * 1024


def error_log(stdout: Path, stderr: Path, reason: str) -> Path:
    """The log that holds the line ``reason`` quotes (a crash's traceback is on stderr, its
    stdout may be empty): stderr when that holds it (or holds all there is), else stdout."""
    err = _tail_lines(stderr)
    if any(_quoted(line, reason) for line in err):
        return stderr
    out = _tail_lines(stdout)
    return stderr if err and not out else stdout


def _tail_lines(path: Path) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - _LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def _quoted(line: str, reason: str) -> bool:
    """Whether ``reason`` quotes ``line`` (its start: a reason cuts long lines short)."""
    line = bare(line)
    return len(line) >= 12 and line[:60] in reason


def memory_note(trial_dir: Path) -> dict[str, Any]:
    """The trial's ``peak_phase`` and ``memory_note`` (the report's memory-phase line): the phase
    that set the hook's peak (``readers.phases``, the validation step from the trial record) and the
    data bucket it trained; empty when neither is known. Read once, when the trial is judged."""
    record = read_trial_record(trial_dir)
    step = record.get("validation_step")
    peaks = read_phase_peaks(trial_dir / HOOK_FILE_NAME, step if isinstance(step, int) else None)
    parts = [peaks.describe()] if peaks.peak_phase else []
    if isinstance(record.get("data_bucket"), str):
        parts.append(f"trained on {record['data_bucket']}")
    if isinstance(record.get("data_note"), str):
        parts.append(record["data_note"])
    attrs = TrialRecord.attrs_of(memory_note="; ".join(parts)) if parts else {}
    if peaks.peak_phase is not None and peaks.stepped:
        attrs.update(TrialRecord.attrs_of(peak_phase=peaks.peak_phase))
    return attrs


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: A finished trial's fit, in words: an unmeasured fit is never called a fit.
FIT_WORDS = {True: "fits", False: "over the headroom", None: "fit not measured (no peak memory reading)"}


def step_text(record: TrialRecord) -> str:
    """``step 0.520 s ± 0.010`` (``spread unknown`` for a single figure); empty without a step time."""
    step, spread = record.step_time_s, record.step_time_spread_s
    if step is None:
        return "spread unknown" if record.spread_unknown else ""
    return (
        f"step {step_time(step, spread)}" if spread is not None else f"step {step_time(step)}, spread unknown"
    )


def busy_text(reason: str, measured: bool) -> str:
    """The busy-host flag: a measured trial's speed is suspect; any other (an OOM beside another
    process on the GPU, a timeout) was at least not alone."""
    return f"HOST BUSY, its speed is suspect: {reason}" if measured else f"host busy while it ran: {reason}"


def _length(record: TrialRecord) -> str:
    """``; ran 14 steps (50 asked)`` and ``; too short to time: ...`` where they apply. Information,
    not an error: a template with no ``{steps}`` runs the script's own length (the banner says so)."""
    run, asked, steady = record.get("steps_run"), record.get("steps"), record.get("steady_steps")
    out = ""
    if isinstance(run, int) and isinstance(asked, int) and run != asked:
        out += f"; ran {run} steps ({asked} asked)"
    if isinstance(steady, int) and (short := too_short_text(steady, run if isinstance(run, int) else None)):
        out += f"; {short}"
    return out


def summary(attrs: Mapping[str, Any]) -> str:
    """The progress line of a finished trial: speed, step time with its spread, peak and fit, and a
    busy host flagged; or its outcome and why."""
    record = TrialRecord(-1, attrs=attrs)
    busy = f"; {busy_text(record.busy_host, record.is_ok)}" if record.busy_host else ""
    if record.is_ok:
        sps, peak = record.samples_per_s or 0.0, record.peak_vram_gb
        steps = f" ({st})" if (st := step_text(record)) else ""
        peak_txt = f", peak {format_gb(peak)}" if peak is not None else ""
        fit = FIT_WORDS[record.fits]
        if record.get("host_fits") is False:  # the card may have room: the host did not
            host = record.get("peak_host_rss_gb")
            fit = "over the host RAM line" + (f" (host peak {format_gb(host)})" if host is not None else "")
        return f"ok: {plain(sps)} samples/s{steps}{peak_txt}, {fit}{_length(record)}{busy}"
    return f"{record.outcome}: {one_line(record.reason, 160)}{busy}"
