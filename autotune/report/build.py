"""The best-config report people read in the morning: the entry points, in one place.

It answers at a glance: what won, how much faster than the baseline, how safe it
is, why everything else lost, and what command to run now. ``build_report`` reads
a study (read-only) into a plain ``Report``; ``render_markdown``, ``render_html``
and ``render_json`` only format it, so they are pure and exactly testable.
``write_reports`` is what the sweep calls at its end.

The package, by section: ``opening`` (the study, read-only), ``model`` (rows, the
``Report``, the winner by ``autotune.core.verdict``), ``load`` (``build_report``),
``winning`` (the winning config and its launch command), ``cells``/``text`` (what
every format shows alike), ``markdown``, ``htmlpage`` (+ ``svgchart``), ``jsondoc``
and ``files`` (writing them). The CLI, the sweep and the tests import from here.
"""

from __future__ import annotations

from autotune.config.knobs import DEFAULT_FIDELITY
from autotune.core.verdict import MIN_NOISE
from autotune.errors import ReportError, StudyNotFoundError
from autotune.report.files import RENDERERS, REPORT_FORMATS, write_reports, write_text_atomic
from autotune.report.htmlpage import LINE_COLORS, OUTCOME_COLORS, memory_chart, render_html, speed_chart
from autotune.report.jsondoc import render_json, report_dict
from autotune.report.load import build_report, read_timeline
from autotune.report.markdown import render_markdown
from autotune.report.model import MEASURES, Report, RuledOut, TrialRow, oom_text, pick_best
from autotune.report.opening import DEFAULT_WORKDIR, default_storage, open_study
from autotune.report.winning import config_suffix as _config_suffix
from autotune.report.winning import load_baseline, settings_hash, winning_config

__all__ = [
    "DEFAULT_FIDELITY",
    "DEFAULT_WORKDIR",
    "LINE_COLORS",
    "MEASURES",
    "MIN_NOISE",
    "OUTCOME_COLORS",
    "RENDERERS",
    "REPORT_FORMATS",
    "Report",
    "ReportError",
    "RuledOut",
    "StudyNotFoundError",
    "TrialRow",
    "_config_suffix",
    "build_report",
    "default_storage",
    "load_baseline",
    "memory_chart",
    "oom_text",
    "open_study",
    "pick_best",
    "read_timeline",
    "render_html",
    "render_json",
    "render_markdown",
    "report_dict",
    "settings_hash",
    "speed_chart",
    "winning_config",
    "write_reports",
    "write_text_atomic",
]
