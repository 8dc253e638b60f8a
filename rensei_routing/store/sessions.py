"""Admission receipts issued by this host and the sessions running under them, in the home's
SQLite database, so every process on the host (and a host restart) sees one set.

Adapter: owns the ``receipts`` and ``sessions`` tables. Every write is a function of a
connection the caller's transaction holds (the audit log appends the transition's record in the
same transaction: a state change and its record commit together). Times are integer
milliseconds since the epoch, given by the caller; this module reads no clock.

The lapsed-lease check. A session's expiry (``expires_ms``) changes on every heartbeat, so it is
not indexed: an index on it would make each heartbeat write two or three pages (the row's, the
entry's old and new leaf) where one durable write writes one. What is indexed, with the state,
is ``lapse_floor_ms``, a lower bound of the expiry of every open session (``CHECK
(lapse_floor_ms <= expires_ms)``): "no open session has a floor before now" proves "no lease
lapsed", in one index probe. A heartbeat keeps the floor while it is at least half a lease
ahead (and not past the new expiry), and otherwise sets it to the new expiry, so a session that
heartbeats more often than every half lease rewrites the index entry once per half lease and
never trips the check. When the check trips (a floor passed), the caller takes the path that
records expiries: :meth:`SessionStore.lapsed` finds the truly lapsed sessions among those whose
floor passed, and :meth:`SessionStore.tighten_floors` sets the others' floors to their
expiries, so one trip costs one slow heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, Final

import apsw

from ..errors import ReceiptError, StoreError

__all__ = [
    "DRAIN",
    "ENDED",
    "EXPIRED",
    "FINISH",
    "ON_REVOKE",
    "OPEN",
    "SessionRow",
    "SessionStore",
]

OPEN: Final = "open"
ENDED: Final = "ended"
EXPIRED: Final = "expired"
#: What a session does when a newer verified snapshot no longer grants its pool.
FINISH: Final = "finish"
DRAIN: Final = "drain"
ON_REVOKE: Final = (FINISH, DRAIN)

_COLUMNS: Final = (
    "session_id, receipt_id, pool, project, ruleset_rev, state, on_revoke, started_ms, "
    "heartbeat_ms, lease_ms, expires_ms, ended_ms, end_reason, revoked_rev"
)

#: A heartbeat's renewal: the session is open and no open session's lapse floor has passed
#: (so no lease lapsed). ``?1`` is now, ``?2`` the session.
_RENEWABLE: Final = (
    "WHERE session_id = ?2 AND state = 'open' AND coalesce("
    "(SELECT min(lapse_floor_ms) FROM sessions WHERE state = 'open'), ?1) >= ?1"
)
#: The renewal that keeps the floor (it is at least half a lease ahead and not past the new
#: expiry): the row's page is the only one written.
_RENEW_KEEPING_FLOOR: Final = (
    "UPDATE sessions SET heartbeat_ms = ?1, expires_ms = ?1 + lease_ms "
    f"{_RENEWABLE} AND lapse_floor_ms BETWEEN ?1 + lease_ms / 2 AND ?1 + lease_ms "
    f"RETURNING {_COLUMNS}"
)
#: The renewal that moves the floor to the new expiry (once per half lease).
_RENEW_MOVING_FLOOR: Final = (
    "UPDATE sessions SET heartbeat_ms = ?1, expires_ms = ?1 + lease_ms, "
    f"lapse_floor_ms = ?1 + lease_ms {_RENEWABLE} RETURNING {_COLUMNS}"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow:
    """One session as stored."""

    session_id: str
    receipt_id: str
    pool: str
    project: str | None
    ruleset_rev: str
    state: str
    on_revoke: str
    started_ms: int
    heartbeat_ms: int
    lease_ms: int
    expires_ms: int
    ended_ms: int | None
    end_reason: str | None
    revoked_rev: str | None

    def renewed(self, now_ms: int, *, revoked_rev: str | None) -> SessionRow:
        """This row after a heartbeat at ``now_ms`` (what :meth:`SessionStore.renew` stores)."""
        return replace(
            self,
            heartbeat_ms=now_ms,
            expires_ms=now_ms + self.lease_ms,
            revoked_rev=revoked_rev,
        )

    def state_at(self, now_ms: int) -> str:
        """The state at ``now_ms``: an open session whose lease lapsed is expired (recorded as
        such by the next write that sees it)."""
        return EXPIRED if self.state == OPEN and now_ms > self.expires_ms else self.state

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        """JSON form (``state`` as of ``now_ms`` when given)."""
        return {
            "sessionId": self.session_id,
            "receiptId": self.receipt_id,
            "pool": self.pool,
            "project": self.project,
            "rulesetRev": self.ruleset_rev,
            "state": self.state if now_ms is None else self.state_at(now_ms),
            "onRevoke": self.on_revoke,
            "startedMs": self.started_ms,
            "heartbeatMs": self.heartbeat_ms,
            "leaseMs": self.lease_ms,
            "expiresMs": self.expires_ms,
            "endedMs": self.ended_ms,
            "endReason": self.end_reason,
            "revokedRev": self.revoked_rev,
        }


_NAMES: Final = tuple(n.strip() for n in _COLUMNS.split(","))


# Every field of a row is a selected column, in order (checked once, here).
assert tuple(f.name for f in fields(SessionRow)) == _NAMES
#: Each slot's setter, in column order: a row is filled through them, as the frozen class's
#: ``__init__`` fills it, without its per-field ``object.__setattr__`` calls (a third of the
#: time: ``session list`` builds 10,000 rows).
_SETTERS: Final = tuple(getattr(SessionRow, name).__set__ for name in _NAMES)
_new = object.__new__


def _row(values: Any) -> SessionRow:
    row: SessionRow = _new(SessionRow)
    for set_slot, value in zip(_SETTERS, values, strict=True):
        set_slot(row, value)
    return row


class SessionStore:
    """The receipts and sessions tables over one connection (reads anywhere; writes inside the
    caller's transaction)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def add_receipt(
        self,
        *,
        receipt_id: str,
        pool: str,
        project: str | None,
        ruleset_rev: str,
        admitted_ms: int,
        lease_ms: int,
        body: bytes,
    ) -> None:
        """Remember an issued receipt (inside the caller's transaction)."""
        self._conn.execute(
            "INSERT INTO receipts(receipt_id, pool, project, ruleset_rev, admitted_ms, lease_ms, "
            "body) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (receipt_id, pool, project, ruleset_rev, admitted_ms, lease_ms, body),
        )

    def receipt_body(self, receipt_id: str) -> bytes | None:
        """The receipt as issued, or ``None`` when this host never issued it.

        Raises:
            StoreError: the read failed.
        """
        try:
            value = self._conn.execute(
                "SELECT body FROM receipts WHERE receipt_id = ?", (receipt_id,)
            ).get
        except apsw.Error as e:
            raise StoreError(f"cannot read receipts: {e}") from e
        return bytes(value) if isinstance(value, bytes) else None

    def start(
        self,
        *,
        session_id: str,
        receipt_id: str,
        pool: str,
        project: str | None,
        ruleset_rev: str,
        on_revoke: str,
        now_ms: int,
        lease_ms: int,
    ) -> SessionRow:
        """Open a session under a receipt (inside the caller's transaction).

        Raises:
            ReceiptError: ``used`` (a session already ran under this receipt).
        """
        try:
            self._conn.execute(
                f"INSERT INTO sessions({_COLUMNS}, lapse_floor_ms) VALUES "
                "(?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, NULL, NULL, NULL, ?)",
                (
                    session_id,
                    receipt_id,
                    pool,
                    project,
                    ruleset_rev,
                    on_revoke,
                    now_ms,
                    now_ms,
                    lease_ms,
                    now_ms + lease_ms,
                    now_ms + lease_ms,  # the lapse floor: the expiry itself
                ),
            )
        except apsw.ConstraintError as e:
            raise ReceiptError("used", f"a session already ran under {receipt_id}") from e
        found = self.get(session_id)
        assert found is not None
        return found

    def get(self, session_id: str) -> SessionRow | None:
        """Raises: StoreError."""
        try:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        except apsw.Error as e:
            raise StoreError(f"cannot read sessions: {e}") from e
        return None if row is None else _row(row)

    def renew_if_none_lapsed(self, session_id: str, *, now_ms: int) -> SessionRow | None:
        """A heartbeat's renewal, reading the session and checking that no lease lapsed in the
        same statement: the lease of the open session runs its ``lease_ms`` from ``now_ms``,
        only when no open session's lapse floor has passed by ``now_ms``. The renewed row;
        ``None`` (nothing changed) when the session is absent or not open, or some floor
        passed (the caller then takes the path that records expiries and tightens floors).
        Inside the caller's transaction, which may still roll the renewal back.

        Raises:
            StoreError: the write failed.
        """
        args = (now_ms, session_id)
        try:
            rows = self._conn.execute(_RENEW_KEEPING_FLOOR, args).fetchall()
            if not rows:  # the floor must move, or the session is not renewable here
                rows = self._conn.execute(_RENEW_MOVING_FLOOR, args).fetchall()
        except apsw.Error as e:
            raise StoreError(f"cannot renew the session: {e}") from e
        return _row(rows[0]) if rows else None

    def renew(self, session_id: str, *, now_ms: int, lease_ms: int) -> None:
        """A heartbeat: the lease runs ``lease_ms`` from ``now_ms``."""
        self._conn.execute(
            "UPDATE sessions SET heartbeat_ms = ?1, expires_ms = ?2, lapse_floor_ms = ?2 "
            "WHERE session_id = ?3",
            (now_ms, now_ms + lease_ms, session_id),
        )

    def mark_revoked(self, session_id: str, ruleset_rev: str) -> None:
        """Remember the first revision that no longer granted the session's pool."""
        self._conn.execute(
            "UPDATE sessions SET revoked_rev = ? WHERE session_id = ? AND revoked_rev IS NULL",
            (ruleset_rev, session_id),
        )

    def close(self, session_id: str, *, state: str, now_ms: int, reason: str) -> None:
        """End (``ended``) or expire (``expired``) an open session."""
        self._conn.execute(
            "UPDATE sessions SET state = ?, ended_ms = ?, end_reason = ? "
            "WHERE session_id = ? AND state = 'open'",
            (state, now_ms, reason, session_id),
        )

    def lapsed(self, now_ms: int) -> list[SessionRow]:
        """Open sessions whose lease ran out before ``now_ms`` (found among those whose lapse
        floor passed: the floor is never after the expiry). Raises: StoreError."""
        try:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions "
                "WHERE state = 'open' AND lapse_floor_ms < ?1 AND expires_ms < ?1",
                (now_ms,),
            ).fetchall()
        except apsw.Error as e:
            raise StoreError(f"cannot read sessions: {e}") from e
        return [_row(r) for r in rows]

    def tighten_floors(self, now_ms: int) -> None:
        """Set the lapse floor of every open session whose floor passed by ``now_ms`` to its
        expiry (inside the caller's transaction, after the lapsed ones were closed), so the
        next heartbeat's check passes until a lease truly lapses."""
        self._conn.execute(
            "UPDATE sessions SET lapse_floor_ms = expires_ms "
            "WHERE state = 'open' AND lapse_floor_ms < ?",
            (now_ms,),
        )

    def open_count(self, *, now_ms: int) -> int:
        """Open sessions with a live lease: those whose lapse floor is not passed (counted in
        the index), and those among the rest whose expiry is not. Raises: StoreError."""
        sql = (
            "SELECT (SELECT count(*) FROM sessions WHERE state = 'open' AND lapse_floor_ms >= ?1)"
            " + (SELECT count(*) FROM sessions WHERE state = 'open' AND lapse_floor_ms < ?1 "
            "AND expires_ms >= ?1)"
        )
        try:
            value = self._conn.execute(sql, (now_ms,)).get
        except apsw.Error as e:
            raise StoreError(f"cannot count sessions: {e}") from e
        return int(value) if isinstance(value, int) else 0

    def counts_by_state(self, *, now_ms: int) -> dict[str, int]:
        """How many sessions are in each state at ``now_ms`` (an open one whose lease lapsed
        counts as expired, as :meth:`SessionRow.state_at` says). Raises: StoreError."""
        sql = (
            "SELECT CASE WHEN state = 'open' AND expires_ms < ?1 THEN 'expired' ELSE state END, "
            "count(*) FROM sessions GROUP BY 1"
        )
        try:
            rows = self._conn.execute(sql, (now_ms,)).fetchall()
        except apsw.Error as e:
            raise StoreError(f"cannot count sessions: {e}") from e
        return {str(state): n for state, n in rows if isinstance(n, int)}

    def open_count_of(self, project: str | None, *, now_ms: int) -> int:
        """Open sessions with a live lease of ``project`` (``None``: of no project).

        Raises:
            StoreError.
        """
        sql = (
            "SELECT count(*) FROM sessions "
            "WHERE project IS ?2 AND state = 'open' AND expires_ms >= ?1"
        )
        try:
            value = self._conn.execute(sql, (now_ms, project)).get
        except apsw.Error as e:
            raise StoreError(f"cannot count sessions: {e}") from e
        return int(value) if isinstance(value, int) else 0

    def all(self) -> Iterator[SessionRow]:
        """Every session, open ones first, then by start. Raises: StoreError."""
        try:
            cursor = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions ORDER BY state != 'open', started_ms, session_id"
            )
            for row in cursor:
                yield _row(row)
        except apsw.Error as e:
            raise StoreError(f"cannot read sessions: {e}") from e
