"""The shadow index: one row of counted fields per shadow record (``shadow_index``) and a count
per distinct fact by hour (``shadow_cube``), by UTC day (``shadow_days``) and of all time
(``shadow_totals``), each with its lowest and highest seq, kept beside the audit chain so the
console reads agreement tables, time series and the records behind a bar without parsing the
chain. Owns the
four tables and ``shadow_index_state`` (schema step 8 in :mod:`.db`); derives everything from the
chain and never changes it.

The index covers seqs ``0 .. next_seq - 1`` of the chain, contiguously. The shadow recorder
extends it in the transaction that appends its records (:func:`extend`): first the records
appended since the index's end by anyone else (claims, imports, plain decisions), at most
:data:`CATCH_UP` of them, then its own. ``rensei shadow index`` (:func:`catch_up` until done)
indexes a chain written before this schema step or by other writers. A reader that finds
``next_seq`` below the chain's head says how many records the figures leave out.

Pure SQL over one connection the caller owns (a writer's inside its transaction, or a reader's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ..core._parse import STRICT_DECODER
from ..core.audit.hydraflow import imported_payload
from ..core.shadow.compare import ShadowDecision, is_shadow_payload
from ..core.shadow.facts import HOUR_US, ShadowFact, fact_of, micros_of
from ..errors import InputError
from .codec import FUNCTION
from .db import store_error
from .home import Home

__all__ = [
    "CATCH_UP",
    "LEVELS",
    "IndexedRecord",
    "catch_up",
    "catch_up_all",
    "daily",
    "extend",
    "index_rows",
    "next_seq",
    "partial_hour",
    "records",
    "seq_bounds",
    "since",
    "totals",
    "values",
]

#: Records of other writers indexed by one recorder append before its own (bounding the time
#: an append holds the write lock on a chain that was never indexed).
CATCH_UP: Final = 20_000

_FACT: Final = "repo, role, mechanism, seam, transport, divergence, outcome"
_INSERT: Final = f"INSERT INTO shadow_index(seq, at_us, {_FACT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
#: The three aggregate levels: table and time column (``None``: all time in one row per fact).
LEVELS: Final = {
    "hour": ("shadow_cube", "hour"),
    "day": ("shadow_days", "day"),
    "all": ("shadow_totals", None),
}


def _upsert(level: str) -> str:
    table, column = LEVELS[level]
    time = f"{column}, " if column else ""
    marks = ", ".join("?" * (11 if column else 10))
    return (
        f"INSERT INTO {table}({time}{_FACT}, n, first_seq, last_seq) VALUES ({marks}) "
        "ON CONFLICT DO UPDATE SET n = n + excluded.n, first_seq = min(first_seq, "
        "excluded.first_seq), last_seq = max(last_seq, excluded.last_seq)"
    )


_UPSERTS: Final = {level: _upsert(level) for level in LEVELS}


@dataclass(frozen=True, slots=True)
class IndexedRecord:
    """One row of the index: a shadow record's seq, time and counted fields."""

    seq: int
    at_us: int
    fact: ShadowFact


def next_seq(conn: apsw.Connection) -> int:
    """The first seq the index does not cover."""
    row = conn.execute("SELECT next_seq FROM shadow_index_state WHERE id = 1").fetchone()
    return 0 if row is None else int(row[0])


def index_rows(
    conn: apsw.Connection, rows: Iterable[tuple[int, int, ShadowFact]], stop: int
) -> None:
    """Index ``(seq, at_us, fact)`` rows (seqs below ``stop``, none indexed yet) and move the
    index's end to ``stop``. Inside the caller's write transaction."""
    items = list(rows)
    conn.executemany(_INSERT, [(seq, at, *fact) for seq, at, fact in items])
    counts: Counter[tuple[int, ShadowFact]] = Counter()
    bounds: dict[tuple[int, ShadowFact], tuple[int, int]] = {}
    for seq, at, fact in items:
        key = (at // HOUR_US, fact)
        counts[key] += 1
        low, high = bounds.get(key, (seq, seq))
        bounds[key] = (min(low, seq), max(high, seq))
    conn.executemany(
        _UPSERTS["hour"],
        [(hour, *fact, n, *bounds[(hour, fact)]) for (hour, fact), n in counts.items()],
    )
    for level in ("day", "all"):
        merged: dict[tuple[int | None, ShadowFact], list[int]] = {}
        for (hour, fact), n in counts.items():
            t = hour // 24 if level == "day" else None
            low, high = bounds[(hour, fact)]
            got = merged.get((t, fact))
            if got is None:
                merged[(t, fact)] = [n, low, high]
            else:
                got[0] += n
                got[1], got[2] = min(got[1], low), max(got[2], high)
        conn.executemany(
            _UPSERTS[level],
            [((t,) if t is not None else ()) + (*fact, *v) for (t, fact), v in merged.items()],
        )
    conn.execute("UPDATE shadow_index_state SET next_seq = ? WHERE id = 1", (stop,))


def _fact_of_row(seq: int, recorded_at: str, payload: bytes) -> tuple[int, int, ShadowFact] | None:
    """The index row of one stored record, or ``None`` for a record that is not a readable
    shadow record (it is counted nowhere, as ``shadow report`` counts it nowhere)."""
    try:
        doc: Any = imported_payload(STRICT_DECODER.decode(payload.decode("utf-8")))
        if not is_shadow_payload(doc):
            return None
        record = ShadowDecision.from_dict(doc, path=f"audit[{seq}]", redacted=True)
        return seq, micros_of(recorded_at), fact_of(record)
    except (InputError, ValueError, RecursionError, UnicodeDecodeError):
        return None


def catch_up(conn: apsw.Connection, *, stop: int | None = None, limit: int = CATCH_UP) -> int:
    """Index up to ``limit`` stored records from the index's end (not past ``stop``); returns
    the new end. Inside the caller's write transaction."""
    start = next_seq(conn)
    high = start + limit if stop is None else min(stop, start + limit)
    rows: list[Any] = conn.execute(
        f"SELECT seq, recorded_at, {FUNCTION}(payload) FROM audit_records "
        "WHERE seq >= ? AND seq < ? ORDER BY seq",
        (start, high),
    ).fetchall()
    if not rows:
        return start
    found = [r for r in (_fact_of_row(s, t, bytes(p)) for s, t, p in rows) if r is not None]
    end = int(rows[-1][0]) + 1
    index_rows(conn, found, end)
    return end


def extend(
    conn: apsw.Connection, first: int, recorded_at: str, records: Sequence[ShadowDecision]
) -> None:
    """Index ``records`` about to be appended at seqs ``first ..`` (inside the append's write
    transaction), after catching up with what others appended since the index's end; if more
    than :data:`CATCH_UP` records remain unindexed, the new ones wait for a later catch-up."""
    if next_seq(conn) < first and catch_up(conn, stop=first) < first:
        return
    at = micros_of(recorded_at)
    index_rows(
        conn, ((first + i, at, fact_of(r)) for i, r in enumerate(records)), first + len(records)
    )


def _where(where: dict[str, str] | None) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for name, value in sorted((where or {}).items()):
        if name not in ShadowFact._fields:
            raise ValueError(f"unknown field {name!r}")
        clauses.append(f"{name} = ?")
        args.append(value)
    return clauses, args


def records(
    conn: apsw.Connection,
    *,
    where: dict[str, str] | None = None,
    low: int = 0,
    high: int,
    since_us: int | None = None,
    limit: int,
) -> list[IndexedRecord]:
    """Indexed records with ``low <= seq < high`` matching ``where`` (and at or after
    ``since_us``), newest first, at most ``limit``."""
    clauses, args = _where(where)
    clauses.append("seq >= ? AND seq < ?")
    args.extend([low, high])
    if since_us is not None:
        clauses.append("at_us >= ?")
        args.append(since_us)
    args.append(limit)
    sql = (
        f"SELECT seq, at_us, {_FACT} FROM shadow_index WHERE {' AND '.join(clauses)} "
        "ORDER BY seq DESC LIMIT ?"
    )
    rows: list[Any] = conn.execute(sql, args).fetchall()
    return [IndexedRecord(int(r[0]), int(r[1]), ShadowFact(*r[2:9])) for r in rows]


def _level_where(
    level: str, where: dict[str, str] | None, low: int | None, high: int | None
) -> tuple[str, str, list[Any]]:
    """``(table, WHERE clause, args)`` for ``where`` and the time units ``low .. high`` (hours
    or days; both ``None`` for the all-time level)."""
    table, column = LEVELS[level]
    clauses, args = _where(where)
    if low is not None:
        assert column is not None
        clauses.append(f"{column} >= ?")
        args.append(low)
    if high is not None:
        assert column is not None
        clauses.append(f"{column} <= ?")
        args.append(high)
    return table, (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def totals(
    conn: apsw.Connection,
    *,
    level: str = "all",
    low: int | None = None,
    high: int | None = None,
    where: dict[str, str] | None = None,
) -> list[tuple[ShadowFact, int]]:
    """Records per distinct fact in the hours (``level="hour"``) or days (``"day"``)
    ``low .. high``, or of all time (``"all"``)."""
    table, sql, args = _level_where(level, where, low, high)
    rows: list[Any] = conn.execute(
        f"SELECT {_FACT}, sum(n) FROM {table}{sql} GROUP BY {_FACT}", args
    ).fetchall()
    return [(ShadowFact(*r[:7]), int(r[7])) for r in rows]


def daily(
    conn: apsw.Connection,
    *,
    agreed: str,
    low: int | None = None,
    where: dict[str, str] | None = None,
) -> list[tuple[int, int, int]]:
    """``(day since the epoch, records, records whose divergence is agreed)`` per UTC day from
    day ``low`` on."""
    table, sql, args = _level_where("day", where, low, None)
    rows: list[Any] = conn.execute(
        f"SELECT day, sum(n), sum(CASE WHEN divergence = ? THEN n ELSE 0 END) "
        f"FROM {table}{sql} GROUP BY day ORDER BY day",
        [agreed, *args],
    ).fetchall()
    return [(int(d), int(n), int(a)) for d, n, a in rows]


def seq_bounds(
    conn: apsw.Connection,
    *,
    level: str = "all",
    low: int | None = None,
    high: int | None = None,
    where: dict[str, str] | None = None,
) -> tuple[int, int] | None:
    """The lowest and highest seq of the records counted for ``where`` at ``level`` in the
    time units ``low .. high``, or ``None`` when none are."""
    table, sql, args = _level_where(level, where, low, high)
    row = conn.execute(f"SELECT min(first_seq), max(last_seq) FROM {table}{sql}", args).fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def partial_hour(
    conn: apsw.Connection, *, since_us: int, where: dict[str, str] | None = None
) -> list[tuple[ShadowFact, int]]:
    """Records per fact at or after ``since_us`` within its own hour (read from the index rows
    of that hour only: the cube's seq bounds limit the scan)."""
    hour = since_us // HOUR_US
    bounds = seq_bounds(conn, level="hour", low=hour, high=hour, where=where)
    if bounds is None:
        return []
    clauses, args = _where(where)
    clauses.append("seq >= ? AND seq <= ? AND at_us >= ?")
    args.extend([bounds[0], bounds[1], since_us])
    rows: list[Any] = conn.execute(
        f"SELECT {_FACT}, count(*) FROM shadow_index WHERE {' AND '.join(clauses)} "
        f"GROUP BY {_FACT}",
        args,
    ).fetchall()
    return [(ShadowFact(*r[:7]), int(r[7])) for r in rows]


def since(
    conn: apsw.Connection, *, since_us: int, where: dict[str, str] | None = None
) -> list[tuple[ShadowFact, int, int]]:
    """``(fact, records, day)`` at or after ``since_us``, exactly: whole days after the cut's
    day from the day table, whole hours after the cut's hour in that day from the hour table,
    the cut's own hour from its index rows."""
    hour = since_us // HOUR_US
    day = hour // 24
    out = [(f, n, -1) for f, n in totals(conn, level="day", low=day + 1, where=where)]
    part = totals(conn, level="hour", low=hour + 1, high=day * 24 + 23, where=where)
    part += partial_hour(conn, since_us=since_us, where=where)
    return out + [(f, n, day) for f, n in part]


def values(conn: apsw.Connection, name: str) -> list[str]:
    """The distinct values of one field the index counts."""
    if name not in ShadowFact._fields:
        raise ValueError(f"unknown field {name!r}")
    return [
        str(r[0]) for r in conn.execute(f"SELECT DISTINCT {name} FROM shadow_totals ORDER BY 1")
    ]


def catch_up_all(home: Home, *, chunk: int = 50_000) -> tuple[int, int]:
    """Index every record not indexed yet, ``chunk`` per write transaction; returns the index's
    end before and after.

    Raises:
        HomeError, StoreError: the home or its database cannot be used.
    """
    with closing(home.connect(write=True)) as conn:
        start = next_seq(conn)
        end = start
        while True:
            try:
                with conn:
                    moved = catch_up(conn, limit=chunk)
            except apsw.Error as e:
                raise store_error("cannot update the shadow index", e, home.db_path) from e
            if moved == end:
                return start, end
            end = moved
