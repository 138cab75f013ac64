"""Small, dependency-free SVG charts for the HTML report.

The report must open anywhere, offline, years later: no JavaScript, no plotting
library, no network. Two chart kinds are enough: a scatter of points (with
vertical reference lines) and a set of lines over time (with horizontal ones).
Everything is escaped; the output is a plain ``<svg>`` element to inline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH, HEIGHT = 760, 420
_HALO = 'stroke="#ffffff" stroke-width="3" paint-order="stroke"'  # labels stay legible over lines
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 20, 56


@dataclass
class Point:
    x: float
    y: float
    color: str
    label: str = ""
    marker: str = "circle"  # "circle" or "cross"
    title: str = ""  # tooltip
    highlight: bool = False  # the winner: a ring around it


@dataclass
class RefLine:
    at: float
    label: str
    color: str
    dashed: bool = False


@dataclass
class Series:
    points: list[tuple[float, float]]
    color: str
    label: str


@dataclass
class Axes:
    x_label: str
    y_label: str
    x_max: float
    y_max: float
    legend: list[tuple[str, str]] = field(default_factory=list)  # (color, text)


def nice_ticks(upper: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``upper`` (1, 2, 2.5 or 5 times a power of ten)."""
    if not upper > 0 or not math.isfinite(upper):
        upper = 1.0
    raw = upper / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(upper / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _fmt_tick(v: float) -> str:
    return f"{v:g}"


class _Frame:
    """Maps data to pixels and draws the axes, grid and labels."""

    def __init__(self, axes: Axes) -> None:
        self.axes = axes
        self.xt = nice_ticks(axes.x_max)
        self.yt = nice_ticks(axes.y_max)
        self.x_hi = self.xt[-1]
        self.y_hi = self.yt[-1]

    def px(self, x: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * min(max(x, 0.0), self.x_hi) / self.x_hi

    def py(self, y: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * min(max(y, 0.0), self.y_hi) / self.y_hi

    def draw(self) -> list[str]:
        a = self.axes
        out = [f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>']
        for t in self.xt:
            x = self.px(t)
            out.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#e6e6e6"/>'
            )
            out.append(
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" font-size="11" text-anchor="middle" '
                f'fill="#444">{_fmt_tick(t)}</text>'
            )
        for t in self.yt:
            y = self.py(t)
            out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e6e6e6"/>')
            out.append(
                f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
                f'fill="#444">{_fmt_tick(t)}</text>'
            )
        out.append(
            f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
            f'fill="none" stroke="#888"/>'
        )
        out.append(
            f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 14}" font-size="12" '
            f'text-anchor="middle" fill="#222">{escape(a.x_label)}</text>'
        )
        cy = (TOP + HEIGHT - BOTTOM) / 2
        out.append(
            f'<text x="16" y="{cy:.1f}" font-size="12" text-anchor="middle" fill="#222" '
            f'transform="rotate(-90 16 {cy:.1f})">{escape(a.y_label)}</text>'
        )
        return out

    def legend(self) -> list[str]:
        out = []
        x = LEFT + 8
        y = TOP + 14
        for color, text in self.axes.legend:
            out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
            out.append(f'<text x="{x + 14}" y="{y}" font-size="11" fill="#222">{escape(text)}</text>')
            y += 15
        return out


def _svg(body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        f'font-family="sans-serif">\n<title>{escape(title)}</title>\n' + "\n".join(body) + "\n</svg>"
    )


def scatter(axes: Axes, points: Sequence[Point], vlines: Sequence[RefLine], title: str) -> str:
    """Points in a frame, with vertical reference lines (card size, headroom limit)."""
    f = _Frame(axes)
    body = f.draw()
    for i, line in enumerate(vlines):
        x = f.px(line.at)
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        body.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="{line.color}" '
            f'stroke-width="2"{dash}/>'
        )
        body.append(
            f'<text x="{x - 4:.1f}" y="{TOP + 12 + 14 * i}" font-size="11" text-anchor="end" '
            f'fill="{line.color}" {_HALO}>{escape(line.label)}</text>'
        )
    for p in points:
        x, y = f.px(p.x), f.py(p.y)
        tip = f"<title>{escape(p.title)}</title>" if p.title else ""
        if p.highlight:
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="13" fill="none" stroke="#111" stroke-width="2.5"/>'
            )
        if p.marker == "cross":
            d = 6
            body.append(
                f'<g stroke="{p.color}" stroke-width="3">{tip}'
                f'<line x1="{x - d:.1f}" y1="{y - d:.1f}" x2="{x + d:.1f}" y2="{y + d:.1f}"/>'
                f'<line x1="{x - d:.1f}" y1="{y + d:.1f}" x2="{x + d:.1f}" y2="{y - d:.1f}"/></g>'
            )
        else:
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{p.color}" stroke="#222" '
                f'stroke-width="0.8">{tip}</circle>'
            )
        if p.label:
            body.append(
                f'<text x="{x + 10:.1f}" y="{y - 9:.1f}" font-size="11" fill="#111">{escape(p.label)}</text>'
            )
    body += f.legend()
    return _svg(body, title)


def lines(axes: Axes, series: Sequence[Series], hlines: Sequence[RefLine], title: str) -> str:
    """Lines over time, with horizontal reference lines (card size, headroom limit)."""
    f = _Frame(axes)
    body = f.draw()
    for line in hlines:
        y = f.py(line.at)
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        body.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{line.color}" '
            f'stroke-width="2"{dash}/>'
        )
        body.append(
            f'<text x="{WIDTH - RIGHT - 4}" y="{y - 4:.1f}" font-size="11" text-anchor="end" '
            f'fill="{line.color}" {_HALO}>{escape(line.label)}</text>'
        )
    for s in series:
        if not s.points:
            continue
        pts = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in s.points)
        body.append(
            f'<polyline points="{pts}" fill="none" stroke="{s.color}" stroke-width="2.5">'
            f"<title>{escape(s.label)}</title></polyline>"
        )
    body += f.legend()
    return _svg(body, title)


def downsample(points: Sequence[tuple[float, float]], limit: int = 400) -> list[tuple[float, float]]:
    """At most ``limit`` points, keeping each bucket's highest value (peaks must stay visible)."""
    if len(points) <= limit:
        return list(points)
    size = math.ceil(len(points) / limit)
    out = []
    for i in range(0, len(points), size):
        bucket = points[i : i + size]
        out.append(max(bucket, key=lambda p: p[1]))
    return out
