"""The report as one self-contained HTML page (``report.html``), charts as inline SVG."""

from __future__ import annotations

from html import escape

from autotune.report import svgchart
from autotune.report.cells import TABLE_HEAD, summary, trial_cells
from autotune.report.model import Report, TrialRow, row_fits
from autotune.report.text import changes as _changes
from autotune.report.text import gb as _gb

#: Colours by outcome, shared by the chart and its legend.
OUTCOME_COLORS = {
    "ok": "#1a9850",
    "over": "#f39c12",  # ok, but above the headroom limit
    "oom": "#d7191c",
    "host_oom": "#8e0152",
    "timeout": "#7b3294",
    "stalled": "#5e3c99",
    "nan": "#2c7bb6",
    "config_error": "#555555",
    "crash": "#000000",
    "interrupted": "#999999",
    "running": "#bbbbbb",
}
LINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1120px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.summary dt { font-weight: 600; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
tr.best td { background: #fff7d6; font-weight: 600; }
tr.busy td { color: #8a4b00; }
pre { background: #f4f4f4; padding: 10px; overflow-x: auto; }
.warn li { margin-bottom: 4px; }
figure { margin: 12px 0; } figcaption { font-size: 0.9em; color: #555; }
"""


def _point_for(r: Report, row: TrialRow) -> svgchart.Point | None:
    sps = row.get("samples_per_s")
    peak = row.get("peak_vram_gb")
    if peak is None:
        peak = row.get("measured_peak_vram_gb")
    key = row.label
    if row.outcome == "ok" and row_fits(row, r.limit_gb) is False:
        key = "over"
    color = OUTCOME_COLORS.get(key, "#000000")
    title = f"trial {row.number}: {row.label}; {_changes(row.changed) or 'baseline knobs'}"
    if row.outcome == "oom":
        tried, free, total = row.get("oom_tried_gb"), row.get("oom_free_gb"), row.get("oom_total_gb")
        if tried is not None and free is not None and total is not None:
            peak = float(total) - float(free) + float(tried)  # what it needed, at least
        elif peak is None:
            peak = r.card_gb
    if peak is None:
        return None
    label = f"#{row.number}"
    if row.is_best:
        label = f"winner #{row.number}"
    elif row.is_baseline:
        label = f"baseline #{row.number}"
    return svgchart.Point(
        x=float(peak),
        y=float(sps) if isinstance(sps, (int, float)) else 0.0,
        color=color,
        label=label,
        marker="circle" if isinstance(sps, (int, float)) else "cross",
        title=title,
        highlight=row.is_best,
    )


def _unit(r: Report, peaks: list[float]) -> tuple[float, str]:
    """(factor, name) of the charts' memory axis: MiB where the card (or, with none, every peak) is
    under 1 GiB, so a small emulated card's lines and points are not squeezed into ticks of 0.01."""
    top = r.card_gb if r.card_gb is not None else max(peaks, default=0.0)
    return (1024.0, "MiB") if 0 < top < 1 else (1.0, "GiB")


def _size(gb: float, unit: tuple[float, str]) -> str:
    factor, name = unit
    return f"{gb * factor:.1f} {name}" if name == "MiB" else f"{_gb(gb)} {name}"


def _vram_lines(r: Report, unit: tuple[float, str]) -> list[svgchart.RefLine]:
    out = []
    factor = unit[0]
    if r.card_gb is not None:
        out.append(svgchart.RefLine(r.card_gb * factor, f"card {_size(r.card_gb, unit)}", "#d7191c"))
        if r.headroom and r.limit_gb is not None:
            out.append(
                svgchart.RefLine(
                    r.limit_gb * factor, f"headroom limit {_size(r.limit_gb, unit)}", "#e66101", dashed=True
                )
            )
    return out


def speed_chart(r: Report) -> str | None:
    """Samples/s against peak VRAM, one point per trial; None when nothing can be placed."""
    points = [p for p in (_point_for(r, t) for t in r.trials) if p is not None]
    if not points:
        return None
    unit = _unit(r, [p.x for p in points])
    for p in points:
        p.x *= unit[0]
    x_max = max([p.x for p in points] + [(r.card_gb or 0.0) * unit[0]]) * 1.05
    y_max = max(p.y for p in points) * 1.15 or 1.0
    seen: list[tuple[str, str]] = []
    for p in points:
        if p.color not in [c for c, _ in seen]:
            name = next((k for k, v in OUTCOME_COLORS.items() if v == p.color), "?")
            seen.append((p.color, "ok, over the headroom limit" if name == "over" else name))
    axes = svgchart.Axes(f"peak VRAM ({unit[1]})", "samples / s", x_max, y_max, legend=seen)
    return svgchart.scatter(axes, points, _vram_lines(r, unit), "samples per second against peak VRAM")


def memory_chart(r: Report) -> str | None:
    """VRAM over time for the leading trials; None when no timeline was recorded."""
    if not r.timelines:
        return None
    unit = _unit(r, [v for pts in r.timelines.values() for _, v in pts])
    series = []
    legend = []
    for i, (number, pts) in enumerate(r.timelines.items()):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        row = next(t for t in r.trials if t.number == number)
        name = f"trial {number}" + (" (winner)" if row.is_best else " (baseline)" if row.is_baseline else "")
        scaled = [(t, v * unit[0]) for t, v in pts]
        series.append(svgchart.Series(svgchart.downsample(scaled), color, name))
        legend.append((color, name))
    x_max = max(p[0] for s in series for p in s.points) or 1.0
    y_max = max([p[1] for s in series for p in s.points] + [(r.card_gb or 0.0) * unit[0]]) * 1.05
    axes = svgchart.Axes("time since start (s)", f"VRAM ({unit[1]})", x_max, y_max, legend=legend)
    return svgchart.lines(axes, series, _vram_lines(r, unit), "VRAM over time for the leading trials")


def render_html(report: Report) -> str:
    """One self-contained page: no scripts, no external resources, charts as inline SVG."""
    r = report
    e = escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>autotune report: {e(r.study)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autotune report: {e(r.study)}</h1>",
        '<dl class="summary">',
    ]
    out += [f"<dt>{e(label)}</dt><dd>{e(text)}</dd>" for label, text in summary(r)]
    out.append("</dl>")
    if r.command:
        out += [
            "<h2>Launch the full training</h2>",
            f"<pre><code>{e(r.command)}</code></pre>",
            f"<p>The winning config is <code>{e(r.best_config_path or '')}</code>: the baseline with only "
            "the winning knobs changed.</p>",
        ]
    if r.warnings:
        out += (
            ["<h2>Warnings</h2>", '<ul class="warn">'] + [f"<li>{e(w)}</li>" for w in r.warnings] + ["</ul>"]
        )
    if r.memory_phases:
        out += (
            ["<h2>Memory phases</h2>", "<ul>"]
            + [f"<li>{e(line)}</li>" for line in r.memory_phases]
            + ["</ul>"]
        )
    chart = speed_chart(r)
    if chart:
        out += [
            "<h2>Speed against memory</h2>",
            f'<figure id="speed-chart">{chart}<figcaption>One point per trial, coloured by outcome; '
            "failed trials (×) sit at the memory they needed, at zero speed. The winner is ringed.</figcaption>"
            "</figure>",
        ]
    mem = memory_chart(r)
    if mem:
        out += [
            "<h2>Memory over time</h2>",
            f'<figure id="memory-chart">{mem}<figcaption>Sampled VRAM of the leading trials.</figcaption></figure>',
        ]
    out.append("<h2>Trials</h2>")
    if r.trials:
        out.append(
            "<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in TABLE_HEAD) + "</tr></thead><tbody>"
        )
        for t in r.trials:
            classes = [c for c, on in (("best", t.is_best), ("busy", bool(t.get("busy_host")))) if on]
            cls = f' class="{" ".join(classes)}"' if classes else ""
            out.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in trial_cells(r, t)) + "</tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p>No trial has started yet.</p>")
    if r.ruled_out:
        out += [
            "<h2>Ruled out without running</h2>",
            "<table><thead><tr><th>knobs vs baseline</th><th>reason</th><th>by trials</th></tr></thead><tbody>",
        ]
        for x in r.ruled_out:
            by = ", ".join(str(n) for n in x.by_trials) or "—"
            out.append(
                f"<tr><td>{e(_changes(x.changed) or '—')}</td><td>{e(x.reason)}</td><td>{e(by)}</td></tr>"
            )
        out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
