"""Admission receipts issued by this host and the sessions running under them, in the home's
SQLite database, so every process on the host (and a host restart) sees one set.

Adapter: owns the ``receipts`` and ``sessions`` tables. Every write is a function of a
connection the caller's transaction holds (the audit log appends the transition's record in the
same transaction: a state change and its record commit together). Times are integer
milliseconds since the epoch, given by the caller; this module reads no clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
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


def _row(values: Any) -> SessionRow:
    return SessionRow(**dict(zip(_NAMES, values, strict=True)))


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
                f"INSERT INTO sessions({_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, NULL, NULL, NULL)",
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

    def get_if_none_lapsed(self, session_id: str, *, now_ms: int) -> SessionRow | None:
        """The session, in one read that also tells no open session's lease has lapsed by
        ``now_ms``; ``None`` when it is absent or some lease lapsed (the caller then takes the
        path that records expiries). Raises: StoreError."""
        try:
            row = self._conn.execute(
                f"SELECT {_COLUMNS}, EXISTS (SELECT 1 FROM sessions WHERE state = 'open' "
                "AND expires_ms < ?) FROM sessions WHERE session_id = ?",
                (now_ms, session_id),
            ).fetchone()
        except apsw.Error as e:
            raise StoreError(f"cannot read sessions: {e}") from e
        if row is None or row[-1]:
            return None
        return _row(row[:-1])

    def renew(self, session_id: str, *, now_ms: int, lease_ms: int) -> None:
        """A heartbeat: the lease runs ``lease_ms`` from ``now_ms``."""
        self._conn.execute(
            "UPDATE sessions SET heartbeat_ms = ?, expires_ms = ? WHERE session_id = ?",
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
        """Open sessions whose lease ran out before ``now_ms``. Raises: StoreError."""
        try:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE state = 'open' AND expires_ms < ?",
                (now_ms,),
            ).fetchall()
        except apsw.Error as e:
            raise StoreError(f"cannot read sessions: {e}") from e
        return [_row(r) for r in rows]

    def open_count(self, *, now_ms: int) -> int:
        """Open sessions with a live lease. Raises: StoreError."""
        return self._count("", (now_ms,))

    def open_count_of(self, project: str | None, *, now_ms: int) -> int:
        """Open sessions with a live lease of ``project`` (``None``: of no project).

        Raises:
            StoreError.
        """
        return self._count(" AND project IS ?", (now_ms, project))

    def _count(self, where: str, args: tuple[Any, ...]) -> int:
        sql = "SELECT count(*) FROM sessions WHERE state = 'open' AND expires_ms >= ?" + where
        try:
            value = self._conn.execute(sql, args).get
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
