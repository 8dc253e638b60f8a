"""Admitted work on the host: admission receipts and the sessions that run under them (the
synthetic dispatch path document 000's rehearsal lacked).

The postures (docs/snapshots.md, "Running work"):
- an admitted session is never stopped by an outage, by its snapshot crossing DegradedAfter or
  RefuseAfter, or by a damaged cache: only new claims refuse;
- a session whose pool a *newer* verified snapshot no longer grants is told ``grant-revoked``
  (with that revision) on its next heartbeat; by its ``on_revoke`` policy it then keeps running
  (``finish``, the default: document 000 revokes admission, not running work) or is ended
  (``drain``);
- a lease that lapses without a heartbeat expires; a heartbeat for an ended or expired session
  is an error;
- starting a session passes the budget posture: the authoritative counter (open sessions on this
  host, against ``inflight_limit``) fails closed when it cannot be read; when the live signal
  (the control plane reachable and the snapshot fresh) is unavailable, a bounded per-project
  local cap counts the project's open sessions.

Every transition (start, revoked, end, expiry) is an audit record, committed in the same
SQLite transaction as the state change. The clock is the caller's.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import apsw

from .. import signing
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.snapshot.authz import AuthorizationDecision
from ..core.snapshot.envelope import RulesetSnapshot
from ..core.snapshot.freshness import format_age
from ..core.snapshot.postures import BudgetResult, ClaimGate, admit_budget
from ..core.snapshot.receipts import DEFAULT_LEASE_MS, MAX_LEASE_MS, Receipt
from ..core.timestamps import format_timestamp
from ..errors import ReceiptError, SnapshotError
from ..store.audit import AuditLog
from ..store.home import Home
from ..store.sessions import DRAIN, ENDED, EXPIRED, FINISH, ON_REVOKE, SessionRow, SessionStore
from .cache import HostCache

__all__ = [
    "DEFAULT_LOCAL_CAP",
    "SESSION_RECORD",
    "BudgetLimits",
    "Heartbeat",
    "HostSessions",
    "epoch_ms",
]

SESSION_RECORD: Final = "session-transition"
#: Open sessions one project may start while the live signal is unavailable.
DEFAULT_LOCAL_CAP: Final = 4


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of an aware datetime."""
    return int(moment.timestamp() * 1000)


def _revision(ruleset_rev: str) -> int | None:
    org, _, rev = ruleset_rev.rpartition("@")
    return int(rev) if org and rev.isdigit() else None


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """The budget posture's bounds for starting a session: ``inflight_limit`` open sessions on
    this host (``None``: no limit), and ``local_cap`` per project while the live signal is
    unavailable."""

    inflight_limit: int | None = None
    local_cap: int = DEFAULT_LOCAL_CAP


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """What a heartbeat told its session: ``continue``, or ``drain`` (the session was ended);
    ``revoked_rev`` when a newer verified snapshot no longer grants its pool; the held
    snapshot's state as the heartbeat saw it (``ok``, ``none``, ``unreadable``)."""

    session: SessionRow
    action: str
    revoked_rev: str | None
    snapshot: str

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            **self.session.to_dict(now_ms),
            "action": self.action,
            "grantRevoked": self.revoked_rev is not None,
            "revokedRev": self.revoked_rev,
            "snapshot": self.snapshot,
        }


class _Refused(Exception):
    """Raised inside a transaction to roll it back with a typed refusal."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class _SlowPath(Exception):
    """Raised inside the quick heartbeat's transaction to roll its renewal back."""


class HostSessions:
    """Receipts and sessions of one host home (``home``, its cache ``cache``)."""

    def __init__(
        self, home: Home, cache: HostCache, *, redactor: Redactor = DEFAULT_REDACTOR
    ) -> None:
        self._home = home
        self._cache = cache
        self._redactor = redactor
        self._public: signing.PublicKey | None = None
        self._audit: AuditLog | None = None
        self._writer_conn: apsw.Connection | None = None
        self._held: tuple[tuple[int, int, int], RulesetSnapshot | None] | None = None
        self._snapshot_path = os.fspath(cache.snapshot_path)
        self._gate: tuple[RulesetSnapshot, ClaimGate] | None = None

    def close(self) -> None:
        """Close the audit log and the write connection this object holds open (they reopen on
        the next write)."""
        if self._audit is not None:
            self._audit.close()
            self._audit = None
        if self._writer_conn is not None:
            self._writer_conn.close()
            self._writer_conn = None

    def __enter__(self) -> HostSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- receipts ------------------------------------------------------------------------------

    def issue(
        self,
        decision: AuthorizationDecision,
        *,
        pool: str,
        project: str | None,
        admitted_at: datetime,
        lease_ms: int = DEFAULT_LEASE_MS,
    ) -> Receipt:
        """The signed receipt of an admitted claim (not yet stored: :meth:`record_claim`).

        Raises:
            ReceiptError: ``malformed`` (the lease is out of range, or the claim was refused).
            HomeError: the host key is unusable.
        """
        if not decision.allowed:
            raise ReceiptError("malformed", "a refused claim has no receipt")
        if not 0 < lease_ms <= MAX_LEASE_MS:
            raise ReceiptError("malformed", f"lease must be 1..{MAX_LEASE_MS} ms")
        fresh = decision.freshness
        key = self._home.private_key()
        full = decision.to_dict()
        receipt = Receipt(
            receipt_id="rcpt_" + secrets.token_hex(16),
            pool=pool,
            project=project,
            host_id=self._home.info().key_id,
            ruleset_rev=fresh.ruleset_rev or "",
            snapshot_age_ms=fresh.age_ms or 0,
            degraded=fresh.degraded,
            admitted_at=format_timestamp(admitted_at),
            lease_ms=lease_ms,
            authorization={
                k: full[k] for k in ("allowed", "reason", "authorizer", "policyIds") if k in full
            },
            signing_key_id=key.public_key.key_id,
        )
        return receipt.with_signature(key.sign(receipt.signed_bytes()))

    def record_claim(
        self, payload: dict[str, Any], moment: datetime, receipt: Receipt | None
    ) -> None:
        """Append the claim's record (carrying the receipt, when admitted) and remember the
        receipt, in one transaction.

        Raises:
            StoreError, HomeError: nothing was written.
        """

        record = payload if receipt is None else {**payload, "receipt": receipt.to_dict()}

        def remember(conn: apsw.Connection) -> list[Any]:
            if receipt is not None:
                SessionStore(conn).add_receipt(
                    receipt_id=receipt.receipt_id,
                    pool=receipt.pool,
                    project=receipt.project,
                    ruleset_rev=receipt.ruleset_rev,
                    admitted_ms=epoch_ms(moment),
                    lease_ms=receipt.lease_ms,
                    body=receipt.to_bytes(),
                )
            return [record]

        self._log().append_within(remember, recorded_at=format_timestamp(moment))

    def check(self, receipt: Receipt, *, now: datetime | None = None) -> None:
        """A receipt is this host's, signed by its key, unedited, issued here, and (with
        ``now``) still within its lease.

        Raises:
            ReceiptError: ``wrong-key``, ``bad-signature``, ``unknown``, ``expired``.
        """
        public = self._public_key()
        if receipt.signing_key_id != public.key_id:
            raise ReceiptError(
                "wrong-key", f"signed by {receipt.signing_key_id}, not this host ({public.key_id})"
            )
        if not signing.check(public, receipt.signed_bytes(), receipt.signature_bytes()):
            raise ReceiptError("bad-signature", "the signature does not verify (edited?)")
        with self._conn() as conn:
            issued = SessionStore(conn).receipt_body(receipt.receipt_id)
        if issued is None:
            raise ReceiptError("unknown", f"{receipt.receipt_id} was not issued by this host")
        if now is not None:
            admitted = datetime.fromisoformat(receipt.admitted_at)
            if epoch_ms(now) > epoch_ms(admitted) + receipt.lease_ms:
                raise ReceiptError(
                    "expired",
                    f"{receipt.receipt_id} lapsed unused (lease {format_age(receipt.lease_ms)})",
                )

    # -- sessions ------------------------------------------------------------------------------

    def start(
        self,
        receipt: Receipt,
        *,
        now: datetime,
        on_revoke: str = FINISH,
        budget: BudgetLimits = BudgetLimits(),
    ) -> tuple[SessionRow, BudgetResult]:
        """Open a session under ``receipt`` if the budget posture admits it.

        Raises:
            ReceiptError: the receipt is refused (as :meth:`check`, or ``used``), or the budget
                refuses (``budget``: ``over-limit``, ``counter-unavailable``,
                ``local-cap-reached``); nothing is written.
            StoreError: the database failed (nothing written).
        """
        if on_revoke not in ON_REVOKE:
            raise ReceiptError("malformed", f"on-revoke must be one of {', '.join(ON_REVOKE)}")
        self.check(receipt, now=now)
        now_ms = epoch_ms(now)
        session_id = "sess_" + secrets.token_hex(16)
        live = self._live_signal(now)
        verdict: list[BudgetResult] = []

        def open_session(conn: apsw.Connection) -> list[Any]:
            store = SessionStore(conn)
            records = self._expire_lapsed(store, now_ms, now)

            def counter() -> int:
                return store.open_count(now_ms=now_ms)

            result = admit_budget(
                read_counter=counter,
                limit=budget.inflight_limit if budget.inflight_limit is not None else 2**62,
                read_live_signal=live,
                local_inflight=store.open_count_of(receipt.project, now_ms=now_ms),
                local_cap=budget.local_cap,
            )
            verdict.append(result)
            if not result.admitted:
                raise _Refused(ReceiptError("budget", f"{result.reason}: {result.detail}"))
            store.start(
                session_id=session_id,
                receipt_id=receipt.receipt_id,
                pool=receipt.pool,
                project=receipt.project,
                ruleset_rev=receipt.ruleset_rev,
                on_revoke=on_revoke,
                now_ms=now_ms,
                lease_ms=receipt.lease_ms,
            )
            return [*records, self._transition(session_id, receipt, "none", "open", "started", now)]

        self._write(now, open_session)
        return self._get(session_id), verdict[-1]

    def heartbeat(self, session_id: str, *, now: datetime) -> Heartbeat:
        """Renew a session's lease; tell it when a newer verified snapshot no longer grants its
        pool (``drain``: the session is ended).

        Raises:
            ReceiptError: ``unknown-session``, ``ended`` (an ended or expired session).
            StoreError: nothing written.
        """
        now_ms = epoch_ms(now)
        quick = self._quick_beat(session_id, now_ms)
        if quick is not None:
            return quick
        outcome: list[Heartbeat] = []
        refused: list[ReceiptError] = []

        def beat(conn: apsw.Connection) -> list[Any]:
            store = SessionStore(conn)
            records = self._expire_lapsed(store, now_ms, now)
            current = store.get(session_id)
            if current is None:
                refused.append(
                    ReceiptError("unknown-session", f"no session {session_id} on this host")
                )
                return records
            if current.state != "open":  # commit the expiries found, then refuse
                refused.append(ReceiptError("ended", f"session {session_id} is {current.state}"))
                return records
            snapshot_state, revoked = self._revocation(current)
            action = "continue"
            if revoked is not None and current.revoked_rev is None:
                store.mark_revoked(session_id, revoked)
                draining = current.on_revoke == DRAIN
                if draining:
                    store.close(session_id, state=ENDED, now_ms=now_ms, reason="grant-revoked")
                    action = "drain"
                records.append(
                    self._transition(
                        session_id,
                        current,
                        "open",
                        ENDED if draining else "open",
                        "grant-revoked",
                        now,
                        revoked_rev=revoked,
                    )
                )
            if action == "continue":
                store.renew(session_id, now_ms=now_ms, lease_ms=current.lease_ms)
                updated = current.renewed(now_ms, revoked_rev=current.revoked_rev or revoked)
            else:
                found = store.get(session_id)
                assert found is not None
                updated = found
            outcome.append(
                Heartbeat(
                    session=updated, action=action, revoked_rev=revoked, snapshot=snapshot_state
                )
            )
            return records

        self._write(now, beat)
        if refused:
            raise refused[0]
        return outcome[-1]

    def _quick_beat(self, session_id: str, now_ms: int) -> Heartbeat | None:
        """The common heartbeat, which records nothing: an open session, no lapsed lease on the
        host, no new revocation; renewed in one short transaction on this object's own write
        connection, by one statement that also reads the session and checks that no lease
        lapsed. ``None`` (nothing written: the renewal is rolled back) whenever a transition
        must be recorded: the caller then takes the audit log's path, which commits the change
        with its records."""
        conn = self._writer()
        try:
            with conn:
                renewed = SessionStore(conn).renew_if_none_lapsed(session_id, now_ms=now_ms)
                if renewed is None:
                    return None
                snapshot_state, revoked = self._revocation(renewed)
                if revoked is not None and (
                    renewed.revoked_rev is None or renewed.on_revoke == DRAIN
                ):
                    raise _SlowPath  # a new revocation, or a draining one: the slow path
                beat = Heartbeat(
                    session=renewed,  # a revocation seen here was recorded: revoked_rev set
                    action="continue",
                    revoked_rev=revoked,
                    snapshot=snapshot_state,
                )
        except _SlowPath:
            return None
        return beat

    def _writer(self) -> apsw.Connection:
        if self._writer_conn is None:
            self._writer_conn = self._home.connect(write=True)
        return self._writer_conn

    def end(self, session_id: str, *, now: datetime) -> SessionRow:
        """End a session (its work finished).

        Raises:
            ReceiptError: ``unknown-session``, ``ended``.
        """
        now_ms = epoch_ms(now)
        row = self._get(session_id)

        refused: list[ReceiptError] = []

        def close(conn: apsw.Connection) -> list[Any]:
            store = SessionStore(conn)
            records = self._expire_lapsed(store, now_ms, now)
            current = store.get(session_id)
            assert current is not None
            if current.state != "open":  # commit the expiries found, then refuse
                refused.append(ReceiptError("ended", f"session {session_id} is {current.state}"))
                return records
            store.close(session_id, state=ENDED, now_ms=now_ms, reason="ended")
            return [*records, self._transition(session_id, row, "open", ENDED, "ended", now)]

        self._write(now, close)
        if refused:
            raise refused[0]
        return self._get(session_id)

    def sessions(self) -> list[SessionRow]:
        """Every session, open ones first (read-only; a lapsed lease shows as expired through
        :meth:`SessionRow.state_at`)."""
        with self._conn() as conn:
            return list(SessionStore(conn).all())

    def open_count(self, *, now: datetime) -> int:
        """Open sessions with a live lease (the budget's counter). Raises: StoreError."""
        with self._conn() as conn:
            return SessionStore(conn).open_count(now_ms=epoch_ms(now))

    # -- internals -----------------------------------------------------------------------------

    def _public_key(self) -> signing.PublicKey:
        if self._public is None:
            self._public = self._home.public_key()
        return self._public

    def _log(self) -> AuditLog:
        if self._audit is None:
            self._audit = AuditLog.open(self._home, redactor=self._redactor)
        return self._audit

    def _conn(self) -> closing[apsw.Connection]:
        """A read-only connection to the home, closed on exit."""
        return closing(self._home.connect(write=False))

    def _get(self, session_id: str) -> SessionRow:
        with self._conn() as conn:
            row = SessionStore(conn).get(session_id)
        if row is None:
            raise ReceiptError("unknown-session", f"no session {session_id} on this host")
        return row

    def _live_signal(self, now: datetime) -> Callable[[], bool]:
        """Healthy while the last fetch succeeded and the held snapshot is fresh; unavailable
        (raises) otherwise, so the local cap decides."""

        def read() -> bool:
            last = self._cache.last_fetch() or {}
            if not last.get("ok"):
                raise SnapshotError("the control plane was not reached on the last fetch")
            _, fresh = self._cache.current(now=now, config=self._cache.config())
            if fresh.degraded:
                raise SnapshotError(f"snapshot {fresh.ruleset_rev} is degraded")
            return True

        return read

    def _revocation(self, row: SessionRow) -> tuple[str, str | None]:
        """The held snapshot's state, and its revision when it is newer than the session's
        and no longer grants its pool. Ages do not matter here: running work is judged
        against the newest verified truth, never stopped by staleness."""
        try:
            held = self._held_snapshot()
        except SnapshotError:
            return "unreadable", None
        if held is None:
            return "none", None
        mine, theirs = _revision(row.ruleset_rev), held.revision
        if mine is None or theirs <= mine:
            return "ok", None
        if self._gate is None or self._gate[0] is not held:
            self._gate = (held, ClaimGate(held.sections))  # indexed once per held snapshot
        if self._gate[1].check(row.pool, row.project):
            return "ok", None
        return "ok", held.ruleset_rev

    def _held_snapshot(self) -> RulesetSnapshot | None:
        """The cache's verified snapshot, verified again only when its file changed (a
        heartbeat costs one durable write, not a signature check)."""
        path = self._snapshot_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return self._cache.load()
        except OSError as e:
            raise SnapshotError(f"cannot stat {path}: {e}") from e
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._held is None or self._held[0] != key:
            self._held = (key, self._cache.load())
        return self._held[1]

    def _expire_lapsed(self, store: SessionStore, now_ms: int, now: datetime) -> list[Any]:
        """Expire every open session whose lease lapsed (inside the caller's transaction);
        their audit records."""
        records: list[Any] = []
        for lapsed in store.lapsed(now_ms):
            store.close(lapsed.session_id, state=EXPIRED, now_ms=now_ms, reason="lease-lapsed")
            records.append(
                self._transition(lapsed.session_id, lapsed, "open", EXPIRED, "lease-lapsed", now)
            )
        store.tighten_floors(now_ms)  # the open ones whose floor passed: not lapsed
        return records

    def _write(self, now: datetime, change: Callable[[apsw.Connection], list[Any]]) -> None:
        """Run ``change`` and append the records it returns, in one transaction; a
        :class:`_Refused` rolls it back and raises its error."""
        try:
            self._log().append_within(change, recorded_at=format_timestamp(now))
        except _Refused as refused:
            raise refused.error from None

    @staticmethod
    def _transition(
        session_id: str,
        source: SessionRow | Receipt,
        before: str,
        after: str,
        reason: str,
        now: datetime,
        *,
        revoked_rev: str | None = None,
    ) -> dict[str, Any]:
        receipt_id = source.receipt_id
        return {
            "record_type": SESSION_RECORD,
            "session_id": session_id,
            "receipt_id": receipt_id,
            "pool": source.pool,
            "project": source.project,
            "rulesetRev": source.ruleset_rev,
            "from": before,
            "to": after,
            "reason": reason,
            "at": format_timestamp(now),
            **({"revokedRev": revoked_rev} if revoked_rev is not None else {}),
        }
