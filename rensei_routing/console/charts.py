"""Server-rendered SVG charts: a stacked horizontal bar per group and a daily series. Readable
without JavaScript; each segment is a link (to the records behind it) with a ``<title>``
tooltip; every chart is shown beside a table of its numbers (the page's job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .html import esc

__all__ = ["COLOURS", "LABELS", "bars", "series"]

#: One colour per segment kind (agreed first, then the divergence kinds).
COLOURS: Final = {
    "none": "#2e7d32",
    "provider": "#c62828",
    "model": "#ef6c00",
    "provider-and-model": "#6a1b9a",
    "not-selected": "#546e7a",
}
#: What a segment kind is called in the legend and tooltips (the agreeing kind is "agreed").
LABELS: Final = {"none": "agreed"}
_W: Final = 640
_LABEL: Final = 180
_ROW: Final = 26


def bars(rows: Sequence[tuple[str, Sequence[tuple[str, int, str]]]], *, title: str) -> str:
    """One stacked bar per ``(label, segments)``; a segment is ``(kind, count, href)``. Bars are
    scaled to their own total (shares), so groups of any size compare. A segment with an empty
    ``href`` is drawn without a link (its records are not in this home)."""
    height = _ROW * len(rows) + 30
    out = [
        f'<svg class="chart" viewBox="0 0 {_W} {height}" role="img" '
        f'aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    width = _W - _LABEL - 10
    for i, (label, segments) in enumerate(rows):
        y = i * _ROW + 4
        total = sum(n for _, n, _ in segments) or 1
        out.append(
            f'<text x="{_LABEL - 6}" y="{y + 15}" text-anchor="end" class="lbl">'
            f"{esc(label[:28])}</text>"
        )
        x = float(_LABEL)
        for kind, n, href in segments:
            if not n:
                continue
            w = width * n / total
            colour = COLOURS.get(kind, "#1565c0")
            name = LABELS.get(kind, kind)
            rect = (
                f'<rect x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" '
                f'height="20" fill="{colour}"><title>{esc(label)}: {esc(name)} {n:,} '
                f"({n / total * 100:.1f}%)</title></rect>"
            )
            out.append(f'<a href="{esc(href)}">{rect}</a>' if href else rect)
            x += w
    y = len(rows) * _ROW + 20
    x = 4
    for kind, colour in COLOURS.items():
        name = LABELS.get(kind, kind)
        out.append(
            f'<rect x="{x}" y="{y - 10}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{y}" class="key">{esc(name)}</text>'
        )
        x += 24 + 7 * len(name) + 10
    out.append("</svg>")
    return "".join(out)


def series(points: Sequence[tuple[str, float | None, str]], *, title: str) -> str:
    """A bar per day (``(day, rate 0..1 or None, href or "")``), the rate as its height."""
    height = 180
    n = max(len(points), 1)
    step = (_W - 50) / n
    out = [
        f'<svg class="chart" viewBox="0 0 {_W} {height}" role="img" '
        f'aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg">',
        '<line x1="40" y1="150" x2="640" y2="150" stroke="#999"/>',
        '<text x="36" y="14" text-anchor="end" class="key">100%</text>',
        '<text x="36" y="150" text-anchor="end" class="key">0%</text>',
    ]
    for i, (day, rate, href) in enumerate(points):
        if rate is None:
            continue
        h = 140 * rate
        x = 44 + i * step
        bar = (
            f'<rect x="{x:.1f}" y="{150 - h:.1f}" width="{max(step - 2, 1):.1f}" '
            f'height="{max(h, 0.5):.1f}" fill="#2e7d32">'
            f"<title>{esc(day)}: {rate * 100:.1f}% agreed</title></rect>"
        )
        out.append(f'<a href="{esc(href)}">{bar}</a>' if href else bar)
    if points:
        out.append(f'<text x="44" y="168" class="key">{esc(points[0][0])}</text>')
        out.append(
            f'<text x="636" y="168" text-anchor="end" class="key">{esc(points[-1][0])}</text>'
        )
    out.append("</svg>")
    return "".join(out)
