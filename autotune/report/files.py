"""Writing the reports (``report.md``, ``report.html``, ``report.json``) and the winning config."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import optuna

from autotune.errors import AutotuneError, ReportError
from autotune.report.htmlpage import render_html
from autotune.report.jsondoc import render_json
from autotune.report.load import build_report
from autotune.report.markdown import render_markdown
from autotune.report.winning import settings_hash, winning_config

REPORT_FORMATS = ("md", "html", "json")
RENDERERS = {"md": render_markdown, "html": render_html, "json": render_json}


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
