"""The control store on PostgreSQL: :class:`~rensei_routing.store.control.ControlStore` over the
``control_*`` tables, for several ``rensei serve`` replicas sharing one database.

- Revisions (policy, org data, snapshot) and audit seqs come from the org's row in
  ``control_orgs``, locked ``FOR UPDATE`` by the writing transaction: per org, unique, gap-free
  (a rolled-back write rolls its number back).
- A compile or re-seal first takes ``pg_advisory_xact_lock(COMPILE_LOCK, hashtext(org))``: one
  at a time per org, whichever replica runs it.
- Every write notifies :data:`~.connection.CHANNEL` with the org id in its own transaction, so
  the notification is delivered exactly when the write commits (and never when it does not).
- One connection per store, reopened on the next call after it was lost; a lost connection
  mid-transaction commits nothing (the server rolls it back) and is a
  :class:`DatabaseUnreachableError`. Calls are serialised by a lock (serve's threads share one).

The bytes stored, their hashes, validation and succession are the SQLite store's functions
(:mod:`..policies`, :mod:`..snapshots`): the two backends cannot disagree on them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ...core.canonical import canonical_bytes
from ...core.routing.decision import STATE_ABSENT
from ...core.routing.edits import PolicyEdit, PolicyMutation
from ...core.routing.policy import PolicySnapshot
from ...core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ...core.snapshot.envelope import (
    RulesetSnapshot,
    compiled_moment,
    verify_snapshot,
)
from ...core.snapshot.org import OrgData
from ...core.snapshot.validators import SnapshotValidator
from ...errors import HomeError, NotFoundError, SnapshotError
from ..control import (
    EVENT_COMPILE,
    EVENT_ORG,
    EVENT_POLICY,
    EVENT_RESEAL,
    ControlEvent,
    ControlStore,
    Lookup,
    PolicyWrite,
    Sign,
)
from ..policies import RevisionInfo, SnapshotLoad, decode_revision, prepare_write, revision_info
from ..snapshots import (
    MAX_SNAPSHOT_REVISION,
    CompileResult,
    SnapshotInfo,
    decode_org,
    encode_org,
    resealed,
    seal_next,
    validated_sections,
)
from .connection import CHANNEL, COMPILE_LOCK, connect, describe, driver, pg_error

if TYPE_CHECKING:
    import psycopg

__all__ = ["PgControlStore"]

_COUNTERS: Final = frozenset({"policy_rev", "org_rev", "snapshot_rev", "event_seq"})


class PgControlStore(ControlStore):
    """The control data of one org in one PostgreSQL database."""

    def __init__(
        self, url: str, *, org_id: str, key_id: str, vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> None:
        self._url = url
        self.org_id = org_id
        self.where = describe(url)
        self._key_id = key_id
        self._vocabulary = vocabulary
        self._conn: psycopg.Connection[Any] | None = None
        self._listener: psycopg.Connection[Any] | None = None
        self._lock = threading.RLock()

    @classmethod
    def connect(
        cls, url: str, *, org_id: str, key_id: str, vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> PgControlStore:
        """A store whose connection is open and whose org is registered.

        Raises:
            DriverMissingError, DatabaseUnreachableError, StoreError, SchemaVersionError.
            HomeError: the database's org is signed by another key than this home's.
        """
        store = cls(url, org_id=org_id, key_id=key_id, vocabulary=vocabulary)
        store._ensure()
        return store

    # -- connection ---------------------------------------------------------------------------

    def _ensure(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._conn = None
        conn = connect(self._url)
        try:
            self._register(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _register(self, conn: psycopg.Connection[Any]) -> None:
        try:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO control_orgs(org_id, key_id) VALUES (%s, %s) "
                    "ON CONFLICT (org_id) DO NOTHING",
                    (self.org_id, self._key_id),
                )
                row = conn.execute(
                    "SELECT key_id FROM control_orgs WHERE org_id = %s", (self.org_id,)
                ).fetchone()
        except driver().Error as e:
            raise pg_error("cannot register the org", e, self.where) from e
        if row is None or row[0] != self._key_id:
            raise HomeError(
                f"org {self.org_id!r} in {self.where} is signed by key "
                f"{None if row is None else row[0]}, not this home's {self._key_id}: every "
                "replica of an org signs with the same key (copy keys/ from the first replica "
                "before `rensei init --store`)"
            )

    @contextmanager
    def _tx(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """One transaction; a psycopg failure becomes a typed error naming the database, and a
        lost connection is dropped so the next call reconnects."""
        psycopg = driver()
        with self._lock:
            conn = self._ensure()
            try:
                with conn.transaction():
                    yield conn
            except psycopg.Error as e:
                if conn.broken or conn.closed:
                    self._drop()
                raise pg_error(what, e, self.where) from e

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # already gone
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()
            listener, self._listener = self._listener, None
            if listener is not None:
                with suppress(Exception):
                    listener.close()

    def backend_pid(self) -> int | None:
        """The server process of the open connection (tests kill it), ``None`` when closed."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    # -- counters, events, notifications --------------------------------------------------------

    def _heads(self, conn: psycopg.Connection[Any]) -> dict[str, int]:
        row = conn.execute(
            "SELECT policy_rev, org_rev, snapshot_rev, event_seq, start_after FROM control_orgs "
            "WHERE org_id = %s FOR UPDATE",
            (self.org_id,),
        ).fetchone()
        assert row is not None  # registered on connect
        keys = ("policy_rev", "org_rev", "snapshot_rev", "event_seq", "start_after")
        return dict(zip(keys, (int(v) for v in row), strict=True))

    def _bump(self, conn: psycopg.Connection[Any], name: str, value: int) -> None:
        assert name in _COUNTERS
        conn.execute(f"UPDATE control_orgs SET {name} = %s WHERE org_id = %s", (value, self.org_id))

    def _event(
        self,
        conn: psycopg.Connection[Any],
        heads: dict[str, int],
        at: str,
        kind: str,
        revision: int,
        content_hash: str,
    ) -> None:
        seq = heads["event_seq"] + 1
        conn.execute(
            "INSERT INTO control_events(org_id, seq, at, kind, revision, content_hash) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (self.org_id, seq, at, kind, revision, content_hash),
        )
        self._bump(conn, "event_seq", seq)
        heads["event_seq"] = seq
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self.org_id))

    # -- policies ------------------------------------------------------------------------------

    def _policy_row(
        self, conn: psycopg.Connection[Any], revision: int | None
    ) -> tuple[int, str, bytes] | None:
        if revision is None:
            row = conn.execute(
                "SELECT revision, content_hash, body FROM control_policy_revisions "
                "WHERE org_id = %s ORDER BY revision DESC LIMIT 1",
                (self.org_id,),
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT revision, content_hash, body FROM control_policy_revisions "
                "WHERE org_id = %s AND revision = %s",
                (self.org_id, revision),
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), bytes(row[2]))

    def write_policies(
        self, edit: PolicyEdit, *, saved_at: str, over_corrupt: bool = False
    ) -> PolicyWrite:
        # The org's row locked FOR UPDATE serialises every writer of the org: the expected
        # revision is compared with the counter the insert takes its number from, and the
        # revision, its control event and its mutation row commit together.
        with self._tx("cannot save policy revision") as conn:
            heads = self._heads(conn)
            prepared = prepare_write(
                edit,
                head=self._policy_row(conn, None),
                head_revision=heads["policy_rev"],
                target_row=lambda n: self._policy_row(conn, n),
                saved_at=saved_at,
                over_corrupt=over_corrupt,
                vocabulary=self._vocabulary,
            )
            snap, mutation = prepared.snapshot, prepared.mutation
            conn.execute(
                "INSERT INTO control_policy_revisions(org_id, revision, content_hash, body, "
                "saved_at) VALUES (%s, %s, %s, %s, %s)",
                (self.org_id, snap.revision, snap.content_hash, prepared.body, saved_at),
            )
            conn.execute(
                "INSERT INTO control_policy_mutations(org_id, revision, recorded_at, actor, "
                "payload) VALUES (%s, %s, %s, %s, %s)",
                (
                    self.org_id,
                    snap.revision,
                    saved_at,
                    mutation.actor,
                    canonical_bytes(edit.redactor.redact(mutation.to_dict())),
                ),
            )
            self._bump(conn, "policy_rev", snap.revision)
            self._event(conn, heads, saved_at, EVENT_POLICY, snap.revision, snap.content_hash)
        return PolicyWrite(snapshot=snap, mutation=mutation)

    def load_policies(self, revision: int | None = None) -> SnapshotLoad:
        if revision is not None and not 0 < revision < 2**63:
            raise NotFoundError(f"no policy revision {revision}")
        with self._tx("cannot read policy revisions") as conn:
            row = self._policy_row(conn, revision)
        if row is None:
            if revision is not None:
                raise NotFoundError(f"no policy revision {revision}")
            return SnapshotLoad(state=STATE_ABSENT, snapshot=PolicySnapshot.empty())
        return decode_revision(*row, vocabulary=self._vocabulary)

    def policy_mutations(self) -> list[PolicyMutation]:
        with self._tx("cannot read policy mutations") as conn:
            rows = conn.execute(
                "SELECT payload FROM control_policy_mutations WHERE org_id = %s ORDER BY revision",
                (self.org_id,),
            ).fetchall()
        return [PolicyMutation.from_dict(json.loads(bytes(row[0]))) for row in rows]

    def policy_history(self) -> list[RevisionInfo]:

        with self._tx("cannot read policy history") as conn:
            rows = conn.execute(
                "SELECT revision, content_hash, body, saved_at FROM control_policy_revisions "
                "WHERE org_id = %s ORDER BY revision",
                (self.org_id,),
            ).fetchall()
        return [revision_info(*row) for row in rows]

    # -- org data ------------------------------------------------------------------------------

    def save_org(self, org: OrgData, *, saved_at: str) -> tuple[int, bool]:
        body, digest = encode_org(org)
        with self._tx("cannot save org data") as conn:
            heads = self._heads(conn)
            current = conn.execute(
                "SELECT content_hash FROM control_org_data WHERE org_id = %s AND revision = %s",
                (self.org_id, heads["org_rev"]),
            ).fetchone()
            if current is not None and str(current[0]) == digest:
                return heads["org_rev"], False
            revision = heads["org_rev"] + 1
            conn.execute(
                "INSERT INTO control_org_data(org_id, revision, content_hash, body, saved_at) "
                "VALUES (%s, %s, %s, %s, %s)",
                (self.org_id, revision, digest, body, saved_at),
            )
            self._bump(conn, "org_rev", revision)
            self._event(conn, heads, saved_at, EVENT_ORG, revision, digest)
        return revision, True

    def _org_row(self, conn: psycopg.Connection[Any]) -> tuple[int, OrgData]:
        row = conn.execute(
            "SELECT revision, content_hash, body FROM control_org_data WHERE org_id = %s "
            "ORDER BY revision DESC LIMIT 1",
            (self.org_id,),
        ).fetchone()
        if row is None:
            return 0, OrgData()
        return decode_org(int(row[0]), str(row[1]), bytes(row[2]))

    def load_org(self) -> tuple[int, OrgData]:
        with self._tx("cannot read org data") as conn:
            return self._org_row(conn)

    # -- snapshots -----------------------------------------------------------------------------

    def source_revisions(self) -> tuple[int, int]:
        with self._tx("cannot read revisions") as conn:
            row = conn.execute(
                "SELECT policy_rev, org_rev FROM control_orgs WHERE org_id = %s", (self.org_id,)
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def _compiled_from(self, conn: psycopg.Connection[Any]) -> tuple[int, int] | None:
        row = conn.execute(
            "SELECT policy_revision, org_revision FROM control_snapshots WHERE org_id = %s "
            "ORDER BY revision DESC LIMIT 1",
            (self.org_id,),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def compiled_from(self) -> tuple[int, int] | None:
        with self._tx("cannot read snapshots") as conn:
            return self._compiled_from(conn)

    def _compile_lock(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (COMPILE_LOCK, self.org_id))

    def compile_current(
        self,
        *,
        compiled_at: str,
        signing_key_id: str,
        sign: Sign,
        validators: Sequence[SnapshotValidator] = (),
        only_if_stale: bool = False,
    ) -> CompileResult | None:
        with self._tx("cannot compile a snapshot") as conn:
            self._compile_lock(conn)
            built_from = self._compiled_from(conn)
            heads = self._heads(conn)
            if only_if_stale and built_from == (heads["policy_rev"], heads["org_rev"]):
                return None
            policy_row = self._policy_row(conn, None)
            loaded = (
                SnapshotLoad(state=STATE_ABSENT, snapshot=PolicySnapshot.empty())
                if policy_row is None
                else decode_revision(*policy_row, vocabulary=self._vocabulary)
            )
            org_revision, org = self._org_row(conn)
            sections, results = validated_sections(
                policies=loaded.snapshot,
                policy_state=loaded.state,
                org=org,
                validators=validators,
                vocabulary=self._vocabulary,
            )
            revision = max(heads["snapshot_rev"], heads["start_after"]) + 1
            snap = seal_next(
                org_id=self.org_id,
                revision=revision,
                built_from=built_from,
                policy_revision=loaded.snapshot.revision,
                org_revision=org_revision,
                compiled_at=compiled_at,
                sections=sections,
                results=results,
                signing_key_id=signing_key_id,
                sign=sign,
            )
            conn.execute(
                "INSERT INTO control_snapshots(org_id, revision, ruleset_rev, content_hash, "
                "compiled_at, policy_revision, org_revision, envelope) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    self.org_id,
                    revision,
                    snap.ruleset_rev,
                    snap.content_hash,
                    compiled_at,
                    loaded.snapshot.revision,
                    org_revision,
                    snap.to_bytes(),
                ),
            )
            self._bump(conn, "snapshot_rev", revision)
            self._event(conn, heads, compiled_at, EVENT_COMPILE, revision, snap.content_hash)
        return CompileResult(snapshot=snap, validators=results)

    def reseal(
        self,
        *,
        compiled_at: str,
        signing_key_id: str,
        sign: Sign,
        lookup: Lookup,
        older_than: datetime | None = None,
    ) -> RulesetSnapshot | None:
        with self._tx("cannot re-seal the snapshot") as conn:
            self._compile_lock(conn)
            held = _verified(self._envelope(conn, None), lookup)
            if older_than is not None and compiled_moment(held) >= older_than:
                return None
            fresh = resealed(
                held, compiled_at=compiled_at, signing_key_id=signing_key_id, sign=sign
            )
            conn.execute(
                "UPDATE control_snapshots SET compiled_at = %s, envelope = %s "
                "WHERE org_id = %s AND revision = %s",
                (compiled_at, fresh.to_bytes(), self.org_id, held.revision),
            )
            heads = self._heads(conn)
            self._event(conn, heads, compiled_at, EVENT_RESEAL, fresh.revision, fresh.content_hash)
        return fresh

    def latest_mark(self) -> tuple[int, str] | None:
        with self._tx("cannot read snapshots") as conn:
            row = conn.execute(
                "SELECT revision, compiled_at FROM control_snapshots WHERE org_id = %s "
                "ORDER BY revision DESC LIMIT 1",
                (self.org_id,),
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def _envelope(self, conn: psycopg.Connection[Any], revision: int | None) -> bytes:
        if revision is None:
            row = conn.execute(
                "SELECT envelope FROM control_snapshots WHERE org_id = %s "
                "ORDER BY revision DESC LIMIT 1",
                (self.org_id,),
            ).fetchone()
        elif 0 < revision <= MAX_SNAPSHOT_REVISION:
            row = conn.execute(
                "SELECT envelope FROM control_snapshots WHERE org_id = %s AND revision = %s",
                (self.org_id, revision),
            ).fetchone()
        else:
            row = None
        if row is None:
            raise NotFoundError(
                "no snapshot has been compiled"
                if revision is None
                else f"no snapshot revision {revision}"
            )
        return bytes(row[0])

    def envelope(self, revision: int | None = None) -> bytes:
        with self._tx("cannot read snapshots") as conn:
            return self._envelope(conn, revision)

    def load_snapshot(self, revision: int | None = None, *, lookup: Lookup) -> RulesetSnapshot:
        return _verified(self.envelope(revision), lookup)

    def snapshot_history(self) -> list[SnapshotInfo]:
        with self._tx("cannot read snapshots") as conn:
            rows = conn.execute(
                "SELECT ruleset_rev, revision, content_hash, compiled_at, length(envelope) "
                "FROM control_snapshots WHERE org_id = %s ORDER BY revision",
                (self.org_id,),
            ).fetchall()
        return [
            SnapshotInfo(
                ruleset_rev=str(r),
                revision=int(n),
                content_hash=str(h),
                compiled_at=str(c),
                size=int(size),
            )
            for r, n, h, c, size in rows
        ]

    def set_start_after(self, revision: int) -> None:
        if not 0 <= revision < MAX_SNAPSHOT_REVISION:
            raise SnapshotError(f"--start-after must be between 0 and {MAX_SNAPSHOT_REVISION - 1}")
        with self._tx("cannot set the first snapshot revision") as conn:
            heads = self._heads(conn)
            if heads["snapshot_rev"]:
                if heads["snapshot_rev"] >= revision:
                    return
                raise SnapshotError(
                    f"this org already compiled revisions up to {heads['snapshot_rev']}; "
                    "--start-after applies before its first compile"
                )
            conn.execute(
                "UPDATE control_orgs SET start_after = greatest(start_after, %s) WHERE org_id = %s",
                (revision, self.org_id),
            )

    def events(self, *, after: int = 0, limit: int = 1000) -> list[ControlEvent]:
        with self._tx("cannot read control events") as conn:
            rows = conn.execute(
                "SELECT seq, at, kind, revision, content_hash FROM control_events "
                "WHERE org_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                (self.org_id, after, limit),
            ).fetchall()
        return [
            ControlEvent(seq=int(s), at=str(a), kind=str(k), revision=int(r), content_hash=str(h))
            for s, a, k, r, h in rows
        ]

    # -- notifications -------------------------------------------------------------------------

    def wait_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a write to this org (a notification on
        :data:`CHANNEL` from any replica or CLI); ``True`` when one came. The listening
        connection is opened on first use and reopened after it was lost.

        Raises:
            DatabaseUnreachableError: the listening connection cannot be (re)opened or broke.
        """
        psycopg = driver()
        listener = self._listener
        try:
            if listener is None or listener.closed or listener.broken:
                self._listener = None
                listener = connect(self._url)
                listener.execute(f"LISTEN {CHANNEL}")
                self._listener = listener
                return True  # writes while nobody listened: look once
            for note in listener.notifies(timeout=timeout, stop_after=1):
                if note.payload == self.org_id:
                    return True
            return False
        except psycopg.Error as e:
            if listener is not None and (listener.broken or listener.closed):
                self._listener = None
            raise pg_error("cannot listen for changes", e, self.where) from e


def _verified(data: bytes, lookup: Lookup) -> RulesetSnapshot:
    try:
        return verify_snapshot(data, lookup=lookup, keep_validators=True)
    except SnapshotError as e:
        raise SnapshotError(f"stored snapshot does not verify: {e}") from e
