"""HTML building for the console: escaping, the page frame, tables, links. Plain strings: every
value that comes from the store or a request goes through :func:`esc` (or :func:`attr`), so
a record holding markup shows as text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Final
from urllib.parse import urlencode

__all__ = ["NAV", "esc", "link", "page", "table", "url"]

#: The navigation bar: (path, label).
NAV: Final = (
    ("/", "Overview"),
    ("/shadow", "Shadow"),
    ("/divergences", "Divergences"),
    ("/whatif", "What-if"),
    ("/policies", "Policies"),
    ("/matrix", "Matrix"),
    ("/enforce", "Enforcement"),
    ("/audit", "Audit"),
    ("/fleet", "Fleet"),
)


def esc(value: object) -> str:
    """``value`` as HTML text (quotes escaped too, so it is safe in an attribute)."""
    return html.escape(str(value), quote=True)


def url(path: str, **params: object) -> str:
    """``path`` with the query ``params`` whose value is not ``None`` or empty."""
    kept = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return path + ("?" + urlencode(kept) if kept else "")


def link(href: str, text: object, *, cls: str | None = None) -> str:
    """An ``<a>`` to ``href`` showing ``text``."""
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<a href="{esc(href)}"{c}>{esc(text)}</a>'


def table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    caption: str | None = None,
    tid: str | None = None,
    numeric_from: int = 1,
) -> str:
    """A table: ``head`` are plain labels (escaped here), each row's cells are HTML already
    (escape values with :func:`esc`). Columns from ``numeric_from`` on are right-aligned."""
    ident = f' id="{esc(tid)}"' if tid else ""
    out = [f'<div class="scroll"><table{ident}>']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append(
        "<thead><tr>"
        + "".join(
            f'<th scope="col"{" class=num" if i >= numeric_from else ""}>{esc(h)}</th>'
            for i, h in enumerate(head)
        )
        + "</tr></thead><tbody>"
    )
    for row in rows:
        out.append(
            "<tr>"
            + "".join(
                f"<td{' class=num' if i >= numeric_from else ''}>{cell}</td>"
                for i, cell in enumerate(row)
            )
            + "</tr>"
        )
    out.append("</tbody></table></div>")
    return "".join(out)


def page(title: str, active: str, body: str, *, refresh_s: int | None = None) -> bytes:
    """A whole page: head (the shipped stylesheet, no external resource), navigation, body."""
    nav = "".join(
        f'<a href="{p}"{" aria-current=page" if p == active else ""}>{esc(label)}</a>'
        for p, label in NAV
    )
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        "<!doctype html>"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta}<title>{esc(title)} · rensei</title>"
        '<link rel="stylesheet" href="/static/console.css">'
        '<link rel="icon" href="data:,">'
        "</head><body>"
        f'<header><span class="brand">rensei</span><nav>{nav}</nav></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        "<footer>read-only console · every figure is read from this home</footer>"
        "</body></html>"
    ).encode()


def pct(rate: float | None) -> str:
    """A rate as a percentage with one decimal (``-`` for none)."""
    return "-" if rate is None else f"{rate * 100:.1f}%"


def num(n: int) -> str:
    """A count with thousands separators."""
    return f"{n:,}"
