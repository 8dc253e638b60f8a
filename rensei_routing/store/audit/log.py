"""The hash-chained audit log in the home database: append, read, verify, checkpoint. Owns the
``audit_records`` and ``audit_checkpoints`` tables; must not read the clock (callers pass
``recorded_at``) and leaves the link rules to :mod:`rensei_routing.core.audit.chain` and the
note files (reading, atomic export, protected targets) to :mod:`.notes`.

Appends read the chain head inside their own ``BEGIN IMMEDIATE`` transaction, so any number of
processes appending to one database produce one unbroken chain; a batch is one transaction.
One process's concurrent appends to one file share transactions and syncs (:mod:`.group`).
Verification streams one read snapshot through a cursor (constant memory at any log size).
The chain may be cut into sealed segments (:mod:`.segments`, :mod:`.rotation`): every read and
verification here goes across them, and the live table continues from the newest one's head.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import apsw

from ... import signing
from ...core.audit import merkle
from ...core.audit.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    STRICT_PAYLOADS,
    AuditRecord,
    Checkpoint,
    VerifyResult,
    checkpoint_origin,
    encode_payload,
    encode_payloads,
)
from ...core.redact import DEFAULT_REDACTOR, Redactor
from ...core.timestamps import check_timestamp
from ...errors import (
    AuditError,
    HomeError,
    MalformedError,
    NotFoundError,
    StoreError,
    TreeError,
)
from ..codec import FUNCTION, Codec
from ..db import store_error
from ..home import Home
from ..notes import publish, read_checkpoint, refuse_protected, stage
from . import attest, autocheckpoint, chainwalk, group, rotation, segments, tree
from .group import APPEND_CHUNK
from .handle import LogHandle

#: ``read_checkpoint`` is :mod:`.notes`'s, re-exported for the modules that still import it here.
__all__ = ["APPEND_CHUNK", "AppendResult", "AuditLog", "read_checkpoint"]

#: Every read sees the canonical payload bytes, however they are stored (see .codec).
_SELECT: Final = (
    f"SELECT {', '.join(ROW_COLUMNS[:-1])}, {FUNCTION}(payload) AS payload FROM audit_records"
)
_HEAD: Final = "SELECT seq, record_hash FROM audit_records ORDER BY seq DESC LIMIT 1"
_INSERT_CHECKPOINT: Final = "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)"
#: The largest SQLite integer: no seq can exceed it, and apsw cannot bind anything larger.
_MAX_INT64: Final = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResult:
    """What one ``append_many`` wrote: seqs ``first_seq .. first_seq + count - 1``."""

    first_seq: int
    count: int
    head_hash: str

    @property
    def seqs(self) -> range:
        """The seqs written, in order."""
        return range(self.first_seq, self.first_seq + self.count)


class AuditLog(LogHandle):
    """The audit log of one database file. Opens a writer and a reader connection lazily and
    closes both in :meth:`close` (or on leaving a ``with`` block); one thread at a time.

    ``origin`` names the log in checkpoints; ``public_key`` checks them; ``private_key`` (a key or
    a loader, called only by :meth:`checkpoint`) signs them. ``options`` (busy timeout, VFS)
    apply to both connections; :meth:`open` takes them from the home. ``protected`` names
    directories a checkpoint export must never write into (:meth:`open` protects the home); the
    database file and its ``-wal``, ``-shm`` and ``-journal`` companions are always protected.
    A failed write closes the writer connection, so the next operation opens a fresh one.
    ``rotate_at_records``: seal the live segment once it holds that many records, after the
    write transaction that reached it (see :mod:`.rotation`); ``None``: never automatically.
    ``checkpoint_every``: sign a checkpoint of the head, after the write transaction, once that
    many records lie past the latest one (see :mod:`.autocheckpoint`; needs ``private_key``);
    ``None``: never automatically. Its last failure, if any: :attr:`auto_checkpoint_error`.
    ``read_only``: never open the writer (a missing database is a :class:`StoreError`, not a
    new one; writing raises :class:`StoreError`), and verification leaves the segments' files
    alone (no recovery); the console opens its logs so.
    """

    __slots__ = ()

    @classmethod
    def open(
        cls, home: Home, *, redactor: Redactor = DEFAULT_REDACTOR, read_only: bool = False
    ) -> AuditLog:
        """The audit log of an initialised home, with its host key (``read_only``: see the class).

        Raises:
            HomeError: the home is not initialised, or its public key does not match it.
            StoreError: the database cannot be read.
        """
        info = home.info()
        public = home.public_key()
        if public.key_id != info.key_id:
            raise HomeError(f"public key {home.public_key_path} does not match this home")
        return cls(
            home.db_path,
            origin=checkpoint_origin(info.org),
            public_key=public,
            private_key=home.private_key,
            redactor=redactor,
            options=home.connect_options(),
            protected=(home.path,),
            rotate_at_records=rotation.rotate_at_records(home),
            checkpoint_every=autocheckpoint.checkpoint_every(home),
            read_only=read_only,
        )

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------

    def append(self, payload: Any, *, recorded_at: str) -> AuditRecord:
        """Redact, encode, link and store one payload; returns the stored (redacted) record.

        Raises:
            MalformedError: ``recorded_at`` is not an RFC 3339 UTC timestamp.
            CanonicalEncodingError: the payload is not a canonical JSON value.
            StoreError: the database write failed (nothing was written).
        """
        rows = self._append((encode_payload(payload, self._redactor),), recorded_at, own=True)[1]
        return AuditRecord.from_row(rows[0])

    def append_many(self, payloads: Iterable[Any], *, recorded_at: str) -> AppendResult:
        """Append several payloads in one transaction (all or nothing), in the given order.

        Raises:
            MalformedError: ``recorded_at`` is not an RFC 3339 UTC timestamp.
            CanonicalEncodingError: a payload is not a canonical JSON value (nothing written).
            StoreError: the database write failed (nothing was written).
        """
        return self._append(encode_payloads(payloads, self._redactor), recorded_at, own=True)[0]

    def append_within(
        self, change: Callable[[apsw.Connection], Iterable[Any]], *, recorded_at: str
    ) -> AppendResult:
        """Run ``change(conn)`` inside the append's write transaction and append the payloads
        it returns: a state change kept in this database (a session's, say) and the records
        of it commit together, or neither does. Whatever ``change`` raises rolls both back and
        propagates (an ``apsw.Error`` as a ``StoreError``). When ``change`` returns nothing, the
        change commits alone (``count`` 0, no ``head_hash``).

        Raises:
            MalformedError, CanonicalEncodingError, StoreError: nothing was written.
        """
        return self._append((), recorded_at, within=change, own=True)[0]

    def append_encoded(
        self, encoded: Iterable[bytes], *, recorded_at: str, own: bool = False
    ) -> AppendResult:
        """Append payloads already in their stored form (``encode_payload`` with this log's
        redactor: the caller vouches for that) in one transaction, streaming: ``encoded`` is
        consumed in chunks of :data:`APPEND_CHUNK`, so a batch of any size is appended in
        constant memory. If iterating ``encoded`` raises, nothing is written. ``own``: every
        payload is this log's ``encode_payload`` of a value, made in this process (as
        :meth:`append_stamped`'s), so the automatic checkpoint need not parse them again.

        Raises:
            MalformedError: ``recorded_at`` is not an RFC 3339 UTC timestamp.
            StoreError: the database write failed (nothing was written).
        """
        return self._append(encoded, recorded_at, keep=False, own=own)[0]

    def append_stamped(
        self,
        build: Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]],
        *,
        own: bool = False,
    ) -> AppendResult:
        """:meth:`append_encoded` of ``(recorded_at, stored payload)`` pairs, each with its own
        time, streamed from ``build(conn, next seq, head hash)`` in the write transaction: what
        else ``build`` writes through ``conn`` commits with them; what it raises rolls all back.
        ``own``: every payload is this log's ``encode_payload`` of a value (a library service
        that encoded them says so), so the automatic checkpoint need not parse them again.

        Raises:
            MalformedError (a ``recorded_at`` is not RFC 3339 UTC), StoreError: nothing written.
        """
        return self._append((), "", keep=False, stamped=build, own=own)[0]

    def _append(
        self,
        encoded: Iterable[bytes],
        recorded_at: str,
        *,
        keep: bool = True,
        within: Callable[[apsw.Connection], Iterable[Any]] | None = None,
        stamped: Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]] | None = None,
        own: bool = False,
    ) -> tuple[AppendResult, list[tuple[int, str, str, str, str, bytes]]]:
        """Link and insert ``encoded`` (or what ``within(conn)`` returns, run first inside the
        transaction, or the pairs ``stamped`` yields) after the head in one transaction, a
        chunk at a time; the rows are returned only with ``keep``. ``own``: the bytes are this
        log's canonical encoding (the automatic checkpoint need not parse them again)."""
        if stamped is None:
            check_timestamp(recorded_at)
        if self.read_only:
            raise StoreError(f"{self._path} is opened read-only here: nothing is written")
        job = group.Job(
            encoded=encoded,
            recorded_at=recorded_at,
            keep=keep,
            within=within,
            stamped=stamped,
            redactor=self._redactor,
        )
        group.queue_of(self).run(self, job)
        if job.error is not None:
            raise job.error
        first, count, before, prev = job.first, job.count, job.before, job.head
        if within is not None and not count:  # the change alone (a heartbeat)
            return AppendResult(first_seq=0, count=0, head_hash=""), job.rows
        # After the commit, never inside it: a checkpoint of the head, then the rotation.
        if self._checkpoint_every is not None and count and self._key is not None:
            if own:
                self._vouched.append((first, first + count - 1, before, prev))
            autocheckpoint.checkpoint_if_due(self, first + count, self._checkpoint_every)
        if self._rotate_at is not None and count:
            rotation.rotate_if_due(self, first + count, self._rotate_at)
        return AppendResult(first_seq=first, count=count, head_hash=prev), job.rows

    # -- reading ------------------------------------------------------------------------------

    def get(self, seq: int) -> AuditRecord:
        """The record with this seq.

        Raises:
            NotFoundError: no such record.
            StoreError: the database read failed.
        """
        if not 0 <= seq <= _MAX_INT64:  # no such seq can be stored (nor bound by apsw)
            raise NotFoundError(f"no audit record with seq {seq}")
        row = self._query_one(f"{_SELECT} WHERE seq = ?", (seq,))
        if row is None:
            try:
                row = segments.get_across(self._read_conn(), self._sealed, seq)
            except apsw.Error as e:
                raise store_error("cannot read the audit log", e, self._path) from e
        if row is None:
            raise NotFoundError(f"no audit record with seq {seq}")
        return AuditRecord.from_row(row)

    def tail(self, n: int = 10) -> tuple[AuditRecord, ...]:
        """The last ``n`` records, oldest first (all of them when ``n`` exceeds the count).

        Damaged records are returned as stored (see :meth:`.AuditRecord.to_dict`).

        Raises:
            MalformedError: ``n`` is negative.
            StoreError: the database read failed.
        """
        if n < 0:
            raise MalformedError("n", f"the number of records must not be negative: {n}")
        page = max(1, min(n, 1_000))
        newest = itertools.islice(self.records(newest_first=True, batch=page), min(n, _MAX_INT64))
        return tuple(reversed(list(newest)))

    def count(self) -> int:
        """How many records are stored.

        Raises:
            StoreError: the database read failed.
        """
        try:
            return segments.count_across(self._read_conn())
        except apsw.Error as e:
            raise store_error("cannot read the audit log", e, self._path) from e

    def head(self) -> tuple[int, str]:
        """``(next seq, head hash)`` as stored (not verified); ``(0, GENESIS_HASH)`` when empty.

        Raises:
            StoreError: the database read failed.
        """
        conn = self._read_conn()
        try:
            with conn:
                row = conn.execute(_HEAD).fetchone() or segments.head_across(conn)
        except apsw.Error as e:
            raise store_error("cannot read the audit log", e, self._path) from e
        return (0, GENESIS_HASH) if row is None else (int(row[0]) + 1, str(row[1]))

    def records(
        self,
        *,
        start: int = 0,
        stop: int | None = None,
        newest_first: bool = False,
        batch: int = 1_000,
    ) -> Iterator[AuditRecord]:
        """Every record with ``start <= seq < stop`` (all of them by default), oldest first (or
        newest first), across the sealed segments present and the live one, streamed in pages
        of ``batch`` records so memory stays flat at any log size. Each page is its own read; a
        record appended meanwhile may or may not be seen (see :func:`.segments.iter_records`).

        Raises:
            StoreError: the database read failed, or a sealed segment's file is missing.
        """
        return segments.iter_records(
            self._read_conn(),
            self._sealed,
            self._path,
            start=start,
            stop=stop,
            newest_first=newest_first,
            batch=batch,
        )

    def stored_payloads(
        self, *, start: int = 0, stop: int | None = None, batch: int = 10_000
    ) -> Iterator[tuple[Codec, list[tuple[int, bytes]]]]:
        """The payloads of :meth:`records` (oldest first) as stored, in pages of
        ``(seq, stored bytes)`` with the codec that reads each page
        (:func:`.segments.iter_stored`): for a reader that keys what repeats by the stored
        bytes and inflates only what it has not seen.

        Raises:
            StoreError: the database read failed, or a sealed segment's file is missing.
        """
        return segments.iter_stored(
            self._read_conn(), self._sealed, self._path, start=start, stop=stop, batch=batch
        )

    # -- the tree -----------------------------------------------------------------------------

    def tree_size(self) -> int:
        """How many leaves the stored Merkle tree covers (:mod:`.tree`): the chain's record
        count once built; 0 for a home whose oldest records were pruned before the tree.

        Raises:
            StoreError: the database read failed.
        """
        return int(self._tree_read(lambda conn: tree.size_of(tree.stored_count(conn))))

    def tree_root(self, size: int) -> bytes:
        """The 32-byte RFC 6962 root of the tree of the first ``size`` records (32 zero bytes
        for 0): a tree-root checkpoint's hash line.

        Raises:
            NotFoundError: ``size`` is negative or above :meth:`tree_size`.
            StoreError: the database read failed, or the tree's storage is damaged.
        """
        return bytes(
            self._tree_read(
                lambda conn: merkle.tree_hash(self._size(conn, size), tree.reader(conn))
            )
        )

    def leaf(self, seq: int) -> bytes:
        """The stored leaf hash of record ``seq``: SHA-256(0x00 || its 32 record-hash bytes).

        Raises:
            NotFoundError: the tree has no leaf ``seq``.
            StoreError: the database read failed, or the tree's storage is damaged.
        """

        def read(conn: apsw.Connection) -> bytes:
            if not 0 <= seq < self._size(conn, None):
                raise NotFoundError(f"the audit tree has no leaf {seq}")
            return tree.reader(conn)([merkle.stored_hash_index(0, seq)])[0]

        return bytes(self._tree_read(read))

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        """The RFC 6962 audit path of record ``seq`` in the tree of ``size`` records, bottom up
        (checked by :func:`~rensei_routing.core.audit.merkle.verify_inclusion` against
        :meth:`leaf` and :meth:`tree_root`); ``O(log size)`` stored hashes read.

        Raises:
            NotFoundError: ``size`` is above :meth:`tree_size`, or ``seq`` is not below it.
            StoreError: the database read failed, or the tree's storage is damaged.
        """

        def read(conn: apsw.Connection) -> list[bytes]:
            n = self._size(conn, size)
            if not 0 <= seq < n:
                raise NotFoundError(f"record {seq} is not in the tree of {n} records")
            return merkle.inclusion_proof(seq, n, tree.reader(conn))

        return list(self._tree_read(read))

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """The RFC 6962 consistency proof from the tree of ``old`` records to that of ``new``
        (checked by :func:`~rensei_routing.core.audit.merkle.verify_consistency`).

        Raises:
            NotFoundError: ``new`` is above :meth:`tree_size`, or ``old`` is negative or above
                ``new``.
            StoreError: the database read failed, or the tree's storage is damaged.
        """

        def read(conn: apsw.Connection) -> list[bytes]:
            n = self._size(conn, new)
            if not 0 <= old <= n:
                raise NotFoundError(f"no consistency proof from {old} to {n} records")
            return merkle.consistency_proof(old, n, tree.reader(conn))

        return list(self._tree_read(read))

    def _size(self, conn: apsw.Connection, size: int | None) -> int:
        """``size`` (default: the tree's), refused when the tree is smaller."""
        have = tree.size_of(tree.stored_count(conn))
        if size is None:
            return have
        if not 0 <= size <= have:
            raise NotFoundError(f"the audit tree covers {have} records, not {size}")
        return size

    def _tree_read(self, read: Callable[[apsw.Connection], Any]) -> Any:
        conn = self._read_conn()
        try:
            with conn:
                return read(conn)
        except apsw.Error as e:
            raise store_error("cannot read the audit tree", e, self._path) from e
        except TreeError as e:
            raise StoreError(f"the audit tree's storage is damaged: {e}") from e

    # -- verification -------------------------------------------------------------------------

    def verify(
        self,
        checkpoints: Sequence[Checkpoint] = (),
        *,
        stored: bool = True,
        progress: Callable[[int], None] | None = None,
        workers: int | None = None,
    ) -> VerifyResult:
        """Walk the whole chain (every sealed segment present from the anchor, then the live
        table: :func:`.chainwalk.verify_all`), in one read snapshot of the home (see
        :func:`.chain.verify_chain`), cut into ranges checked by ``workers`` processes (default:
        every core; see :mod:`.parallel`: the verdict is the one walk's).

        ``checkpoints`` (e.g. exported notes) and, with ``stored``, every stored checkpoint are
        checked against the host public key, then against the log (a stored note that no longer
        parses is ``checkpoint-signature-invalid``). Payloads below a verified checkpoint made
        by :meth:`checkpoint` are not parsed again; a walk failing below one is repeated parsing
        every payload, so the verdict is a full strict walk's.

        Raises:
            AuditError: checkpoints must be checked but this log has no public key.
            StoreError: the database could not be read.
        """
        return self.verify_segments(
            checkpoints, stored=stored, progress=progress, workers=workers
        ).result

    def verify_segments(
        self,
        checkpoints: Sequence[Checkpoint] = (),
        *,
        stored: bool = True,
        progress: Callable[[int], None] | None = None,
        workers: int | None = None,
        public: signing.PublicKey | None = None,
    ) -> chainwalk.ChainVerdict:
        """:meth:`verify`, with what it walked (segments, anchor); ``public`` overrides the key."""
        key = self._public if public is None else public
        try:
            return chainwalk.verify_all(
                self, checkpoints, stored=stored, progress=progress, public=key, workers=workers
            )
        except apsw.Error as e:
            raise store_error("cannot read the audit log", e, self._path) from e

    # -- checkpoints --------------------------------------------------------------------------

    def checkpoint(
        self,
        *,
        export_to: Path | None = None,
        progress: Callable[[int], None] | None = None,
        deliver: Callable[[Checkpoint], None] | None = None,
    ) -> Checkpoint:
        """Verify the whole log, then sign a checkpoint of it, export it (optionally) and store it.

        Verification is exactly :meth:`verify`'s (every record from genesis and every stored
        checkpoint, one read snapshot, O(n); the strict parse is spared below the largest stored
        checkpoint carrying :data:`~rensei_routing.core.audit.note.STRICT_PAYLOADS`, which the
        new checkpoint carries too). It covers exactly the records verified. With ``export_to``
        the note is written to a fsynced temporary file beside it, renamed over ``export_to``
        inside the transaction that stores the row (a failed export stores nothing);
        ``export_to`` may not resolve to the database, its companions, or into a protected
        directory. ``deliver(checkpoint)`` runs inside that transaction after the export:
        whatever it raises rolls the row back. (Only a failed commit after the rename or the
        delivery leaves a valid but unstored note; the error says so.)

        Raises:
            AuditError: the log does not verify (the message names the first broken seq and the
                reason), there is no private key, the key is not this log's key, the export
                target is protected, or the export file cannot be written (the message names the
                file). Nothing is stored.
            HomeError: the home's key cannot be loaded.
            StoreError: the database read or write failed (nothing is stored).
        """
        target = None if export_to is None else Path(export_to)
        if target is not None:
            refuse_protected(target, self._path, self._protected)
        key = self._private_key()
        public = key.public_key
        if self._public is not None and self._public.raw != public.raw:
            raise AuditError(
                "refusing to checkpoint: the signing key does not match this log's public key"
            )
        result = self.verify_segments(progress=progress, public=public).result
        if not result:
            where = (
                "a stored checkpoint"
                if result.first_broken_seq is None
                else f"seq {result.first_broken_seq}"
            )
            raise AuditError(
                f"refusing to checkpoint a broken log: {where}: {result.reason} ({result.detail})"
            )
        size = result.records_checked
        root = self._tree_read(lambda conn: tree.root_at(conn, size))
        cp = attest.sign(key, self.origin, size, result.head_hash, STRICT_PAYLOADS, root)
        staged = None if target is None else stage(cp, target)
        published = delivered = False
        try:
            writer = self._write_conn()
            with writer:
                writer.execute(_INSERT_CHECKPOINT, (cp.size, result.head_hash, cp.to_text()))
                if staged is not None and target is not None:
                    publish(staged, target)  # raising here rolls the row back
                    published = True
                if deliver is not None:
                    deliver(cp)  # and so does raising here
                    delivered = True
        except apsw.Error as e:
            note = f"; the note written to {target} is valid but not stored" if published else ""
            if delivered:
                note += "; the note shown is valid but not stored"
            raise self._write_failed(f"cannot store the checkpoint{note}", e) from e
        finally:
            if staged is not None and not published:
                with contextlib.suppress(OSError):
                    os.unlink(staged)
        return cp

    def checkpoints(self) -> tuple[Checkpoint, ...]:
        """Every stored checkpoint and the seal of every catalogued segment, smallest first.

        Raises:
            CheckpointFormatError: a stored note no longer parses.
            StoreError: the database read failed.
        """
        conn = self._read_conn()
        try:
            with conn:
                stored = chainwalk.stored_checkpoints(conn) + chainwalk.seals(conn)
        except apsw.Error as e:
            raise store_error("cannot read checkpoints", e, self._path) from e
        return tuple(sorted(stored, key=lambda c: c.size))
