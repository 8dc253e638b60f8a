"""The shadow index: one row of counted fields per shadow record (``shadow_index``) and a count
per hour and distinct fact (``shadow_cube``), kept beside the audit chain so the console reads
agreement tables, time series and the records behind a bar without parsing the chain. Owns the
two tables and ``shadow_index_state`` (schema step 5 in :mod:`.db`); derives everything from the
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
    "CubeRow",
    "IndexedRecord",
    "catch_up",
    "catch_up_all",
    "cube",
    "daily",
    "extend",
    "index_rows",
    "next_seq",
    "partial_hour",
    "records",
    "seq_bounds",
    "totals",
    "values",
]

#: Records of other writers indexed by one recorder append before its own (bounding the time
#: an append holds the write lock on a chain that was never indexed).
CATCH_UP: Final = 20_000

_FACT: Final = "repo, role, mechanism, seam, transport, divergence, outcome"
_INSERT: Final = f"INSERT INTO shadow_index(seq, at_us, {_FACT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_UPSERT: Final = (
    f"INSERT INTO shadow_cube(hour, {_FACT}, n, first_seq, last_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT DO UPDATE SET n = n + excluded.n, "
    "first_seq = min(first_seq, excluded.first_seq), last_seq = max(last_seq, excluded.last_seq)"
)


@dataclass(frozen=True, slots=True)
class CubeRow:
    """``n`` records of one fact in one hour, seqs within ``first_seq .. last_seq``."""

    hour: int
    fact: ShadowFact
    n: int
    first_seq: int
    last_seq: int


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
        _UPSERT,
        [(hour, *fact, n, *bounds[(hour, fact)]) for (hour, fact), n in counts.items()],
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


def cube(
    conn: apsw.Connection, *, from_hour: int | None = None, where: dict[str, str] | None = None
) -> list[CubeRow]:
    """The cube's rows at or after ``from_hour``, restricted to the ``where`` field values."""
    clauses, args = _where(where)
    if from_hour is not None:
        clauses.append("hour >= ?")
        args.append(from_hour)
    sql = f"SELECT hour, {_FACT}, n, first_seq, last_seq FROM shadow_cube"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    return [
        CubeRow(int(r[0]), ShadowFact(*r[1:8]), int(r[8]), int(r[9]), int(r[10]))
        for r in conn.execute(sql, args)
    ]


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


def _cube_where(
    where: dict[str, str] | None, from_hour: int | None, to_hour: int | None = None
) -> tuple[str, list[Any]]:
    clauses, args = _where(where)
    if from_hour is not None:
        clauses.append("hour >= ?")
        args.append(from_hour)
    if to_hour is not None:
        clauses.append("hour <= ?")
        args.append(to_hour)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def totals(
    conn: apsw.Connection, *, from_hour: int | None = None, where: dict[str, str] | None = None
) -> list[tuple[ShadowFact, int]]:
    """Records per distinct fact at or after ``from_hour`` (all hours summed)."""
    sql, args = _cube_where(where, from_hour)
    rows: list[Any] = conn.execute(
        f"SELECT {_FACT}, sum(n) FROM shadow_cube{sql} GROUP BY {_FACT}", args
    ).fetchall()
    return [(ShadowFact(*r[:7]), int(r[7])) for r in rows]


def daily(
    conn: apsw.Connection,
    *,
    agreed: str,
    from_hour: int | None = None,
    where: dict[str, str] | None = None,
) -> list[tuple[int, int, int]]:
    """``(day since the epoch, records, records whose divergence is agreed)`` per UTC day."""
    sql, args = _cube_where(where, from_hour)
    rows: list[Any] = conn.execute(
        f"SELECT hour / 24, sum(n), sum(CASE WHEN divergence = ? THEN n ELSE 0 END) "
        f"FROM shadow_cube{sql} GROUP BY hour / 24 ORDER BY hour / 24",
        [agreed, *args],
    ).fetchall()
    return [(int(d), int(n), int(a)) for d, n, a in rows]


def seq_bounds(
    conn: apsw.Connection,
    *,
    from_hour: int | None = None,
    to_hour: int | None = None,
    where: dict[str, str] | None = None,
) -> tuple[int, int] | None:
    """The lowest and highest seq of the records the cube counts for ``where`` in the hours
    given, or ``None`` when it counts none."""
    sql, args = _cube_where(where, from_hour, to_hour)
    row = conn.execute(
        f"SELECT min(first_seq), max(last_seq) FROM shadow_cube{sql}", args
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def partial_hour(
    conn: apsw.Connection, *, since_us: int, where: dict[str, str] | None = None
) -> list[tuple[ShadowFact, int]]:
    """Records per fact at or after ``since_us`` within its own hour (read from the index rows
    of that hour only: the cube's seq bounds limit the scan)."""
    hour = since_us // HOUR_US
    bounds = seq_bounds(conn, from_hour=hour, to_hour=hour, where=where)
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


def values(conn: apsw.Connection, name: str) -> list[str]:
    """The distinct values of one field the cube counts."""
    if name not in ShadowFact._fields:
        raise ValueError(f"unknown field {name!r}")
    return [str(r[0]) for r in conn.execute(f"SELECT DISTINCT {name} FROM shadow_cube ORDER BY 1")]


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
