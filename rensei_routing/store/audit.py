"""The hash-chained audit log in the home database: append, read, verify, checkpoint. Owns the
``audit_records`` and ``audit_checkpoints`` tables; must not read the clock (callers pass
``recorded_at``) and leaves the link rules to :mod:`rensei_routing.core.audit.chain` and the
note files (reading, atomic export, protected targets) to :mod:`.notes`.

Appends read the chain head inside their own ``BEGIN IMMEDIATE`` transaction, so any number of
processes appending to one database produce one unbroken chain; a batch is one transaction.
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

from .. import signing
from ..core.audit.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    STRICT_PAYLOADS,
    AuditRecord,
    Checkpoint,
    VerifyResult,
    checkpoint_origin,
    encode_payload,
    encode_payloads,
    link_stamped,
)
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.timestamps import check_timestamp
from ..errors import (
    AuditError,
    HomeError,
    MalformedError,
    NotFoundError,
    StoreError,
)
from . import autocheckpoint, chainwalk, rotation, segments
from .codec import FUNCTION, Codec
from .db import close_quietly, connect, store_error
from .home import ConnectOptions, Home
from .notes import publish, read_checkpoint, refuse_protected, stage

#: ``read_checkpoint`` is :mod:`.notes`'s, re-exported for the modules that still import it here.
__all__ = ["AppendResult", "AuditLog", "read_checkpoint"]

_COLUMNS: Final = ", ".join(ROW_COLUMNS)
#: Every read sees the canonical payload bytes, however they are stored (see .codec).
_SELECT: Final = (
    f"SELECT {', '.join(ROW_COLUMNS[:-1])}, {FUNCTION}(payload) AS payload FROM audit_records"
)
_INSERT: Final = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_HEAD: Final = "SELECT seq, record_hash FROM audit_records ORDER BY seq DESC LIMIT 1"
_INSERT_CHECKPOINT: Final = "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)"
#: Rows linked and inserted per ``executemany`` by a streaming append.
APPEND_CHUNK: Final = 1_000
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


class AuditLog:
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

    __slots__ = (
        "_checkpoint_every",
        "_checkpointed",
        "_key",
        "_options",
        "_path",
        "_protected",
        "_public",
        "_reader",
        "_redactor",
        "_rotate_at",
        "_sealed",
        "_vouched",
        "_writer",
        "_writer_codec",
        "auto_checkpoint_error",
        "origin",
        "read_only",
    )

    def __init__(
        self,
        path: Path,
        *,
        origin: str,
        public_key: signing.PublicKey | None = None,
        private_key: signing.PrivateKey | Callable[[], signing.PrivateKey] | None = None,
        redactor: Redactor = DEFAULT_REDACTOR,
        options: ConnectOptions | None = None,
        protected: Sequence[Path] = (),
        rotate_at_records: int | None = None,
        checkpoint_every: int | None = None,
        read_only: bool = False,
    ) -> None:
        self._path = Path(path)
        self.read_only = read_only
        self._options = ConnectOptions() if options is None else options
        self._protected = tuple(Path(d) for d in protected)
        self.origin = origin
        self._public = public_key
        self._key = private_key
        self._redactor = redactor
        self._writer: apsw.Connection | None = None
        self._writer_codec: Codec | None = None
        self._reader: apsw.Connection | None = None
        self._rotate_at = rotate_at_records
        self._checkpoint_every = checkpoint_every
        self._checkpointed = 0  # a lower bound of the latest checkpoint's size
        #: (first seq, last seq, the head it followed, its head) of each batch this process
        #: encoded canonically since then (see :mod:`.autocheckpoint`).
        self._vouched: list[tuple[int, int, str, str]] = []
        self.auto_checkpoint_error: str | None = None
        self._sealed = segments.Sealed(self._path, self._options)

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

    # -- connections --------------------------------------------------------------------------

    def _codec(self, conn: apsw.Connection) -> Codec:
        """The writer's codec (the dictionaries it holds do not change while it is open)."""
        if self._writer_codec is None:
            self._writer_codec = Codec.load(conn)
        return self._writer_codec

    def _write_conn(self) -> apsw.Connection:
        if self._writer is None:
            if self.read_only:
                raise StoreError(f"{self._path} is opened read-only here: nothing is written")
            self._writer = self._connect(write=True)
        return self._writer

    def _connect(self, *, write: bool) -> apsw.Connection:
        o = self._options
        return connect(self._path, write=write, busy_timeout_ms=o.busy_timeout_ms, vfs=o.vfs)

    def _write_failed(self, what: str, error: apsw.Error) -> StoreError:
        """Drop the writer connection after a failed write (SQLite may have left it unusable,
        e.g. after an I/O error) and the typed error for ``what``."""
        writer, self._writer = self._writer, None
        self._writer_codec = None
        if writer is not None:
            close_quietly(writer)
        return store_error(what, error, self._path)

    def _read_conn(self) -> apsw.Connection:
        if self._reader is None:
            if not self._path.exists() and not self.read_only:
                self._write_conn()  # a reader never creates the database: the writer does
            self._reader = self._connect(write=False)
        return self._reader

    def close(self) -> None:
        """Close the connections this log opened (idempotent)."""
        for conn in (self._reader, self._writer):
            if conn is not None:
                close_quietly(conn)
        self._reader = self._writer = None
        self._writer_codec = None
        self._sealed.close()

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

    def append_encoded(self, encoded: Iterable[bytes], *, recorded_at: str) -> AppendResult:
        """Append payloads already in their stored form (``encode_payload`` with this log's
        redactor: the caller vouches for that) in one transaction, streaming: ``encoded`` is
        consumed in chunks of :data:`APPEND_CHUNK`, so a batch of any size is appended in
        constant memory. If iterating ``encoded`` raises, nothing is written.

        Raises:
            MalformedError: ``recorded_at`` is not an RFC 3339 UTC timestamp.
            StoreError: the database write failed (nothing was written).
        """
        return self._append(encoded, recorded_at, keep=False)[0]

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
        conn = self._write_conn()
        kept: list[tuple[int, str, str, str, str, bytes]] = []
        count = 0
        try:
            compress = self._codec(conn).compress
            with conn:  # BEGIN IMMEDIATE: the head cannot move until we commit
                if within is not None:
                    encoded = [encode_payload(p, self._redactor) for p in within(conn)]
                    if not encoded:  # the change alone (a heartbeat): nothing to link
                        return AppendResult(first_seq=0, count=0, head_hash=""), kept
                head = conn.execute(_HEAD).fetchone() or segments.head_across(conn)
                first, prev = (0, GENESIS_HASH) if head is None else (head[0] + 1, head[1])
                before = prev
                pairs = (
                    ((recorded_at, d) for d in encoded)
                    if stamped is None
                    else iter(stamped(conn, first, prev))  # a list too, read once
                )
                while chunk := list(itertools.islice(pairs, APPEND_CHUNK)):
                    rows = link_stamped(chunk, seq=first + count, prev_hash=prev)
                    conn.executemany(_INSERT, [(*r[:5], compress(r[5])) for r in rows])
                    count += len(rows)
                    prev = rows[-1][4]
                    if keep:
                        kept.extend(rows)
        except apsw.Error as e:
            raise self._write_failed("cannot append to the audit log", e) from e
        # After the commit, never inside it: a checkpoint of the head, then the rotation.
        if self._checkpoint_every is not None and count and self._key is not None:
            if own:
                self._vouched.append((first, first + count - 1, before, prev))
            autocheckpoint.checkpoint_if_due(self, first + count, self._checkpoint_every)
        if self._rotate_at is not None and count:
            rotation.rotate_if_due(self, first + count, self._rotate_at)
        return AppendResult(first_seq=first, count=count, head_hash=prev), kept

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

    def _query_one(self, sql: str, args: tuple[Any, ...]) -> Any:
        try:
            return self._read_conn().execute(sql, args).fetchone()
        except (apsw.Error, OverflowError) as e:
            raise store_error("cannot read the audit log", e, self._path) from e

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
        cp = rotation.sign(
            key, self.origin, result.records_checked, result.head_hash, STRICT_PAYLOADS
        )
        staged = None if target is None else stage(cp, target)
        published = delivered = False
        try:
            writer = self._write_conn()
            with writer:
                writer.execute(_INSERT_CHECKPOINT, (cp.size, cp.head_hash, cp.to_text()))
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

    def _private_key(self) -> signing.PrivateKey:
        key = self._key
        if key is None:
            raise AuditError("this audit log has no signing key")
        return key if isinstance(key, signing.PrivateKey) else key()

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
