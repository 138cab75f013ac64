"""What a trainer printed reaches report.md as text, never as HTML or Markdown that renders.

A trial's reason is taken from its output (an error line); a hostile or careless trainer can
print ``<script>``, ``<img onerror=...>``, a Markdown link or a table pipe there.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from autotune.report import build as rep
from autotune.trainers import registry as trainer_registry
from tests.report_study import TEST_TRAINER, YamlTestAdapter, build_study

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)"> [click](javascript:alert(3)) a|b `x` *y*'


@pytest.fixture(autouse=True)
def yaml_test_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(trainer_registry.ADAPTERS, TEST_TRAINER, YamlTestAdapter)


def test_trainer_text_in_report_md_is_shown_not_rendered(tmp_path: Path) -> None:
    url, _ = build_study(tmp_path / "runs", with_running=False)
    with sqlite3.connect(tmp_path / "runs" / "studies.db") as db:  # the OOM trial's reason, as printed
        n = db.execute(
            "UPDATE trial_user_attributes SET value_json = ? WHERE key = 'reason'"
            " AND value_json = '\"CUDA out of memory\"'",
            (json.dumps(HOSTILE),),
        ).rowcount
    assert n == 1
    report = rep.build_report(rep.open_study(url, None))
    md = rep.render_markdown(report)
    assert "<script" not in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(javascript:", md)  # no live link: its bracket is escaped
    assert "&lt;script>alert(1)&lt;/script>" in md and "\\[click\\]" in md and "a\\|b" in md
    html = rep.render_html(report)
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html


def test_md_helpers() -> None:
    from autotune.report.text import md_code, md_fence, md_text

    assert md_text("a\nb <b>&</b> <= 3 &amp;") == "a b &lt;b>&&lt;/b> <= 3 &amp;amp;"
    assert md_text("batch_size=4") == "batch_size=4"  # an intraword underscore is literal already
    assert md_code("a``b") == "```a``b```"
    assert md_fence("x ```` y") == "`````" and md_fence("plain") == "```"
