"""Policy revisions in SQLite: validate, then write revision = current + 1; load ok/absent/corrupt;
every check of an audited write, run in its transaction (:func:`prepare_write`, both backends).

Adapter: owns the ``policy_revisions`` table and nothing else. It never reads the clock (the
caller passes ``saved_at``) and never decides routes.
"""

from __future__ import annotations

import gc
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import apsw

from ..core import _parse as p
from ..core.canonical import SHA256_PREFIX
from ..core.routing.decision import STATE_ABSENT, STATE_CORRUPT, STATE_OK
from ..core.routing.policy import MAX_REVISION, PolicySnapshot, RoutingPolicy, policy_canonical
from ..core.routing.stored import read_stored
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import (
    CorruptSnapshotError,
    InputError,
    NotFoundError,
    PolicyValidationError,
    RevisionLimitError,
    RollbackTargetError,
    StaleRevisionError,
)
from .db import store_error

if TYPE_CHECKING:  # a write's edit and mutation record: imported by the writes
    from ..core.routing.edits import PolicyEdit, PolicyMutation

__all__ = [
    "PolicyStore",
    "PreparedWrite",
    "RevisionInfo",
    "SnapshotLoad",
    "decode_revision",
    "encode_policies",
    "prepare_write",
    "revision_info",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotLoad:
    """A load result. ``corrupt`` never carries partial policies: its snapshot is empty at
    revision 0, and ``detail`` says what was wrong."""

    state: str
    snapshot: PolicySnapshot
    detail: str | None = None

    def __bool__(self) -> bool:
        return self.state != STATE_CORRUPT


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisionInfo:
    """One row of the revision history."""

    revision: int
    content_hash: str
    policy_count: int | None
    saved_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "content_hash": self.content_hash,
            "policy_count": self.policy_count,
            "saved_at": self.saved_at,
        }


def _as_bytes(value: object) -> bytes:
    """The stored body as bytes, whatever a hand edit left in the column (the content hash,
    not the column type, decides whether it is intact)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):  # PostgreSQL's bytea, by driver
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return b"" if value is None else str(value).encode("utf-8")


def revision_info(revision: Any, content_hash: Any, body: Any, saved_at: Any) -> RevisionInfo:
    """One stored policy revision row (either control backend's) as a :class:`RevisionInfo`;
    a body that is not a JSON list has no policy count."""
    try:
        count: int | None = len(json.loads(_as_bytes(body).decode("utf-8")))
    except (ValueError, TypeError, RecursionError):
        count = None
    return RevisionInfo(
        revision=int(revision),
        content_hash=str(content_hash),
        policy_count=count,
        saved_at=str(saved_at),
    )


def _encode(policies: Iterable[RoutingPolicy]) -> bytes:
    # Stored in hash order, so the body is independent of the caller's order and is exactly
    # the byte string ``hash_policies`` digests.
    return b"[" + b",".join(sorted(policy_canonical(pol) for pol in policies)) + b"]"


_collector_lock = threading.Lock()
_collector_holds = 0  # loads running with the collector paused, in any thread
_collector_was_enabled = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """CPython's cyclic collector off while a revision's policies are built, then as the caller
    had it. The build makes ~25 small acyclic objects per policy and keeps all of them; each
    collection it sets off walks every object the process holds, so at 10,000 policies they
    were half of a load, and they can free nothing (nothing built here is garbage, nor part of
    a cycle). The first of concurrent loads pauses it and the last restores it; nested
    ``gc.disable()`` by the caller is kept (an enabled state is restored only if found)."""
    global _collector_holds, _collector_was_enabled
    with _collector_lock:
        if _collector_holds == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_holds += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_holds -= 1
            if _collector_holds == 0 and _collector_was_enabled:
                gc.enable()


def decode_revision(
    revision: int, content_hash: str, body: bytes, *, vocabulary: Vocabulary
) -> SnapshotLoad:
    """A stored revision row as ``ok`` or ``corrupt`` (any backend's: the bytes decide)."""
    if not 0 <= revision <= MAX_REVISION:  # only a hand edit puts one there
        return SnapshotLoad(
            state=STATE_CORRUPT,
            snapshot=PolicySnapshot.empty(),
            detail=f"revision number {revision} is outside 0..{MAX_REVISION}",
        )
    actual = SHA256_PREFIX + hashlib.sha256(body).hexdigest()
    if actual == content_hash:
        # The quick reader builds exactly what the general one below would, or declines
        # (``None``) and leaves every verdict and message to it.
        with _collector_paused():
            quick = read_stored(body, vocabulary=vocabulary)
        if quick is not None:
            return SnapshotLoad(
                state=STATE_OK,
                snapshot=PolicySnapshot(revision=revision, policies=quick, content_hash=actual),
            )
    try:
        doc = json.loads(body.decode("utf-8"))
        path = f"revision {revision}"
        policies = tuple(
            RoutingPolicy.from_dict(item, path=p.at(path, i), vocabulary=vocabulary)
            for i, item in enumerate(p.array(doc, path))
        )
    except (ValueError, InputError, RecursionError) as e:  # ValueError: bad JSON, bad UTF-8
        return SnapshotLoad(
            state=STATE_CORRUPT,
            snapshot=PolicySnapshot.empty(),
            detail=f"revision {revision} is unparseable: {e}",
        )
    # ``save`` stores exactly the bytes ``hash_policies`` digests (the canonical policies,
    # sorted), so hashing the stored bytes checks the same thing as re-encoding every
    # policy, without the cost, and also catches an edit that parses to the same policies.
    if actual != content_hash:
        return SnapshotLoad(
            state=STATE_CORRUPT,
            snapshot=PolicySnapshot.empty(),
            detail=f"revision {revision} content hash {content_hash} does not match "
            f"its policies ({actual})",
        )
    return SnapshotLoad(
        state=STATE_OK,
        snapshot=PolicySnapshot(revision=revision, policies=policies, content_hash=actual),
    )


def encode_policies(policies: Iterable[RoutingPolicy]) -> tuple[bytes, str]:
    """The stored body of a policy set and its content hash (any backend stores these bytes)."""
    body = _encode(policies)
    return body, SHA256_PREFIX + hashlib.sha256(body).hexdigest()


Row = tuple[int, str, bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedWrite:
    """A policy write checked and planned inside its transaction: the row to insert and the
    mutation record to commit with it."""

    snapshot: PolicySnapshot
    body: bytes
    mutation: PolicyMutation


def prepare_write(
    edit: PolicyEdit,
    *,
    head: Row | None,
    head_revision: int,
    target_row: Callable[[int], Row | None],
    saved_at: str,
    over_corrupt: bool,
    vocabulary: Vocabulary,
) -> PreparedWrite:
    """Every check of a policy write, in order, against the current row ``head`` (revision
    ``head_revision``, 0 when none) read inside the write transaction: the expected revision,
    a corrupt current revision, the rollback target (``target_row(n)``; 0 is the empty set),
    the scope and credential rules (:meth:`PolicyEdit.plan`), validation, the revision limit.
    Either backend calls it; nothing is written when it raises.

    Raises:
        StaleRevisionError, CorruptSnapshotError, RollbackTargetError, OutOfScopeError,
        CredentialValueError, PolicyValidationError, RevisionLimitError.
    """
    from ..core.routing.edits import PolicyMutation
    from ..core.routing.validation import validate

    if edit.expected_revision is not None and edit.expected_revision != head_revision:
        raise StaleRevisionError(edit.expected_revision, head_revision)
    current: tuple[RoutingPolicy, ...] = ()
    if head is not None:
        loaded = decode_revision(*head, vocabulary=vocabulary)
        if loaded.state == STATE_CORRUPT:
            if not over_corrupt:
                raise CorruptSnapshotError(
                    f"refusing to write over a corrupt store: {loaded.detail}; repair is an "
                    "explicit operator act (rensei policy save --over-corrupt)"
                )
            if edit.scope is not None:
                raise CorruptSnapshotError(
                    f"a scoped edit carries the other policies forward, and revision "
                    f"{head_revision} does not load ({loaded.detail}): repair with a whole set"
                )
        current = loaded.snapshot.policies
    target: tuple[RoutingPolicy, ...] | None = None
    if edit.rollback_to is not None:
        target = _rollback_target(edit.rollback_to, target_row, vocabulary)
    items, diff = edit.plan(current, target)
    report = validate(items, vocabulary=vocabulary)
    if not report:
        raise PolicyValidationError(report.issues, omitted=report.omitted)
    revision = head_revision + 1
    if not 0 < revision <= MAX_REVISION:
        raise RevisionLimitError(
            f"no revision number left after {head_revision}: revisions stop at "
            f"{MAX_REVISION}; nothing was saved"
        )
    body, content_hash = encode_policies(items)
    mutation = PolicyMutation(
        action=edit.action,
        actor=edit.actor,
        prior_revision=head_revision,
        revision=revision,
        content_hash=content_hash,
        added=diff.added,
        removed=diff.removed,
        changed=diff.changed,
        saved_at=saved_at,
        rollback_to=edit.rollback_to,
        scope=edit.scope,
        expected_revision=edit.expected_revision,
    )
    snapshot = PolicySnapshot(revision=revision, policies=items, content_hash=content_hash)
    return PreparedWrite(snapshot=snapshot, body=body, mutation=mutation)


def _rollback_target(
    revision: int, target_row: Callable[[int], Row | None], vocabulary: Vocabulary
) -> tuple[RoutingPolicy, ...]:
    if revision == 0:
        return ()
    row = target_row(revision) if 0 < revision <= MAX_REVISION else None
    if row is None:
        raise RollbackTargetError(
            "no-such-revision",
            f"policy revision {revision} never existed; nothing was saved",
        )
    loaded = decode_revision(*row, vocabulary=vocabulary)
    if loaded.state == STATE_CORRUPT:
        raise RollbackTargetError(
            "target-corrupt",
            f"policy revision {revision} does not load ({loaded.detail}); nothing was saved",
        )
    return loaded.snapshot.policies


class PolicyStore:
    """Versioned policy sets over one apsw connection (a writer connection for ``save``)."""

    def __init__(
        self, conn: apsw.Connection, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> None:
        self._conn = conn
        self._vocabulary = vocabulary

    def _row(self, revision: int | None) -> tuple[int, str, bytes] | None:
        if revision is None:
            sql = (
                "SELECT revision, content_hash, body FROM policy_revisions "
                "ORDER BY revision DESC LIMIT 1"
            )
            args: tuple[Any, ...] = ()
        else:
            sql = "SELECT revision, content_hash, body FROM policy_revisions WHERE revision = ?"
            args = (revision,)
        try:
            row = self._conn.execute(sql, args).fetchone()
        except OverflowError as e:  # a revision number SQLite cannot hold: it is not there
            raise NotFoundError(f"no policy revision {revision}") from e
        except apsw.Error as e:
            raise store_error("cannot read policy revisions", e, self._conn.filename) from e
        if row is None:
            return None
        return int(row[0]), str(row[1]), _as_bytes(row[2])

    def _decode(self, revision: int, content_hash: str, body: bytes) -> SnapshotLoad:
        return decode_revision(revision, content_hash, body, vocabulary=self._vocabulary)

    def load(self, revision: int | None = None) -> SnapshotLoad:
        """The current revision (or ``revision``) as ``ok``, ``absent`` or ``corrupt``.

        Raises:
            NotFoundError: an explicit ``revision`` does not exist.
            StoreError: the database could not be read.
        """
        row = self._row(revision)
        if row is None:
            if revision is not None:
                raise NotFoundError(f"no policy revision {revision}")
            return SnapshotLoad(state=STATE_ABSENT, snapshot=PolicySnapshot.empty())
        return self._decode(*row)

    def head(self) -> tuple[int, str] | None:
        """``(revision, content_hash)`` of the current revision as stored (not verified), or
        ``None`` when there is none: a cheap check of whether a loaded snapshot is still current.

        Raises:
            StoreError: the database could not be read.
        """
        try:
            row = self._conn.execute(
                "SELECT revision, content_hash FROM policy_revisions ORDER BY revision DESC LIMIT 1"
            ).fetchone()
        except apsw.Error as e:
            raise store_error("cannot read policy revisions", e, self._conn.filename) from e
        return None if row is None else (int(row[0]), str(row[1]))

    def save(
        self, policies: Iterable[RoutingPolicy], *, saved_at: str, over_corrupt: bool = False
    ) -> PolicySnapshot:
        """Validate, then write the set as revision = current + 1 (the first is 1): the raw
        write, with no mutation record and no scope, expected-revision or credential check
        (``SqliteControlStore.write_policies`` over :meth:`write` is the audited one, which every
        command uses; quickstart's fresh home and tests write through this one).

        Saving an empty set is a real revision. Nothing is written when anything fails.
        ``over_corrupt=True`` is the operator's explicit repair: it writes over a corrupt
        current revision N as N + 1 (the revision number survives in the row even when the
        body does not, so no number is ever reused) and keeps the corrupt row as evidence.

        Raises:
            PolicyValidationError: carrying the listed validation issues and the count of
                the rest (the report is capped; see ``validate``).
            CorruptSnapshotError: the current revision is corrupt (its bytes are untouched).
            RevisionLimitError: the next revision number would pass 2**53 - 1.
            StoreError: the database could not be written.
        """
        from ..core.routing.validation import validate  # writes only: reads never validate

        items = tuple(policies)
        report = validate(items, vocabulary=self._vocabulary)
        if not report:
            raise PolicyValidationError(report.issues, omitted=report.omitted)
        body = _encode(items)
        content_hash = SHA256_PREFIX + hashlib.sha256(body).hexdigest()
        try:
            with self._conn:
                current = self._row(None)
                if current is not None:
                    loaded = self._decode(*current)
                    if loaded.state == STATE_CORRUPT and not over_corrupt:
                        raise CorruptSnapshotError(
                            f"refusing to write over a corrupt store: {loaded.detail}; "
                            "repair is an explicit operator act (rensei policy save "
                            "--over-corrupt)"
                        )
                revision = 1 if current is None else current[0] + 1
                if not 0 < revision <= MAX_REVISION:
                    raise RevisionLimitError(
                        f"no revision number left after {current[0] if current else 0}: "
                        f"revisions stop at {MAX_REVISION}; nothing was saved"
                    )
                self._conn.execute(
                    "INSERT INTO policy_revisions(revision, content_hash, body, saved_at) "
                    "VALUES (?, ?, ?, ?)",
                    (revision, content_hash, body, saved_at),
                )
        except apsw.Error as e:
            raise store_error("cannot save policy revision", e, self._conn.filename) from e
        return PolicySnapshot(revision=revision, policies=items, content_hash=content_hash)

    def write(
        self, edit: PolicyEdit, *, saved_at: str, over_corrupt: bool = False
    ) -> PreparedWrite:
        """Check and plan ``edit`` against the current revision (:func:`prepare_write`) and
        insert the next revision, inside the caller's write transaction: the caller commits
        the returned mutation record in the same one (``SqliteControlStore`` appends it to
        the audit chain).

        Raises:
            What :func:`prepare_write` raises; StoreError: the database failed.
        """
        head = self._row(None)
        prepared = prepare_write(
            edit,
            head=head,
            head_revision=0 if head is None else head[0],
            target_row=self._row,
            saved_at=saved_at,
            over_corrupt=over_corrupt,
            vocabulary=self._vocabulary,
        )
        snap = prepared.snapshot
        try:
            self._conn.execute(
                "INSERT INTO policy_revisions(revision, content_hash, body, saved_at) "
                "VALUES (?, ?, ?, ?)",
                (snap.revision, snap.content_hash, prepared.body, saved_at),
            )
        except apsw.Error as e:
            raise store_error("cannot save policy revision", e, self._conn.filename) from e
        return prepared

    def history(self) -> list[RevisionInfo]:
        """Every revision, oldest first, with its policy count (``None`` when unparseable).

        Raises:
            StoreError: the database could not be read.
        """
        try:
            rows = self._conn.execute(
                "SELECT revision, content_hash, body, saved_at FROM policy_revisions "
                "ORDER BY revision"
            )
            return [revision_info(*row) for row in rows]
        except apsw.Error as e:
            raise store_error("cannot read policy history", e, self._conn.filename) from e
