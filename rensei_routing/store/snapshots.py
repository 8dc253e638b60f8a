"""The control side of ruleset snapshots in SQLite: the org's live data (one row per load) and
the compiled, signed snapshots (one row per revision).

Adapter: owns the ``org_data`` and ``ruleset_snapshots`` tables. It never reads the clock (the
caller passes ``saved_at`` / ``compiled_at``), signs only through the callable it is given, and
publishes nothing a validator refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ..core.canonical import SHA256_PREFIX, canonical_bytes
from ..core.routing.policy import PolicySnapshot
from ..core.routing.vocabulary import Vocabulary
from ..core.snapshot.envelope import RulesetSnapshot, check_succession, seal, verify_snapshot
from ..core.snapshot.org import OrgData, builtin_validators, compile_sections
from ..core.snapshot.validators import SnapshotValidator, ValidatorResult, run_validators
from ..errors import InputError, NotFoundError, SnapshotError, SnapshotValidationError, StoreError
from .db import store_error
from .settings import START_AFTER, read_text, write_text

__all__ = [
    "CompileResult",
    "OrgStore",
    "SnapshotInfo",
    "SnapshotStore",
    "decode_org",
    "encode_org",
    "seal_next",
    "snapshot_row",
    "stored_envelope",
    "validated_sections",
    "verified",
]

#: The largest revision an envelope may carry (``core.snapshot.envelope``'s bound).
MAX_SNAPSHOT_REVISION: Final = 2**53 - 1


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise StoreError(f"stored body has type {type(value).__name__}, not BLOB")


class OrgStore:
    """The org's live data over one apsw connection (a writer for ``save``)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def save(self, org: OrgData, *, saved_at: str) -> int:
        """Store ``org`` as the next org-data revision unless it is identical to the current
        one (:meth:`put`); return the current revision either way.

        Raises:
            StoreError: the database could not be written (nothing is).
        """
        return self.put(org, saved_at=saved_at)[0]

    def put(self, org: OrgData, *, saved_at: str) -> tuple[int, bool]:
        """``(revision, created)``: ``org`` stored as the next revision (``True``), or, when its
        content hash is the current revision's, nothing written and that revision returned
        (``False``), so identical data never makes a revision nor a recompile. The
        comparison and the insert are one write transaction.

        Raises:
            StoreError: the database could not be written (nothing is).
        """
        body, digest = encode_org(org)
        try:
            with self._conn:
                last = self._conn.execute(
                    "SELECT revision, content_hash FROM org_data ORDER BY revision DESC LIMIT 1"
                ).fetchone()
                if last is not None and str(last[1]) == digest:
                    return int(str(last[0])), False
                revision = 1 if last is None else int(str(last[0])) + 1
                self._conn.execute(
                    "INSERT INTO org_data(revision, content_hash, body, saved_at) "
                    "VALUES (?, ?, ?, ?)",
                    (revision, digest, body, saved_at),
                )
        except apsw.Error as e:
            raise StoreError(f"cannot save org data: {e}") from e
        return revision, True

    def load(self) -> tuple[int, OrgData]:
        """The current org data and its revision; ``(0, OrgData())`` when none was loaded.

        Raises:
            StoreError: unreadable, or the stored bytes do not match their hash.
        """
        try:
            row = self._conn.execute(
                "SELECT revision, content_hash, body FROM org_data ORDER BY revision DESC LIMIT 1"
            ).fetchone()
        except apsw.Error as e:
            raise StoreError(f"cannot read org data: {e}") from e
        if row is None:
            return 0, OrgData()
        return decode_org(int(row[0]), str(row[1]), _as_bytes(row[2]))


def encode_org(org: OrgData) -> tuple[bytes, str]:
    """The stored body of ``org`` and its content hash (any backend stores these bytes)."""
    body = canonical_bytes(org.to_dict())
    return body, SHA256_PREFIX + hashlib.sha256(body).hexdigest()


def decode_org(revision: int, digest: str, body: bytes) -> tuple[int, OrgData]:
    """A stored org-data row, checked against its hash.

    Raises:
        StoreError: the bytes do not match their hash, or do not parse.
    """
    if SHA256_PREFIX + hashlib.sha256(body).hexdigest() != digest:
        raise StoreError(f"org data revision {revision} does not match its content hash")
    try:
        return revision, OrgData.from_dict(json.loads(body.decode("utf-8")))
    except (ValueError, InputError, RecursionError) as e:
        raise StoreError(f"org data revision {revision} is unreadable: {e}") from e


def stored_envelope(row: Sequence[object] | None, revision: int | None) -> bytes:
    """The envelope bytes of ``row``, the snapshot row either backend read for ``revision``
    (``None``: the latest), its first column the envelope.

    Raises:
        NotFoundError: there is no such row (or none was compiled yet).
        StoreError: the stored envelope is not bytes.
    """
    if row is None:
        raise NotFoundError(
            "no snapshot has been compiled: run `rensei snapshot compile` first"
            if revision is None
            else f"no snapshot revision {revision}"
        )
    return _as_bytes(row[0])


def snapshot_row(
    snap: RulesetSnapshot, *, policy_revision: int, org_revision: int
) -> tuple[int, str, str, str, int, int, bytes]:
    """The stored columns of a snapshot compiled from those revisions, as both backends keep
    them: ``(revision, ruleset_rev, content_hash, compiled_at, policy_revision, org_revision,
    envelope)``."""
    return (
        snap.revision,
        snap.ruleset_rev,
        snap.content_hash,
        snap.compiled_at,
        policy_revision,
        org_revision,
        snap.to_bytes(),
    )


def verified(
    data: bytes, lookup: Callable[[str], Callable[[bytes, bytes], bool] | None]
) -> RulesetSnapshot:
    """A stored envelope verified like any other (no store is trusted blindly), its unsigned
    ``validators`` list kept (the home's own compile wrote it), either backend.

    Raises:
        SnapshotError: it does not verify.
    """
    try:
        return verify_snapshot(data, lookup=lookup, keep_validators=True)
    except SnapshotError as e:
        raise SnapshotError(f"stored snapshot does not verify: {e}") from e


def resealed(
    held: RulesetSnapshot,
    *,
    compiled_at: str,
    signing_key_id: str,
    sign: Callable[[bytes], bytes],
) -> RulesetSnapshot:
    """``held`` signed again at ``compiled_at``: the same org, revision, sections and
    validators (a re-seal makes no new revision), both backends' one rule.

    Raises:
        SnapshotError: ``compiled_at`` is not later than the held snapshot's.
    """
    fresh = seal(
        org_id=held.org_id,
        revision=held.revision,
        compiled_at=compiled_at,
        sections=held.sections,
        signing_key_id=signing_key_id,
        sign=sign,
        validators=held.validators,
    )
    if not check_succession(held, fresh):
        raise SnapshotError(f"compiledAt {compiled_at} is not later than {held.compiled_at}")
    return fresh


def validated_sections(
    *,
    policies: PolicySnapshot,
    policy_state: str,
    org: OrgData,
    validators: Sequence[SnapshotValidator],
    vocabulary: Vocabulary,
) -> tuple[dict[str, Any], tuple[ValidatorResult, ...]]:
    """The five sections of a compile and every validator's verdict (the built-in ones, then
    ``validators``).

    Raises:
        SnapshotValidationError: naming every failing validator (nothing may be published).
    """
    sections = compile_sections(org, policies)
    checks = builtin_validators(policies, policy_state=policy_state, vocabulary=vocabulary)
    results = tuple(run_validators((*checks, *validators), sections))
    failed = [r for r in results if not r.ok]
    if failed:
        raise SnapshotValidationError(tuple(failed))
    return dict(sections), results


def seal_next(
    *,
    org_id: str,
    revision: int,
    built_from: tuple[int, int] | None,
    policy_revision: int,
    org_revision: int,
    compiled_at: str,
    sections: dict[str, Any],
    results: Sequence[ValidatorResult],
    signing_key_id: str,
    sign: Callable[[bytes], bytes],
) -> RulesetSnapshot:
    """Snapshot ``revision`` sealed from validated ``sections`` (both control backends publish
    what this returns), refused when the compile's inputs (``policy_revision``,
    ``org_revision``) are older than those the latest snapshot was ``built_from``: a revoked
    grant never comes back in a later revision.

    Raises:
        SnapshotError: the inputs are older (nothing may be published; compile again).
    """
    if built_from is not None and (policy_revision < built_from[0] or org_revision < built_from[1]):
        raise SnapshotError(
            f"the data moved: revision {revision - 1} was built from policy "
            f"revision {built_from[0]} and org data revision {built_from[1]}, "
            f"newer than this compile's ({policy_revision}, {org_revision}); "
            "nothing published (compile again)"
        )
    return seal(
        org_id=org_id,
        revision=revision,
        compiled_at=compiled_at,
        sections=sections,
        signing_key_id=signing_key_id,
        sign=sign,
        validators=tuple(r.name for r in results),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotInfo:
    """One stored snapshot row, without its sections."""

    ruleset_rev: str
    revision: int
    content_hash: str
    compiled_at: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "rulesetRev": self.ruleset_rev,
            "revision": self.revision,
            "contentHash": self.content_hash,
            "compiledAt": self.compiled_at,
            "size": self.size,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileResult:
    """A published snapshot and every validator's verdict."""

    snapshot: RulesetSnapshot
    validators: tuple[ValidatorResult, ...]


class SnapshotStore:
    """Compiled snapshots of one org over one apsw connection (a writer for ``compile``)."""

    def __init__(self, conn: apsw.Connection, *, org_id: str) -> None:
        self._conn = conn
        self.org_id = org_id

    def next_revision(self) -> int:
        """The revision the next compile publishes: one above the latest and the start-after.

        Raises:
            StoreError: the database could not be read.
        """
        ((last,),) = self._read("SELECT max(revision) FROM ruleset_snapshots")
        return max(0 if last is None else int(last), self.start_after()) + 1

    def insert(self, snap: RulesetSnapshot, *, policy_revision: int, org_revision: int) -> None:
        """Publish ``snap``, compiled from those revisions (the caller's transaction).

        Raises:
            apsw.Error: the row could not be written.
        """
        self._conn.execute(
            "INSERT INTO ruleset_snapshots(revision, ruleset_rev, content_hash, "
            "compiled_at, policy_revision, org_revision, envelope) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            snapshot_row(snap, policy_revision=policy_revision, org_revision=org_revision),
        )

    def start_after(self) -> int:
        """The revision this home's snapshots start after (``init --start-after``; 0 unset): a
        home that takes over an org from another control home (a key rotation) publishes its
        first snapshot above every revision the hosts hold, so they adopt it as newer.

        Raises:
            StoreError: unreadable, or the stored value is not a revision (a hand edit).
        """
        text = read_text(self._conn, START_AFTER)
        if text is None:
            return 0
        if not text.isdigit() or int(text) > MAX_SNAPSHOT_REVISION - 1:
            raise StoreError(f"setting {START_AFTER} is not a revision: {text!r}")
        return int(text)

    def set_start_after(self, revision: int) -> None:
        """Make the next compiled revision at least ``revision + 1`` (one transaction). Allowed
        before the first compile, or when the snapshots already reach ``revision``.

        Raises:
            SnapshotError: ``revision`` is out of range, or this home already published
                revisions below it (its hosts hold them: a gap now would not be a take-over).
            StoreError: the database could not be written.
        """
        if not 0 <= revision < MAX_SNAPSHOT_REVISION:
            raise SnapshotError(f"--start-after must be between 0 and {MAX_SNAPSHOT_REVISION - 1}")
        try:
            with self._conn:
                last = self._conn.execute("SELECT max(revision) FROM ruleset_snapshots").get
                if last is not None:
                    if int(last) >= revision:
                        return  # already past it
                    raise SnapshotError(
                        f"this home already compiled revisions up to {last}; --start-after "
                        "applies before its first compile (init the new home with it)"
                    )
                write_text(self._conn, START_AFTER, str(max(revision, self.start_after())))
        except apsw.Error as e:
            raise store_error(
                "cannot set the first snapshot revision", e, self._conn.filename
            ) from e

    def replace(self, fresh: RulesetSnapshot) -> None:
        """Store the re-sealed ``fresh`` over the row of its revision (the caller's transaction).

        Raises:
            apsw.Error: the row could not be written.
        """
        self._conn.execute(
            "UPDATE ruleset_snapshots SET compiled_at = ?, envelope = ? WHERE revision = ?",
            (fresh.compiled_at, fresh.to_bytes(), fresh.revision),
        )

    def envelope(self, revision: int | None = None) -> bytes:
        """The exact stored (served) bytes of the current snapshot or of ``revision``.

        Raises:
            NotFoundError: no such snapshot (or none compiled yet).
            StoreError: the database could not be read.
        """
        args: tuple[Any, ...] = ()
        if revision is None:
            sql = "SELECT envelope FROM ruleset_snapshots ORDER BY revision DESC LIMIT 1"
        else:
            sql, args = "SELECT envelope FROM ruleset_snapshots WHERE revision = ?", (revision,)
        try:
            rows = self._read(sql, args)
        except OverflowError as e:
            raise NotFoundError(f"no snapshot revision {revision}") from e
        return stored_envelope(rows[0] if rows else None, revision)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Every row of one query on the snapshots.

        Raises:
            StoreError: the database could not be read.
        """
        try:
            return list(self._conn.execute(sql, args).fetchall())
        except apsw.Error as e:
            raise StoreError(f"cannot read snapshots: {e}") from e

    def load(
        self,
        revision: int | None = None,
        *,
        lookup: Callable[[str], Callable[[bytes, bytes], bool] | None],
    ) -> RulesetSnapshot:
        """A stored snapshot, verified like any other (the store is not trusted blindly); its
        unsigned ``validators`` list is kept (this home's own compile wrote it).

        Raises:
            NotFoundError, StoreError, SnapshotError.
        """
        return verified(self.envelope(revision), lookup)

    def compiled_from(self) -> tuple[int, int] | None:
        """``(policy revision, org-data revision)`` the latest snapshot was compiled from, or
        ``None`` when none was compiled.

        Raises:
            StoreError: the database could not be read.
        """
        rows = self._read(
            "SELECT policy_revision, org_revision FROM ruleset_snapshots "
            "ORDER BY revision DESC LIMIT 1"
        )
        return next(((int(str(p)), int(str(o))) for p, o in rows), None)

    def history(self) -> list[SnapshotInfo]:
        """Every compiled snapshot, oldest first.

        Raises:
            StoreError: the database could not be read.
        """
        rows = self._read(
            "SELECT ruleset_rev, revision, content_hash, compiled_at, length(envelope) "
            "FROM ruleset_snapshots ORDER BY revision"
        )
        out = []
        for rev_id, revision, digest, compiled_at, size in rows:
            assert isinstance(revision, int) and isinstance(size, int)  # STRICT INTEGER columns
            out.append(
                SnapshotInfo(
                    ruleset_rev=str(rev_id),
                    revision=revision,
                    content_hash=str(digest),
                    compiled_at=str(compiled_at),
                    size=size,
                )
            )
        return out
