"""A small (emulated) card keeps its exact size: stored in bytes, shown in MiB, drawn where it is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from autotune.report import htmlpage, svgchart
from autotune.report.model import Report, TrialRow
from autotune.store.study import CARD_BYTES_ATTR, CARD_GB_ATTR, GIB, card_gb_of

MIB = 2**20
CARD = 17196646  # a 16.4 MiB emulated card: "0.02 GB" in the settings


@pytest.mark.parametrize(
    ("attrs", "gb"),
    [
        ({CARD_BYTES_ATTR: CARD, CARD_GB_ATTR: 0.016, "settings": {"card": {"vram_gb": 0.02}}}, CARD / GIB),
        ({CARD_GB_ATTR: 0.0275, "settings": {"card": {"vram_gb": 0.03}}}, 0.0275),
        ({"settings": {"card": {"vram_gb": 0.02}}}, 0.02),  # a study from before either
        ({"settings": {}}, None),
        ({CARD_BYTES_ATTR: True, "settings": {"card": {"vram_gb": 8.0}}}, 8.0),  # not a byte count
    ],
)
def test_the_card_size_is_read_as_exactly_as_it_was_stored(attrs: dict[str, Any], gb: float | None) -> None:
    assert card_gb_of(attrs) == gb


def test_the_report_of_a_study_uses_the_exact_card(tmp_path: Path) -> None:
    from autotune.report import build as rep
    from tests.report_study import build_study

    url, _ = build_study(tmp_path, extra_attrs={CARD_BYTES_ATTR: 47 * GIB + 123})
    report = rep.build_report(rep.open_study(url, None))
    assert report.card_gb == (47 * GIB + 123) / GIB


def _row(number: int, peak_mib: float, sps: float, **flags: bool) -> TrialRow:
    measures = {"peak_vram_gb": peak_mib / 1024, "samples_per_s": sps, "fits": peak_mib < 0.9 * CARD / MIB}
    return TrialRow(number, "complete", {"batch_size": number + 1}, {}, "ok", measures=measures, **flags)


def _report(rows: list[TrialRow]) -> Report:
    return Report(
        study="tiny", trainer="command", card={"name": "emulated 16.4 MiB card (CPU)", "vram_gb": CARD / GIB},
        headroom=0.1, steps=10, config_path=None, knobs=["batch_size"], baseline_params={}, fidelity={},
        trials=rows, ruled_out=[], baseline=rows[0], best=rows[1], speedup=2.0, warnings=[], finished=3,
        running=0,
    )  # fmt: skip


def _vline_x(svg: str, color: str) -> float:
    match = re.search(rf'<line x1="([0-9.]+)" y1="{svgchart.TOP}" x2="\1" y2="[0-9.]+" stroke="{color}"', svg)
    assert match, f"no vertical {color} line"
    return float(match.group(1))


def _circle_x(svg: str, title_start: str) -> float:
    match = re.search(rf'<circle cx="([0-9.]+)" cy="[0-9.]+" r="7"[^>]*><title>{title_start}', svg)
    assert match, f"no point {title_start}"
    return float(match.group(1))


def test_the_speed_chart_draws_a_small_cards_lines_where_they_are() -> None:
    rows = [_row(0, 8.0, 10.0, is_baseline=True), _row(1, 14.0, 20.0, is_best=True), _row(2, 15.5, 25.0)]
    svg = htmlpage.speed_chart(_report(rows))
    assert svg is not None
    assert "peak VRAM (MiB)" in svg and "card 16.4 MiB" in svg and "headroom limit 14.8 MiB" in svg
    card, limit = _vline_x(svg, "#d7191c"), _vline_x(svg, "#e66101")
    points = [_circle_x(svg, f"trial {n}") for n in (0, 1, 2)]
    # in order along the axis: 8 MiB < 14 MiB < the 14.76 MiB line < 15.5 MiB < the 16.4 MiB card
    assert points[0] < points[1] < limit < points[2] < card
    # and to scale: pixels per MiB the same between every pair
    per_mib = (card - points[0]) / (16.4 - 8.0)
    assert (limit - points[1]) / (0.9 * CARD / MIB - 14.0) == pytest.approx(per_mib, rel=0.02)
    assert (points[2] - points[1]) / 1.5 == pytest.approx(per_mib, rel=0.02)


def test_a_large_card_stays_in_gib() -> None:
    rows = [_row(0, 30 * 1024, 1.0, is_baseline=True), _row(1, 40 * 1024, 2.0, is_best=True)]
    report = _report(rows)
    report.card = {"name": "NVIDIA A6000", "vram_gb": 47.99}
    svg = htmlpage.speed_chart(report)
    assert svg is not None and "peak VRAM (GiB)" in svg and "card 47.99 GiB" in svg


def test_the_report_head_shows_a_small_cards_figures_in_mib() -> None:
    from autotune.report.cells import summary

    rows = [_row(0, 8.0, 10.0, is_baseline=True), _row(1, 14.0, 20.0, is_best=True)]
    head = dict(summary(_report(rows)))
    assert head["Card"] == "emulated 16.4 MiB card (CPU), 16.4 MiB"
    assert "peak 8.0 MiB" in head["Baseline"]
    assert "peak 14.0 MiB" in head["Winner"] and "2.4 MiB left" in head["Winner"]
