"""The control side's storage as one interface, :class:`ControlStore`: policy revisions, org
data, compiled snapshots, the first-revision setting and the control side's own audit records
(one :class:`ControlEvent` per write), whichever database holds them.

Two implementations: :class:`SqliteControlStore` over the home's SQLite database (the embedded
default; it composes :mod:`.policies` and :mod:`.snapshots`), and
``rensei_routing.store.postgres.PgControlStore`` (chosen by ``[store] url =
"postgresql://..."`` in the home's ``config.toml``, written by ``rensei init --store``);
:mod:`.backends` opens the one a home is configured for (it sits above both, so neither
implementation imports the other's module). The
home's keys, config, metadata and the whole host side stay in the home's SQLite file either way.

Adapter: opens and closes. What a compile or a re-seal does (read the inputs under the compile
lock, validate, seal, publish, record the event) is written once, on :class:`ControlStore`, over
each backend's :class:`SnapshotWriter`; every other rule (validation, succession) is the
composed stores' or the core's. Never reads the clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import apsw

from ..core.routing.policy import PolicySnapshot, RoutingPolicy
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import MalformedError
from .db import close_quietly, store_error
from .policies import PolicyStore, PreparedWrite, RevisionInfo, SnapshotLoad

if TYPE_CHECKING:  # the audit log, policy edits, org data and snapshots: imported where used
    from ..core.routing.edits import PolicyEdit, PolicyMutation
    from ..core.snapshot.envelope import RulesetSnapshot
    from ..core.snapshot.org import OrgData
    from ..core.snapshot.validators import SnapshotValidator
    from .audit import AuditLog
    from .snapshots import CompileResult, OrgStore, SnapshotInfo, SnapshotStore

__all__ = [
    "EVENT_COMPILE",
    "EVENT_ORG",
    "EVENT_POLICY",
    "EVENT_RESEAL",
    "UNNAMED_ACTOR",
    "ControlEvent",
    "ControlStore",
    "PolicyWrite",
    "Sign",
    "SnapshotWriter",
    "SqliteControlStore",
]

Sign = Callable[[bytes], bytes]
Lookup = Callable[[str], Callable[[bytes, bytes], bool] | None]

#: The kinds of control-side audit record.
EVENT_POLICY: Final = "policy.save"
EVENT_ORG: Final = "org.load"
EVENT_COMPILE: Final = "snapshot.compile"
EVENT_RESEAL: Final = "snapshot.reseal"
#: The actor a library call that names none is recorded as (every command names one).
UNNAMED_ACTOR: Final = "unnamed"


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyWrite:
    """One committed policy write: the revision saved and its audited mutation record (on
    SQLite, ``record_seq`` is its seq on the home's audit chain; on PostgreSQL ``None``: the
    record is the revision's row of ``control_policy_mutations``)."""

    snapshot: PolicySnapshot
    mutation: PolicyMutation
    record_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlEvent:
    """One control-side audit record: a write, committed with it (``seq`` counts per org)."""

    seq: int
    at: str
    kind: str
    revision: int
    content_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "kind": self.kind,
            "revision": self.revision,
            "contentHash": self.content_hash,
        }


class SnapshotWriter(Protocol):
    """What :meth:`ControlStore.compile_current` and :meth:`ControlStore.reseal` read and write,
    each backend in its own SQL, inside the transaction of :meth:`ControlStore._compiling`."""

    vocabulary: Vocabulary

    def compiled_from(self) -> tuple[int, int] | None:
        """``(policy revision, org-data revision)`` of the latest snapshot, ``None`` if none."""
        ...

    def source_revisions(self) -> tuple[int, int]:
        """``(latest policy revision, latest org-data revision)``, 0 when none."""
        ...

    def current_policies(self) -> SnapshotLoad:
        """The current policy revision (absent when none was saved)."""
        ...

    def current_org(self) -> tuple[int, OrgData]:
        """The current org data and its revision (``(0, OrgData())`` when none)."""
        ...

    def next_revision(self) -> int:
        """The revision the next snapshot takes (above the latest and the start-after)."""
        ...

    def insert(self, snap: RulesetSnapshot, *, policy_revision: int, org_revision: int) -> None:
        """Publish ``snap``, compiled from those revisions."""
        ...

    def latest(self, lookup: Lookup) -> RulesetSnapshot:
        """The latest stored snapshot, verified (``NotFoundError`` when none)."""
        ...

    def replace(self, fresh: RulesetSnapshot) -> None:
        """Store ``fresh`` over the row of its revision (a re-seal)."""
        ...

    def event(self, at: str, kind: str, revision: int, content_hash: str) -> None:
        """Append the write's :class:`ControlEvent`."""
        ...


class ControlStore(Protocol):
    """What the control side needs of its database. Every write is one transaction (nothing
    half-applied) and appends its :class:`ControlEvent` in it; revisions are allocated by the
    database, per org, unique and gap-free; a compile runs one at a time per org."""

    org_id: str
    #: The database, for messages: a file path, or a URL without its password.
    where: str

    def save_policies(
        self,
        policies: Iterable[RoutingPolicy],
        *,
        saved_at: str,
        over_corrupt: bool = False,
        expected_revision: int | None = None,
        actor: str | None = None,
    ) -> PolicySnapshot:
        """Validate, then store as the next policy revision, audited (:meth:`write_policies`
        of the whole set; ``actor`` ``None``: :data:`UNNAMED_ACTOR`). Defined here, once, for
        both implementations (they subclass this protocol)."""
        from ..core.routing.edits import PolicyEdit

        edit = PolicyEdit(
            actor=UNNAMED_ACTOR if actor is None else actor,
            policies=tuple(policies),
            expected_revision=expected_revision,
        )
        return self.write_policies(edit, saved_at=saved_at, over_corrupt=over_corrupt).snapshot

    def write_policies(
        self, edit: PolicyEdit, *, saved_at: str, over_corrupt: bool = False
    ) -> PolicyWrite:
        """Check ``edit`` against the current revision and store the result as the next one,
        with its mutation record, in one transaction (``store.policies.prepare_write``: a
        stale expected revision, a corrupt store, a missing rollback target, an out-of-scope
        or credential-shaped policy, an invalid set are refused and nothing is written)."""
        ...

    def load_policies(self, revision: int | None = None) -> SnapshotLoad:
        """The current (or ``revision``) policy revision (:meth:`PolicyStore.load`)."""
        ...

    def policy_mutations(self) -> list[PolicyMutation]:
        """Every policy write's mutation record, oldest first (SQLite: read off the home's
        audit chain, a walk of all of it; PostgreSQL: ``control_policy_mutations``)."""
        ...

    def policy_history(self) -> list[RevisionInfo]:
        """Every policy revision, oldest first."""
        ...

    def save_org(self, org: OrgData, *, saved_at: str) -> tuple[int, bool]:
        """``(revision, created)``: ``org`` stored as the next org-data revision (``True``), or,
        when its content is the current revision's, nothing written (no revision, no control
        event, nothing to recompile) and that revision returned (``False``)."""
        ...

    def load_org(self) -> tuple[int, OrgData]:
        """The current org data and its revision (``(0, OrgData())`` when none)."""
        ...

    def source_revisions(self) -> tuple[int, int]:
        """``(latest policy revision, latest org-data revision)``, 0 when none."""
        ...

    def compiled_from(self) -> tuple[int, int] | None:
        """What the latest snapshot was compiled from, ``None`` when none was."""
        ...

    def compile_current(
        self,
        *,
        compiled_at: str,
        signing_key_id: str,
        sign: Sign,
        validators: Sequence[SnapshotValidator] = (),
        only_if_stale: bool = False,
    ) -> CompileResult | None:
        """Compile the current data into the next snapshot, the inputs read under the org's
        compile lock; with ``only_if_stale``, ``None`` when (under that lock) the latest
        snapshot is already built from the current data (another replica compiled it).
        Defined here, once, for both implementations: the inputs are read, validated, sealed
        (:func:`.snapshots.seal_next`) and published with their control event in the one
        transaction :meth:`_compiling` holds, so revision n+1 is always built from data at
        least as new as revision n's.

        Raises:
            SnapshotValidationError: naming every failing validator (nothing published).
            SnapshotError: the inputs are older than the latest snapshot's (compile again).
            StoreError: the database could not be read or written (nothing published).
        """
        from .snapshots import CompileResult, seal_next, validated_sections

        with self._compiling("cannot compile a snapshot") as writer:
            built_from = writer.compiled_from()
            if only_if_stale and built_from == writer.source_revisions():
                return None
            loaded = writer.current_policies()
            org_revision, org = writer.current_org()
            sections, results = validated_sections(
                policies=loaded.snapshot,
                policy_state=loaded.state,
                org=org,
                validators=validators,
                vocabulary=writer.vocabulary,
            )
            snap = seal_next(
                org_id=self.org_id,
                revision=writer.next_revision(),
                built_from=built_from,
                policy_revision=loaded.snapshot.revision,
                org_revision=org_revision,
                compiled_at=compiled_at,
                sections=sections,
                results=results,
                signing_key_id=signing_key_id,
                sign=sign,
            )
            writer.insert(snap, policy_revision=loaded.snapshot.revision, org_revision=org_revision)
            writer.event(compiled_at, EVENT_COMPILE, snap.revision, snap.content_hash)
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
        """Re-sign the latest snapshot at ``compiled_at`` (:func:`.snapshots.resealed`: no new
        revision, the row updated in place); with ``older_than``, ``None`` when (under the
        compile lock) it was sealed at or after that moment already. Defined here, once, for
        both implementations.

        Raises:
            NotFoundError: nothing was compiled yet.
            SnapshotError: the stored snapshot does not verify, or ``compiled_at`` is not later
                than its own.
            StoreError: the database could not be read or written.
        """
        from ..core.snapshot.envelope import compiled_moment
        from .snapshots import resealed

        with self._compiling("cannot re-seal the snapshot") as writer:
            held = writer.latest(lookup)
            if older_than is not None and compiled_moment(held) >= older_than:
                return None
            fresh = resealed(
                held, compiled_at=compiled_at, signing_key_id=signing_key_id, sign=sign
            )
            writer.replace(fresh)
            writer.event(compiled_at, EVENT_RESEAL, fresh.revision, fresh.content_hash)
        return fresh

    def _compiling(self, what: str) -> AbstractContextManager[SnapshotWriter]:
        """One write transaction holding the org's compile lock (a failure in it a typed error
        starting with ``what``), and what a compile reads and writes in it."""
        ...

    def latest_mark(self) -> tuple[int, str] | None:
        """``(revision, compiledAt)`` of the latest snapshot as stored: the cheap check."""
        ...

    def envelope(self, revision: int | None = None) -> bytes:
        """The stored bytes of the latest snapshot (or ``revision``)."""
        ...

    def load_snapshot(self, revision: int | None = None, *, lookup: Lookup) -> RulesetSnapshot:
        """A stored snapshot, verified."""
        ...

    def snapshot_history(self) -> list[SnapshotInfo]:
        """Every compiled snapshot, oldest first."""
        ...

    def set_start_after(self, revision: int) -> None:
        """Make the first snapshot revision ``revision + 1`` (``init --start-after``)."""
        ...

    def events(self, *, after: int = 0, limit: int = 1000) -> list[ControlEvent]:
        """The control-side audit records after ``seq`` ``after``, oldest first."""
        ...

    def wait_change(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a write to this org by anyone; ``True`` when one
        was announced (PostgreSQL: LISTEN/NOTIFY). SQLite announces nothing: it waits the
        timeout and answers ``False`` (its watcher polls)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class SqliteControlStore(ControlStore):
    """:class:`ControlStore` over one apsw connection to the home's database (a writer
    connection for the writes; its transactions are ``BEGIN IMMEDIATE``, so one compile at a
    time per home)."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        org_id: str,
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        audit: Callable[[], AuditLog] | None = None,
    ) -> None:
        self._conn = conn
        self._audit_factory = audit
        self._audit: AuditLog | None = None
        self._lock = threading.RLock()  # one transaction at a time when threads share it
        self.org_id = org_id
        self.where = str(conn.filename)
        self._vocabulary = vocabulary
        self._policies = PolicyStore(conn, vocabulary=vocabulary)
        self._org_store: OrgStore | None = None
        self._snapshot_store: SnapshotStore | None = None

    @property
    def _org(self) -> OrgStore:
        """The org data's store, made on first use (reading policies needs no :mod:`.snapshots`)."""
        if self._org_store is None:
            from .snapshots import OrgStore

            self._org_store = OrgStore(self._conn)
        return self._org_store

    @property
    def _snapshots(self) -> SnapshotStore:
        """The compiled snapshots' store, made on first use (as :attr:`_org`)."""
        if self._snapshot_store is None:
            from .snapshots import SnapshotStore

            self._snapshot_store = SnapshotStore(self._conn, org_id=self.org_id)
        return self._snapshot_store

    def _event(self, at: str, kind: str, revision: int, content_hash: str) -> None:
        _insert_event(self._conn, at, kind, revision, content_hash)

    def _write(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            with self._lock, self._conn:
                return fn()
        except apsw.Error as e:
            raise store_error(what, e, self.where) from e

    def _audit_log(self) -> AuditLog:
        if self._audit is None:
            from ..core.audit.chain import checkpoint_origin
            from .audit import AuditLog

            factory = self._audit_factory
            self._audit = (
                AuditLog(Path(self.where), origin=checkpoint_origin(self.org_id))
                if factory is None
                else factory()
            )
        return self._audit

    def write_policies(
        self, edit: PolicyEdit, *, saved_at: str, over_corrupt: bool = False
    ) -> PolicyWrite:
        # The revision, its control event and its mutation record on the home's audit chain
        # commit in the audit log's one BEGIN IMMEDIATE transaction, or none of them does.
        done: list[PreparedWrite] = []

        def change(conn: apsw.Connection) -> list[Any]:
            prepared = PolicyStore(conn, vocabulary=self._vocabulary).write(
                edit, saved_at=saved_at, over_corrupt=over_corrupt
            )
            snap = prepared.snapshot
            _insert_event(conn, saved_at, EVENT_POLICY, snap.revision, snap.content_hash)
            done.append(prepared)
            return [prepared.mutation.to_dict()]

        with self._lock:
            appended = self._audit_log().append_within(change, recorded_at=saved_at)
        prepared = done[-1]
        return PolicyWrite(
            snapshot=prepared.snapshot, mutation=prepared.mutation, record_seq=appended.first_seq
        )

    def load_policies(self, revision: int | None = None) -> SnapshotLoad:
        with self._lock:
            return self._policies.load(revision)

    def policy_mutations(self) -> list[PolicyMutation]:
        from ..core.routing.edits import MUTATION_RECORD, PolicyMutation

        out: list[PolicyMutation] = []
        with self._lock:
            for record in self._audit_log().records():
                try:
                    payload = record.payload
                except MalformedError:  # a damaged record: audit verify names it
                    continue
                if isinstance(payload, dict) and payload.get("record_type") == MUTATION_RECORD:
                    out.append(PolicyMutation.from_dict(payload))
        return out

    def policy_history(self) -> list[RevisionInfo]:
        with self._lock:
            return self._policies.history()

    def save_org(self, org: OrgData, *, saved_at: str) -> tuple[int, bool]:
        def run() -> tuple[int, bool]:
            revision, created = self._org.put(org, saved_at=saved_at)
            if created:
                digest = self._conn.execute(
                    "SELECT content_hash FROM org_data WHERE revision = ?", (revision,)
                ).get
                self._event(saved_at, EVENT_ORG, revision, str(digest))
            return revision, created

        result: tuple[int, bool] = self._write("cannot save org data", run)
        return result

    def load_org(self) -> tuple[int, OrgData]:
        with self._lock:
            return self._org.load()

    def source_revisions(self) -> tuple[int, int]:
        try:
            with self._lock:
                return _source_revisions(self._conn)
        except apsw.Error as e:
            raise store_error("cannot read revisions", e, self.where) from e

    def compiled_from(self) -> tuple[int, int] | None:
        with self._lock:
            return self._snapshots.compiled_from()

    @contextmanager
    def _compiling(self, what: str) -> Iterator[SnapshotWriter]:
        # A writer's transaction is BEGIN IMMEDIATE: the write lock, so one compile at a time.
        try:
            with self._lock, self._conn:
                yield _SqliteWriter(self._conn, self._snapshots, self._vocabulary)
        except apsw.Error as e:
            raise store_error(what, e, self.where) from e

    def latest_mark(self) -> tuple[int, str] | None:
        try:
            with self._lock:
                row = self._conn.execute(
                    "SELECT revision, compiled_at FROM ruleset_snapshots "
                    "ORDER BY revision DESC LIMIT 1"
                ).fetchone()
        except apsw.Error as e:
            raise store_error("cannot read snapshots", e, self.where) from e
        return None if row is None else (int(str(row[0])), str(row[1]))

    def envelope(self, revision: int | None = None) -> bytes:
        with self._lock:
            return self._snapshots.envelope(revision)

    def load_snapshot(self, revision: int | None = None, *, lookup: Lookup) -> RulesetSnapshot:
        with self._lock:
            return self._snapshots.load(revision, lookup=lookup)

    def snapshot_history(self) -> list[SnapshotInfo]:
        with self._lock:
            return self._snapshots.history()

    def set_start_after(self, revision: int) -> None:
        with self._lock:
            self._snapshots.set_start_after(revision)

    def events(self, *, after: int = 0, limit: int = 1000) -> list[ControlEvent]:
        try:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT seq, at, kind, revision, content_hash FROM control_events "
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after, limit),
                ).fetchall()
        except apsw.Error as e:
            raise store_error("cannot read control events", e, self.where) from e
        return [
            ControlEvent(
                seq=int(str(s)), at=str(a), kind=str(k), revision=int(str(r)), content_hash=str(h)
            )
            for s, a, k, r, h in rows
        ]

    def wait_change(self, timeout: float) -> bool:
        time.sleep(timeout)
        return False

    def close(self) -> None:
        # Quietly, as every reader of the home closes: what failed was reported by the call
        # that failed, and a close must never turn a finished command into an error.
        audit, self._audit = self._audit, None
        if audit is not None:
            audit.close()
        close_quietly(self._conn)


def _insert_event(conn: apsw.Connection, at: str, kind: str, revision: int, digest: str) -> None:
    conn.execute(
        "INSERT INTO control_events(at, kind, revision, content_hash) VALUES (?, ?, ?, ?)",
        (at, kind, revision, digest),
    )


def _source_revisions(conn: apsw.Connection) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT coalesce(max(revision), 0) FROM policy_revisions), "
        "(SELECT coalesce(max(revision), 0) FROM org_data)"
    ).fetchone()
    assert row is not None
    return int(str(row[0])), int(str(row[1]))


class _SqliteWriter(SnapshotWriter):
    """:class:`SnapshotWriter` over the home's tables, in the transaction the caller holds."""

    def __init__(
        self, conn: apsw.Connection, snapshots: SnapshotStore, vocabulary: Vocabulary
    ) -> None:
        self._conn = conn
        self._snapshots = snapshots
        self.vocabulary = vocabulary

    def compiled_from(self) -> tuple[int, int] | None:
        return self._snapshots.compiled_from()

    def source_revisions(self) -> tuple[int, int]:
        return _source_revisions(self._conn)

    def current_policies(self) -> SnapshotLoad:
        return PolicyStore(self._conn, vocabulary=self.vocabulary).load()

    def current_org(self) -> tuple[int, OrgData]:
        from .snapshots import OrgStore

        return OrgStore(self._conn).load()

    def next_revision(self) -> int:
        return self._snapshots.next_revision()

    def insert(self, snap: RulesetSnapshot, *, policy_revision: int, org_revision: int) -> None:
        self._snapshots.insert(snap, policy_revision=policy_revision, org_revision=org_revision)

    def latest(self, lookup: Lookup) -> RulesetSnapshot:
        return self._snapshots.load(lookup=lookup)

    def replace(self, fresh: RulesetSnapshot) -> None:
        self._snapshots.replace(fresh)

    def event(self, at: str, kind: str, revision: int, content_hash: str) -> None:
        _insert_event(self._conn, at, kind, revision, content_hash)
