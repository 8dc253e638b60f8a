"""The fleet page: the fleet evidence database's report (``rensei fleet report``, computed in
SQL by :func:`~rensei_routing.fleet.report.fleet_report`) as the console shows everything else:
a banner for hosts that forked, stopped reporting or run an old revision, the hosts' heads and
lags, agreement by host, repo, role, mechanism and seam as bars beside their tables, and the
alarms. The console reads that database through a read-only session (nothing can be written
through it); without ``rensei ui --fleet URL`` the page says how to point it at one.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

from ..core.shadow.compare import DIVERGENCES
from ..core.shadow.report import ReportRow
from ..errors import FleetError, InputError
from . import charts
from .context import BadRequest, Console, Query, int_param
from .html import esc, num, page, pct, table

__all__ = ["fleet_page"]

#: Hosts with no ingest for longer than this are "stopped reporting" (the query may say).
DEFAULT_STALE_S: Final = 3600
#: The longest `stale` a page takes: 100 years of seconds (a timedelta holds far more, a C int
#: not: a larger one is a 400 naming it, not a 500).
MAX_STALE_S: Final = 100 * 366 * 86400


def _when(moment: dt.datetime | None) -> str:
    return "-" if moment is None else esc(moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ"))


def _seconds(s: float | None) -> str:
    from ..core.timestamps import format_age

    return "-" if s is None else esc(format_age(int(s * 1000)))


def _rows_table(dimension: str, rows: tuple[ReportRow, ...]) -> str:
    head = ["group", "spawns", "agreed", "agreement", *DIVERGENCES[1:], "direct-HTTP share"]
    body = []
    for r in rows:
        div = dict(r.divergence)
        body.append(
            [
                esc(r.group),
                num(r.spawns),
                num(r.agreed),
                pct(r.agreement_rate),
                *(num(div[k]) for k in DIVERGENCES[1:]),
                pct(r.direct_http_share),
            ]
        )
    return table(head, body, tid=f"fleet-{dimension}")


def fleet_page(c: Console, q: Query) -> bytes:
    """The fleet report, or how to configure it; a database that cannot be read is a banner
    naming it (never an empty report that looks fine)."""
    if c.fleet_url is None:
        body = (
            '<p id="fleet-none">No fleet database: start the console with '
            "<code>rensei ui --fleet postgresql://...</code> "
            "(or set <code>RENSEI_FLEET_URL</code>) to show the fleet report here "
            "(docs/operations.md, fleet evidence).</p>"
        )
        return page("Fleet", "/fleet", body)
    stale_s = int_param(q, "stale", DEFAULT_STALE_S, maximum=MAX_STALE_S)
    revision = int_param(q, "revision")
    assert stale_s is not None
    if stale_s <= 0:
        raise BadRequest("stale: give a number of seconds above 0")
    from ..fleet.db import connect, display_url
    from ..fleet.report import DIMENSIONS, fleet_report

    try:
        conn = connect(c.fleet_url, read_only=True)
        try:
            report = fleet_report(
                conn, stale_after=dt.timedelta(seconds=stale_s), revision=revision
            )
        finally:
            conn.close()
    except (FleetError, InputError) as e:
        body = f'<div class="banner fail" id="fleet-error">Fleet database: {esc(e)}</div>'
        return page("Fleet", "/fleet", body)
    parts = [f'<p class="muted">Fleet database {esc(display_url(c.fleet_url))}</p>']
    problems = [
        *(f"host {h.host_id} FORKED at seq {h.forked_seq}" for h in report.forked),
        *(f"host {h.host_id} stopped reporting" for h in report.stale),
        *(f"host {h.host_id} runs an old revision" for h in report.old_revision),
    ]
    if problems:
        parts.append(
            '<div class="banner fail" id="fleet-problems">'
            + "<br>".join(esc(p) for p in problems)
            + "</div>"
        )
    else:
        parts.append(
            f'<div class="banner ok" id="fleet-problems">{num(len(report.hosts))} host(s): '
            "none forked, none stopped reporting, none on an old revision</div>"
        )
    t = report.total
    parts.append(
        table(
            ["figure", "value"],
            [
                ["hosts", num(len(report.hosts))],
                ["spawns", num(t.spawns)],
                ["agreed", num(t.agreed)],
                ["agreement", pct(t.agreement_rate)],
                ["other records", num(report.other_records)],
            ],
            tid="fleet-totals",
        )
    )
    parts.append("<h2>Hosts</h2>")
    parts.append(
        table(
            ["host", "records", "head", "last ingest", "lag", "snapshot", "policy", "state"],
            (
                [
                    esc(h.host_id),
                    num(h.records),
                    f"<code>{esc(h.head_hash[:16])}</code>",
                    _when(h.last_ingest_at),
                    _seconds(h.lag_s),
                    esc(h.ruleset_rev or "-"),
                    esc("-" if h.policy_revision is None else h.policy_revision),
                    esc(
                        "forked"
                        if h.forked_seq is not None
                        else "stopped"
                        if h.stale
                        else "old revision"
                        if h.old_revision
                        else "ok"
                    ),
                ]
                for h in report.hosts
            ),
            tid="fleet-hosts",
            numeric_from=1,
        )
    )
    for dimension in DIMENSIONS:
        rows = report.groups.get(dimension, ())
        if not rows:
            continue
        chart = charts.bars(
            [(r.group, [(k, n, "") for k, n in r.divergence]) for r in rows],
            title=f"fleet agreement by {dimension}",
        )
        parts.append(
            f'<section id="fleet-by-{esc(dimension)}"><h2>By {esc(dimension)}</h2>'
            f'<div class="grid"><div>{chart}</div><div>{_rows_table(dimension, rows)}</div></div>'
            "</section>"
        )
    if report.alarms:
        parts.append("<h2>Alarms</h2>")
        parts.append(
            table(
                ["at", "host", "kind", "seq", "detail"],
                (
                    [
                        esc(a.get("at") or "-"),
                        esc(a["host_id"]),
                        esc(a["kind"]),
                        esc(a["seq"]),
                        esc(a.get("detail") or ""),
                    ]
                    for a in report.alarms
                ),
                tid="fleet-alarms",
                numeric_from=99,
            )
        )
    return page("Fleet", "/fleet", "".join(parts))
