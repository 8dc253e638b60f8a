"""``rensei fleet report`` as data: agreement across the fleet's hosts and each host's state,
computed in SQL by PostgreSQL over the ingested records. Owns the report's queries and its
value types; the text is the CLI's, a console page calls :func:`fleet_report` as it is.

Agreement uses the shadow report's notions (:mod:`rensei_routing.core.shadow.report`): per
group, spawns (shadow records), agreed, the count of each divergence kind, direct-HTTP spawns,
held and rejected proposals, grouped by host, repo, role, mechanism and seam (a record without
a repo or role counts under ``(none)``). Each ingest adds the records it loaded to
``fleet_agreement`` (counts per host, repo, role, mechanism and seam, in the ingest's own
transaction: :func:`accumulate`), records removed leave them in the removing statement (a
trigger: :mod:`.db`; ``rensei fleet repair``: :mod:`.repair`), so the report is one
``GROUPING SETS`` query over those rows, whatever the number of records, and its figures are
those of the records held. Only native shadow records count; imported HydraFlow
records and other records are counted apart.

Per host: records held, head hash and the head's ``recorded_at``, the last ingest, the lag (the
age of the newest evidence held: now - the head's ``recorded_at``), the latest ruleset snapshot
and policy revision its records cite, and three alarms: forked (a fork alarm was raised),
stopped reporting (no ingest for longer than ``stale_after``, or never), old revision (its
snapshot revision is below the newest any host of its org cites, or below ``revision`` when one
is given; likewise its policy revision).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..core.shadow.compare import DIVERGENCES
from ..core.shadow.report import ALL, ReportRow
from .db import AGREEMENT_COUNTS, AGREEMENT_KEYS, agreement_groups, store_error

if TYPE_CHECKING:
    import psycopg

__all__ = ["DIMENSIONS", "FleetReport", "HostState", "accumulate", "fleet_report"]

#: The groupings of the agreement figures, in the order they are shown.
DIMENSIONS: Final = ("host", "repo", "role", "mechanism", "seam")
_KEYS: Final = AGREEMENT_KEYS
_COUNTS: Final = ("spawns", "agreed", *AGREEMENT_COUNTS)
#: One ingest's records added to the per-group counts (in the ingest's transaction).
_ACCUMULATE: Final = (
    f"INSERT INTO fleet_agreement AS a ({', '.join(_KEYS)}, {', '.join(_COUNTS)}) "
    + agreement_groups("fleet_records", "host_id = %(h)s AND seq >= %(s)s")
    + f" ON CONFLICT ({', '.join(_KEYS)}) DO UPDATE SET "
    + ", ".join(f"{c} = a.{c} + EXCLUDED.{c}" for c in _COUNTS)
)
_AGREEMENT: Final = (
    "SELECT "
    + ", ".join(f"GROUPING({k})" for k in _KEYS)
    + ", "
    + ", ".join(_KEYS)
    + ", "
    + ", ".join(f"sum({c})" for c in _COUNTS)
    + " FROM fleet_agreement GROUP BY GROUPING SETS ("
    + ", ".join(f"({k})" for k in _KEYS)
    + ", ())"
)
_OTHERS: Final = (
    "SELECT (SELECT COALESCE(sum(size), 0) FROM fleet_hosts)"
    " - (SELECT COALESCE(sum(spawns), 0) FROM fleet_agreement)"
)
_HOSTS: Final = """
WITH newest AS (
    SELECT org, max(snapshot_revision) AS snapshot_revision,
           max(policy_revision) AS policy_revision
    FROM fleet_hosts GROUP BY org
)
SELECT h.host_id, h.org, h.size, h.head_hash, h.head_recorded_at, h.last_ingest_at,
       EXTRACT(EPOCH FROM (%(now)s - h.head_recorded_at)),
       EXTRACT(EPOCH FROM (%(now)s - h.last_ingest_at)),
       h.ruleset_rev, h.snapshot_revision, h.policy_revision, h.forked_seq,
       h.last_ingest_at IS NULL OR %(now)s - h.last_ingest_at > %(stale)s,
       (h.snapshot_revision < COALESCE(%(revision)s, n.snapshot_revision))
         OR (h.policy_revision < n.policy_revision)
FROM fleet_hosts h LEFT JOIN newest n ON n.org IS NOT DISTINCT FROM h.org
ORDER BY h.host_id
"""
_ALARMS: Final = (
    "SELECT id, host_id, kind, seq, file, detail, at FROM fleet_alarms ORDER BY id DESC LIMIT 100"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostState:
    """One host as the fleet store sees it."""

    host_id: str
    org: str | None
    records: int
    head_hash: str
    head_recorded_at: dt.datetime | None
    last_ingest_at: dt.datetime | None
    lag_s: float | None
    since_ingest_s: float | None
    ruleset_rev: str | None
    snapshot_revision: int | None
    policy_revision: int | None
    forked_seq: int | None
    stale: bool
    old_revision: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "host_id": self.host_id,
            "org": self.org,
            "records": self.records,
            "head_hash": self.head_hash,
            "head_recorded_at": _iso(self.head_recorded_at),
            "last_ingest_at": _iso(self.last_ingest_at),
            "lag_s": self.lag_s,
            "since_ingest_s": self.since_ingest_s,
            "ruleset_rev": self.ruleset_rev,
            "snapshot_revision": self.snapshot_revision,
            "policy_revision": self.policy_revision,
            "forked_seq": self.forked_seq,
            "stale": self.stale,
            "old_revision": self.old_revision,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetReport:
    """The whole report: the agreement total and groups, other records, hosts, alarms."""

    total: ReportRow
    groups: dict[str, tuple[ReportRow, ...]]
    other_records: int
    hosts: tuple[HostState, ...]
    alarms: tuple[dict[str, Any], ...]
    stale_after_s: float
    revision: int | None

    @property
    def forked(self) -> tuple[HostState, ...]:
        return tuple(h for h in self.hosts if h.forked_seq is not None)

    @property
    def stale(self) -> tuple[HostState, ...]:
        return tuple(h for h in self.hosts if h.stale)

    @property
    def old_revision(self) -> tuple[HostState, ...]:
        return tuple(h for h in self.hosts if h.old_revision)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total.to_dict(),
            "groups": {d: [r.to_dict() for r in rows] for d, rows in self.groups.items()},
            "other_records": self.other_records,
            "hosts": [h.to_dict() for h in self.hosts],
            "forked": [h.host_id for h in self.forked],
            "stale": [h.host_id for h in self.stale],
            "old_revision": [h.host_id for h in self.old_revision],
            "alarms": list(self.alarms),
            "stale_after_s": self.stale_after_s,
            "revision": self.revision,
        }


def _iso(moment: dt.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _row(group: str, counts: tuple[Any, ...]) -> ReportRow:
    spawns, agreed, *rest = (int(c or 0) for c in counts)
    kinds, (direct, held, rejected) = rest[: len(DIVERGENCES)], rest[len(DIVERGENCES) :]
    return ReportRow(
        group=group,
        spawns=spawns,
        agreed=agreed,
        divergence=tuple(zip(DIVERGENCES, kinds, strict=True)),
        direct_http=direct,
        held=held,
        rejected=rejected,
    )


def accumulate(conn: psycopg.Connection[Any], host_id: str, first_seq: int) -> None:
    """Add the shadow records of ``host_id`` from ``first_seq`` on (just loaded, in the
    caller's transaction) to the per-group counts the report sums.

    Raises:
        psycopg.Error: the statement failed (the caller's transaction rolls back).
    """
    conn.execute(_ACCUMULATE, {"h": host_id, "s": first_seq})


def fleet_report(
    conn: psycopg.Connection[Any],
    *,
    stale_after: dt.timedelta = dt.timedelta(hours=1),
    revision: int | None = None,
    now: dt.datetime | None = None,
) -> FleetReport:
    """The fleet report, computed by the database in one read-only snapshot (``REPEATABLE
    READ``). ``now`` defaults to the database's clock.

    Raises:
        FleetStoreError: a query failed.
    """
    import psycopg

    n = len(DIMENSIONS)
    groups: dict[str, list[ReportRow]] = {d: [] for d in DIMENSIONS}
    total = _row(ALL, (0,) * (2 + len(DIVERGENCES) + 3))
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            moment = now or conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            for record in conn.execute(_AGREEMENT).fetchall():
                flags, keys, counts = record[:n], record[n : 2 * n], record[2 * n :]
                grouped = [d for d, f in zip(DIMENSIONS, flags, strict=True) if not f]
                if not grouped:
                    total = _row(ALL, tuple(counts))
                else:
                    d = grouped[0]
                    groups[d].append(_row(str(keys[DIMENSIONS.index(d)]), tuple(counts)))
            others = conn.execute(_OTHERS).fetchone()
            params = {"now": moment, "stale": stale_after, "revision": revision}
            hosts = tuple(_host(r) for r in conn.execute(_HOSTS, params).fetchall())
            columns = ("id", "host_id", "kind", "seq", "file", "detail", "at")
            alarms = tuple(
                {**dict(zip(columns, a, strict=True)), "at": _iso(a[6])}
                for a in conn.execute(_ALARMS).fetchall()
            )
    except psycopg.Error as e:
        raise store_error("cannot compute the fleet report", e) from e
    return FleetReport(
        total=total,
        groups={
            d: tuple(sorted(rows, key=lambda r: (-r.spawns, r.group))) for d, rows in groups.items()
        },
        other_records=int(others[0]) if others else 0,
        hosts=hosts,
        alarms=alarms,
        stale_after_s=stale_after.total_seconds(),
        revision=revision,
    )


def _host(r: tuple[Any, ...]) -> HostState:
    return HostState(
        host_id=r[0],
        org=r[1],
        records=int(r[2]),
        head_hash=r[3],
        head_recorded_at=r[4],
        last_ingest_at=r[5],
        lag_s=None if r[6] is None else float(r[6]),
        since_ingest_s=None if r[7] is None else float(r[7]),
        ruleset_rev=r[8],
        snapshot_revision=r[9],
        policy_revision=r[10],
        forked_seq=r[11],
        stale=bool(r[12]),
        old_revision=bool(r[13]),
    )
