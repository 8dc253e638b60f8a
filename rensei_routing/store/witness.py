"""A witness's stored views, and the cosignatures of this home's own checkpoints, in the home
database. Owns the ``witness_views`` and ``audit_cosignatures`` tables; must not decide whether
a checkpoint may be cosigned (:mod:`rensei_routing.core.audit.cosigner` does) nor read the clock
(callers pass the time).

A view is what this home, witnessing another log through files, last cosigned for one origin:
its size, root, the log's key and the note. It advances only by compare-and-swap
(:func:`advance`): the update names the view it replaces (size and root, or none), in one
statement, so two requests checked against one view cannot both move it, and a request checked
against a view that moved meanwhile changes nothing (the caller checks again against the new
one). So a slower request for a smaller checkpoint can never roll the view back.

A cosignature is kept under the checkpoint body it signs (size and body bytes), so a proof
carries every cosignature stored for its checkpoint, whichever note of the log carries it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import apsw

__all__ = [
    "StoredCosignature",
    "StoredView",
    "add_cosignatures",
    "advance",
    "cosignatures_for",
    "read_view",
]

_VIEW: Final = (
    "SELECT origin, size, root, log_key, note, cosigned_at, advances FROM witness_views "
    "WHERE origin = ?"
)
#: Replace the view (size, root) with a new one: no row changes when another request moved it.
_SWAP: Final = (
    "UPDATE witness_views SET size = ?, root = ?, note = ?, cosigned_at = ?, "
    "advances = advances + 1 WHERE origin = ? AND size = ? AND root = ? AND log_key = ?"
)
#: The first view of an origin: no row is written when another request made one meanwhile.
_FIRST: Final = (
    "INSERT INTO witness_views(origin, size, root, log_key, note, cosigned_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(origin) DO NOTHING"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredView:
    """The latest checkpoint this witness cosigned for ``origin``."""

    origin: str
    size: int
    root: bytes
    log_key: str
    note: str
    cosigned_at: int
    advances: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredCosignature:
    """One cosignature line kept for the checkpoint body of that size."""

    size: int
    body: bytes
    line: str
    key_name: str
    key_hash: bytes


def read_view(conn: apsw.Connection, origin: str) -> StoredView | None:
    """The stored view of ``origin``, if this home ever cosigned for it."""
    row = conn.execute(_VIEW, (origin,)).fetchone()
    if row is None:
        return None
    return StoredView(
        origin=str(row[0]),
        size=int(row[1]),
        root=bytes(row[2]),
        log_key=str(row[3]),
        note=str(row[4]),
        cosigned_at=int(row[5]),
        advances=int(row[6]),
    )


def advance(
    conn: apsw.Connection,
    expected: StoredView | None,
    *,
    origin: str,
    size: int,
    root: bytes,
    log_key: str,
    note: str,
    cosigned_at: int,
) -> bool:
    """Move ``origin``'s view from ``expected`` (``None``: no view yet) to the new checkpoint,
    in one statement; ``False`` (nothing written) when the stored view is no longer
    ``expected``. Moving to the view it already is (the same checkpoint again) succeeds and only
    stamps the time: it still proves the view was ``expected`` when the statement ran.

    Raises:
        apsw.Error: the write failed (the caller's transaction rolls back).
    """
    if expected is None:
        conn.execute(_FIRST, (origin, size, root, log_key, note, cosigned_at))
    else:
        conn.execute(
            _SWAP,
            (size, root, note, cosigned_at, origin, expected.size, expected.root, log_key),
        )
    return conn.changes() == 1


def add_cosignatures(conn: apsw.Connection, cosignatures: Iterable[StoredCosignature]) -> int:
    """Keep each cosignature under its checkpoint body (one already kept is skipped); how many
    were new.

    Raises:
        apsw.Error: the write failed (the caller's transaction rolls back).
    """
    before = conn.total_changes()
    conn.executemany(
        "INSERT INTO audit_cosignatures(size, body, line, key_name, key_hash) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(c.size, c.body, c.line, c.key_name, c.key_hash) for c in cosignatures],
    )
    return int(conn.total_changes() - before)


def cosignatures_for(conn: apsw.Connection, size: int, body: bytes) -> tuple[str, ...]:
    """Every cosignature line kept for the checkpoint body ``body`` of ``size``, in a stable
    order (by key name, then line)."""
    rows = conn.execute(
        "SELECT line FROM audit_cosignatures WHERE size = ? AND body = ? ORDER BY key_name, line",
        (size, body),
    )
    return tuple(str(r[0]) for r in rows)
