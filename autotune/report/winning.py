"""The winning config and the command that launches it, from the sweep's own adapter."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import AutotuneError, ReportError
from autotune.report.model import Report
from autotune.report.text import trials_text as _trials
from autotune.store.settings import settings_of
from autotune.trainers import Baseline, TrainerAdapter, Winner, get_adapter


def adapter_for(report: Report) -> TrainerAdapter:
    """The sweep's adapter, rebuilt with the trainer options it ran with (e.g. ``trainer_dir``), and
    run from the folder the trials ran in (``launch_cwd``), never from where ``report`` runs. Built
    once per report (an error too: it raises again)."""
    adapter: TrainerAdapter = _once(report, "adapter", lambda: _build_adapter(report))
    return adapter


def _once(report: Report, key: str, make: Callable[[], Any]) -> Any:
    """``make()`` the first time a report asks for ``key``, kept on the report (``on_disk``); what it
    raised (the adapter or config errors, an OS error) is kept too and raised again."""
    if key not in report.on_disk:
        try:
            report.on_disk[key] = make()
        except (AutotuneError, OSError) as exc:
            report.on_disk[key] = exc
    value = report.on_disk[key]
    if isinstance(value, BaseException):
        raise value
    return value


def _build_adapter(report: Report) -> TrainerAdapter:
    options = dict(report.trainer_options)  # values, as ``store.settings.read_settings`` gives them
    if report.launch_cwd and "cwd" not in options:
        try:
            return get_adapter(report.trainer, **options, cwd=report.launch_cwd)
        except AutotuneError:
            pass  # an adapter that takes no cwd: built as below
    if options:
        try:
            return get_adapter(report.trainer, **options)
        except AutotuneError:
            pass  # options from another version of the adapter: the bare adapter still knows its format
    return get_adapter(report.trainer)


def config_suffix(adapter: TrainerAdapter) -> str:
    """The winning config's file suffix: the trainer's own format (the adapter says which)."""
    return adapter.traits.config_suffix


def add_command(
    report: Report, report_dir: Path, best_config_path: Path | None, trial_dir: Path | None = None
) -> None:
    """The winner's launch command, every placeholder filled (the adapter refuses a hole), or a warning
    saying why there is none. ``trial_dir``: the winning trial's folder."""
    if report.best is None:
        return
    try:
        adapter = adapter_for(report)
    except AutotuneError as exc:
        report.warnings.append(f"No launch command: {exc}")
        return
    path = best_config_path or report_dir / f"best-config{config_suffix(adapter)}"
    report.best_config_path = str(path)
    if adapter.traits.takes_template and not report.launch_cwd and "cwd" not in report.trainer_options:
        # A template trainer fills its placeholders from the winner and the study, all of them or none.
        report.warnings.append(
            "The study does not record the folder its trials ran in (it is older than that record): "
            "the launch command runs from the folder 'autotune report' ran in."
        )
    winner = Winner(
        # Flag-driven trainers and those that read the trainer dir from the config want the whole picture.
        baseline=_baseline_or_none(report) if report.config_path else None,
        params=report.best.params,
        gradient_accumulation_steps=best_gas(report),
        steps=report.full_steps,
        trial_dir=trial_dir,
        complete=True,
    )
    try:
        report.command = adapter.training_command(path, winner)
    except AutotuneError as exc:
        report.warnings.append(f"No launch command: {exc}")


def _baseline_or_none(report: Report) -> Baseline | None:
    """The baseline as it is on disk now; ``None`` when it cannot be read (moved, edited since)."""
    try:
        return load_baseline(report)[1]
    except (AutotuneError, OSError):
        return None


def best_gas(report: Report) -> int:
    """The winner's gradient accumulation (the baseline's when the trial did not record one)."""
    gas = report.best.get("gradient_accumulation_steps") if report.best is not None else None
    if isinstance(gas, int):
        return gas
    return int(report.baseline_params.get("gradient_accumulation_steps") or 1)


def load_baseline(report: Report) -> tuple[TrainerAdapter, Baseline]:
    """The adapter and the baseline config the sweep started from, as it is on disk now: read once
    per report (why it could not be read too: it raises again)."""
    adapter = adapter_for(report)
    path = Path(report.config_path) if report.config_path else None
    baseline: Baseline = _once(report, "baseline", lambda: adapter.load_baseline(path))
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
    return adapter.final_config(baseline, best.params, gradient_accumulation_steps=best_gas(report))


def _hash_matches(expected: str, baseline: Baseline) -> bool:
    """Whether ``expected`` (hex, maybe ``sha256:``-prefixed or shortened) is the baseline's hash."""
    want = expected.split(":", 1)[-1].strip().lower()
    if len(want) < 8:
        return True  # too short to judge
    texts = [baseline.text, json.dumps(baseline.data, sort_keys=True, default=str)]
    return any(hashlib.sha256(t.encode("utf-8")).hexdigest().startswith(want) for t in texts)


def settings_hash(study: optuna.Study) -> str | None:
    value = settings_of(study.user_attrs).get("base_config_hash")
    return str(value) if value else None


def data_warnings(report: Report) -> list[str]:
    """What the full run at the winner's batch drops of the user's data (the adapter's
    ``data_warnings``): the trials measured the largest bucket, the full run may not train it."""
    best = report.best
    if best is None or not report.config_path:
        return []
    try:
        adapter = adapter_for(report)
    except AutotuneError:
        return []
    if not adapter.traits.drops_data:
        return []  # a trainer that drops nothing: its baseline is not read again
    baseline = _baseline_or_none(report)
    if baseline is None:
        return []
    batch = best.params.get("batch_size", report.baseline_params.get("batch_size", 1))
    batch = batch if isinstance(batch, int) and batch > 0 else 1
    gas = best_gas(report)
    eff = best.get("effective_batch")
    dp = eff // (batch * gas) if isinstance(eff, int) and eff % (batch * gas) == 0 and eff > 0 else None
    dp = dp or adapter.data_parallel(baseline)
    return adapter.data_warnings(
        baseline, batch_size=batch, gradient_accumulation_steps=gas, data_parallel=dp
    )
