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
(:mod:`..policies`, :mod:`..snapshots`), and a compile and a re-seal are
:class:`~rensei_routing.store.control.ControlStore`'s over this module's ``SnapshotWriter``:
the two backends cannot disagree on them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

from ...core.canonical import canonical_bytes
from ...core.routing.decision import STATE_ABSENT
from ...core.routing.edits import PolicyEdit, PolicyMutation
from ...core.routing.policy import PolicySnapshot
from ...core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ...core.snapshot.envelope import RulesetSnapshot
from ...core.snapshot.org import OrgData
from ...errors import HomeError, NotFoundError, SnapshotError
from ..control import (
    EVENT_ORG,
    EVENT_POLICY,
    ControlEvent,
    ControlStore,
    Lookup,
    PolicyWrite,
    SnapshotWriter,
)
from ..policies import RevisionInfo, SnapshotLoad, decode_revision, prepare_write, revision_info
from ..snapshots import (
    MAX_SNAPSHOT_REVISION,
    SnapshotInfo,
    decode_org,
    encode_org,
    snapshot_row,
    stored_envelope,
    verified,
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

    def _fetch(self, what: str, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Every row of one query, read in its own transaction (:meth:`_tx`)."""
        with self._tx(what) as conn:
            return list(conn.execute(sql, args).fetchall())

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
        rows = self._fetch(
            "cannot read policy mutations",
            "SELECT payload FROM control_policy_mutations WHERE org_id = %s ORDER BY revision",
            (self.org_id,),
        )
        return [PolicyMutation.from_dict(json.loads(bytes(row[0]))) for row in rows]

    def policy_history(self) -> list[RevisionInfo]:
        rows = self._fetch(
            "cannot read policy history",
            "SELECT revision, content_hash, body, saved_at FROM control_policy_revisions "
            "WHERE org_id = %s ORDER BY revision",
            (self.org_id,),
        )
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
        (row,) = self._fetch(
            "cannot read revisions",
            "SELECT policy_rev, org_rev FROM control_orgs WHERE org_id = %s",
            (self.org_id,),
        )
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

    @contextmanager
    def _compiling(self, what: str) -> Iterator[SnapshotWriter]:
        # The compile lock first, then the org's row (FOR UPDATE): the order every compile and
        # re-seal takes them in, so they never wait on each other crosswise.
        with self._tx(what) as conn:
            self._compile_lock(conn)
            yield _PgWriter(self, conn, self._heads(conn))

    def latest_mark(self) -> tuple[int, str] | None:
        rows = self._fetch(
            "cannot read snapshots",
            "SELECT revision, compiled_at FROM control_snapshots WHERE org_id = %s "
            "ORDER BY revision DESC LIMIT 1",
            (self.org_id,),
        )
        return next(((int(n), str(at)) for n, at in rows), None)

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
        return stored_envelope(row, revision)

    def envelope(self, revision: int | None = None) -> bytes:
        with self._tx("cannot read snapshots") as conn:
            return self._envelope(conn, revision)

    def load_snapshot(self, revision: int | None = None, *, lookup: Lookup) -> RulesetSnapshot:
        return verified(self.envelope(revision), lookup)

    def snapshot_history(self) -> list[SnapshotInfo]:
        rows = self._fetch(
            "cannot read snapshots",
            "SELECT ruleset_rev, revision, content_hash, compiled_at, length(envelope) "
            "FROM control_snapshots WHERE org_id = %s ORDER BY revision",
            (self.org_id,),
        )
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
        rows = self._fetch(
            "cannot read control events",
            "SELECT seq, at, kind, revision, content_hash FROM control_events "
            "WHERE org_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (self.org_id, after, limit),
        )
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


class _PgWriter(SnapshotWriter):
    """:class:`SnapshotWriter` over the ``control_*`` rows of one org, in the transaction of
    :meth:`PgControlStore._compiling` (``heads``: the org's counters, its row locked)."""

    def __init__(
        self, store: PgControlStore, conn: psycopg.Connection[Any], heads: dict[str, int]
    ) -> None:
        self._store = store
        self._conn = conn
        self._heads = heads
        self.vocabulary = store._vocabulary

    def compiled_from(self) -> tuple[int, int] | None:
        return self._store._compiled_from(self._conn)

    def source_revisions(self) -> tuple[int, int]:
        return self._heads["policy_rev"], self._heads["org_rev"]

    def current_policies(self) -> SnapshotLoad:
        row = self._store._policy_row(self._conn, None)
        if row is None:
            return SnapshotLoad(state=STATE_ABSENT, snapshot=PolicySnapshot.empty())
        return decode_revision(*row, vocabulary=self.vocabulary)

    def current_org(self) -> tuple[int, OrgData]:
        return self._store._org_row(self._conn)

    def next_revision(self) -> int:
        return max(self._heads["snapshot_rev"], self._heads["start_after"]) + 1

    def insert(self, snap: RulesetSnapshot, *, policy_revision: int, org_revision: int) -> None:
        self._conn.execute(
            "INSERT INTO control_snapshots(org_id, revision, ruleset_rev, content_hash, "
            "compiled_at, policy_revision, org_revision, envelope) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                self._store.org_id,
                *snapshot_row(snap, policy_revision=policy_revision, org_revision=org_revision),
            ),
        )
        self._store._bump(self._conn, "snapshot_rev", snap.revision)

    def latest(self, lookup: Lookup) -> RulesetSnapshot:
        return verified(self._store._envelope(self._conn, None), lookup)

    def replace(self, fresh: RulesetSnapshot) -> None:
        self._conn.execute(
            "UPDATE control_snapshots SET compiled_at = %s, envelope = %s "
            "WHERE org_id = %s AND revision = %s",
            (fresh.compiled_at, fresh.to_bytes(), self._store.org_id, fresh.revision),
        )

    def event(self, at: str, kind: str, revision: int, content_hash: str) -> None:
        self._store._event(self._conn, self._heads, at, kind, revision, content_hash)
