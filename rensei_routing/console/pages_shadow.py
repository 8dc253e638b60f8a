"""The shadow and divergences pages: agreement by repo, role, mechanism, seam and transport
(bars of agreed vs each divergence kind, the direct-HTTP share), agreement per day, and the
records behind any bar. Every figure is read from the shadow index (``store.shadow_index``)
and counted by the core's :class:`~rensei_routing.core.shadow.report.ShadowReport`.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

import apsw

from ..core.routing.members import canonicalize_repo
from ..core.shadow.compare import DIRECT_HTTP, DIVERGENCES, NONE
from ..core.shadow.facts import HOUR_US, NO_VALUE, ShadowFact, micros_of
from ..core.shadow.report import GROUPINGS, ReportRow, ShadowReport
from ..store import shadow_index
from . import charts
from .context import BadRequest, Console, Query, int_param, parse_since
from .html import esc, link, num, page, pct, table, url
from .verdict import chain_banner

__all__ = ["divergences_page", "shadow_page"]

#: Records listed per divergences page.
PAGE: Final = 50
#: Days shown in the daily series (the most recent).
DAYS: Final = 60
#: The bar kinds besides the divergence kinds.
DIRECT: Final = "direct-http"


class Filters:
    """The shadow filters of one request: since (window or time), repo, role."""

    def __init__(self, q: Query, now: dt.datetime) -> None:
        self.since_text = q.get("since", "")
        self.since = parse_since(self.since_text, now)
        self.repo = q.get("repo", "")
        self.role = q.get("role", "")
        self.since_us = None if self.since is None else micros_of(_stamp(self.since))

    def where(self) -> dict[str, str]:
        out = {}
        if self.repo:
            out["repo"] = self.repo
        if self.role:
            out["role"] = self.role
        return out

    def params(self) -> dict[str, str]:
        return {"since": self.since_text, "repo": self.repo, "role": self.role}


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _facts(
    conn: apsw.Connection, f: Filters, where: dict[str, str]
) -> list[tuple[ShadowFact, int]]:
    """Records per fact under the filters (exact at the since cut: see
    :func:`~rensei_routing.store.shadow_index.since`)."""
    if f.since_us is None:
        return shadow_index.totals(conn, where=where)
    return [(fact, n) for fact, n, _ in shadow_index.since(conn, since_us=f.since_us, where=where)]


def coverage(conn: apsw.Connection) -> tuple[int, int]:
    """``(records indexed, records in the chain)``."""
    head = conn.execute("SELECT max(seq) FROM audit_records").fetchone()
    total = 0 if head is None or head[0] is None else int(head[0]) + 1
    return shadow_index.next_seq(conn), total


def coverage_note(indexed: int, total: int) -> str:
    if indexed >= total:
        return f"<p class=muted>Figures cover every record of the chain ({num(total)}).</p>"
    return (
        '<div class="banner warn" id="coverage">The shadow index covers seqs 0 to '
        f"{num(indexed - 1) if indexed else '-'} of {num(total)} records: "
        f"{num(total - indexed)} later record(s) are not in these figures until the next "
        "shadow record or <code>rensei shadow index</code> indexes them.</div>"
    )


def _filters_form(conn: apsw.Connection, f: Filters, action: str, extra: Query) -> str:
    def options(name: str, chosen: str) -> str:
        opts = ['<option value="">(all)</option>'] + [
            f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(v)}'
            f"{' (lossy slug)' if name == 'repo' and lossy(v) else ''}</option>"
            for v in shadow_index.values(conn, name)
        ]
        return f'<select name="{name}" id="f-{name}">{"".join(opts)}</select>'

    hidden = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in extra.items() if v
    )
    return (
        f'<form class="filters" method="get" action="{action}">{hidden}'
        f'<label>since<input name="since" id="f-since" value="{esc(f.since_text)}" '
        'placeholder="24h, 7d, 2026-01-01" size="12"></label>'
        f"<label>repo{options('repo', f.repo)}</label>"
        f"<label>role{options('role', f.role)}</label>"
        '<button type="submit">Apply</button></form>'
    )


def _div_href(f: Filters, by: str, value: str, kind: str) -> str:
    return url("/divergences", by=by, value=value, kind=kind, **f.params())


def lossy(repo: str) -> bool:
    """Whether a repo group is a ``legacy-lossy`` identity: a runtime slug (``/`` became
    ``-``), not a canonical ``owner/repo`` id (SEMANTICS.md, Repository identity)."""
    return repo != NO_VALUE and canonicalize_repo(repo) != repo


#: The tag beside a lossy repo (its meaning is the page's note).
LOSSY_TAG: Final = '<span class="tag lossy">lossy slug</span>'


def lossy_note(repos: list[str]) -> str:
    """Why a repo can show twice (``tom/dotfiles`` and ``tom-dotfiles``): said once, under the
    figures, when any lossy repo is among them."""
    found = [r for r in repos if lossy(r)]
    if not found:
        return ""
    example = found[0]
    return (
        '<p class="note" id="lossy-note">Repos tagged <em>lossy slug</em> ('
        f"{num(len(found))} here) were recorded from a runtime slug in which <code>/</code> became "
        f"<code>-</code> (a <code>legacy-lossy</code> identity): <code>{esc(example)}</code> "
        "cannot be turned back into one <code>owner/repo</code> (<code>a-b/c</code> and "
        "<code>a/b-c</code> give the same slug). So their spawns are counted apart from the "
        "canonical ids they may belong to, and they never match a policy that names "
        "<code>repo_ids</code> (reason <code>repo-identity-not-canonical</code>).</p>"
    )


def _group_cell(by: str, group: str) -> str:
    return esc(group) + (" " + LOSSY_TAG if by == "repo" and lossy(group) else "")


def _report_table(by: str, rows: tuple[ReportRow, ...], f: Filters, tid: str) -> str:
    head = ["group", "spawns", "agreed", "agreement", *DIVERGENCES[1:], "direct-HTTP share"]
    body = []
    for r in rows:
        div = dict(r.divergence)
        cells = [
            _group_cell(by, r.group),
            num(r.spawns),
            link(_div_href(f, by, r.group, NONE), num(r.agreed)),
            pct(r.agreement_rate),
        ]
        cells += [link(_div_href(f, by, r.group, k), num(div[k])) for k in DIVERGENCES[1:]]
        cells.append(
            link(_div_href(f, by, r.group, DIRECT), pct(r.direct_http_share))
            if r.direct_http
            else pct(r.direct_http_share)
        )
        body.append(cells)
    return table(head, body, tid=tid)


def shadow_page(c: Console, q: Query) -> bytes:
    """Agreement figures with filters."""
    f = Filters(q, c.clock())
    with c.read() as conn:
        indexed, total_records = coverage(conn)
        form = _filters_form(conn, f, "/shadow", {})
        facts = _facts(conn, f, f.where())
        days = _daily(conn, f)
    total = ShadowReport()
    reports = {by: ShadowReport(by) for by in GROUPINGS}
    for fact, n in facts:
        total.add_fact(fact, n)
        for report in reports.values():
            report.add_fact(fact, n)
    t = total.total
    parts = [chain_banner(c), coverage_note(indexed, total_records), form]
    summary = [
        ("spawns", num(t.spawns)),
        ("agreed", num(t.agreed)),
        ("agreement", pct(t.agreement_rate)),
        *((k, num(n)) for k, n in t.divergence if k != NONE),
        ("direct-HTTP share", pct(t.direct_http_share)),
        ("held", num(t.held)),
        ("rejected", num(t.rejected)),
    ]
    parts.append(
        '<p class="muted">The columns after “agreement” are kinds of disagreement: what the '
        "policy would have changed about the route that ran.</p>"
    )
    parts.append(table(["figure", "value"], ([esc(k), v] for k, v in summary), tid="totals"))
    if not t.spawns:
        parts.append('<p id="empty">No shadow records under these filters.</p>')
        return page("Shadow", "/shadow", "".join(parts))
    for by, report in reports.items():
        rows = report.rows()
        chart = charts.bars(
            [
                (
                    f"{r.group} (lossy)" if by == "repo" and lossy(r.group) else r.group,
                    [(k, n, _div_href(f, by, r.group, k)) for k, n in r.divergence],
                )
                for r in rows
            ],
            title=f"agreement by {by}",
        )
        note = lossy_note([r.group for r in rows]) if by == "repo" else ""
        parts.append(
            f'<section id="by-{by}"><h2>By {esc(by)}</h2><div class="grid"><div>{chart}</div>'
            f"<div>{_report_table(by, rows, f, f'table-{by}')}</div></div>{note}</section>"
        )
    points = [(d, (a / n if n else None), "") for d, n, a in days]
    parts.append(
        '<section id="daily"><h2>Agreement per day (UTC)</h2><div class="grid"><div>'
        + charts.series(points, title="agreement per day")
        + "</div><div>"
        + table(
            ["day", "spawns", "agreed", "agreement"],
            ([esc(d), num(n), num(a), pct(a / n if n else None)] for d, n, a in days),
            tid="table-daily",
        )
        + "</div></div></section>"
    )
    return page("Shadow", "/shadow", "".join(parts))


def _daily(conn: apsw.Connection, f: Filters) -> list[tuple[str, int, int]]:
    where = f.where()
    if f.since_us is None:
        rows = shadow_index.daily(conn, agreed=NONE, where=where)
    else:
        found = shadow_index.since(conn, since_us=f.since_us, where=where)
        cut = [(fact, n) for fact, n, day in found if day >= 0]
        day = f.since_us // HOUR_US // 24
        rows = shadow_index.daily(conn, agreed=NONE, low=day + 1, where=where)
        if cut:
            n = sum(k for _, k in cut)
            a = sum(k for fact, k in cut if fact.divergence == NONE)
            rows = [(day, n, a), *rows]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return [((epoch + dt.timedelta(days=d)).date().isoformat(), n, a) for d, n, a in rows[-DAYS:]]


def divergences_page(c: Console, q: Query) -> bytes:
    """The records behind one bar, newest first, paged by seq."""
    f = Filters(q, c.clock())
    by = q.get("by", "")
    value = q.get("value", "")
    kind = q.get("kind", "")
    if by and by not in GROUPINGS:
        raise BadRequest(f"by: {by!r} is not one of {', '.join(GROUPINGS)}")
    if kind and kind not in (*DIVERGENCES, DIRECT):
        raise BadRequest(f"kind: {kind!r} is not one of {', '.join((*DIVERGENCES, DIRECT))}")
    before = int_param(q, "before")
    where = f.where()
    if by:
        where[by] = value
    if kind == DIRECT:
        where["transport"] = DIRECT_HTTP
    elif kind:
        where["divergence"] = kind
    with c.read() as conn:
        indexed, total_records = coverage(conn)
        form = _filters_form(conn, f, "/divergences", {"by": by, "value": value, "kind": kind})
        count = sum(n for _, n in _facts(conn, f, where))
        if f.since_us is None:
            bounds = shadow_index.seq_bounds(conn, where=where)
        else:  # from the cut's day on (records before the cut are filtered by time)
            day = f.since_us // HOUR_US // 24
            bounds = shadow_index.seq_bounds(conn, level="day", low=day, where=where)
        found: list[shadow_index.IndexedRecord] = []
        if bounds is not None:
            high = bounds[1] + 1 if before is None else min(before, bounds[1] + 1)
            found = shadow_index.records(
                conn, where=where, low=bounds[0], high=high, since_us=f.since_us, limit=PAGE + 1
            )
    what = ", ".join(f"{k} = {v}" for k, v in sorted(where.items())) or "every shadow record"
    parts = [
        chain_banner(c),
        coverage_note(indexed, total_records),
        form,
        f'<p id="selection">{esc(what)}: <strong id="match-count">{num(count)}</strong> '
        "record(s)" + (f", at or after {esc(f.since_text)}" if f.since else "") + ".</p>",
    ]
    rows = []
    for r in found[:PAGE]:
        at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=r.at_us)
        rows.append(
            [
                link(f"/decision/{r.seq}", r.seq),
                esc(at.strftime("%Y-%m-%d %H:%M:%S")),
                *(esc(v) for v in r.fact),
            ]
        )
    parts.append(
        table(
            ["seq", "recorded (UTC)", *ShadowFact._fields],
            rows,
            tid="records",
            numeric_from=99,
        )
    )
    pager = []
    if before is not None:
        pager.append(
            link(url("/divergences", by=by, value=value, kind=kind, **f.params()), "newest")
        )
    if len(found) > PAGE:
        older = url(
            "/divergences", by=by, value=value, kind=kind, before=found[PAGE - 1].seq, **f.params()
        )
        pager.append(link(older, "older →", cls="older"))
    parts.append(f'<div class="pager">{"".join(pager)}</div>')
    return page("Divergences", "/divergences", "".join(parts))
