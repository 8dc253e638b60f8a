"""What every part of the audit store works through: one log's database file, its connections
(a writer and a reader, opened lazily), its keys, its origin and the per-process state of its
automatic checkpoints and rotation. Owns no table and decides nothing; :class:`.log.AuditLog`
is this handle with the log's operations, and the modules below it (segments, the tree, the
walk, rotation, checkpoints) take the handle, so none of them imports the log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from ... import signing
from ...core.redact import DEFAULT_REDACTOR, Redactor
from ...errors import AuditError, StoreError
from ..codec import Codec
from ..db import close_quietly, connect, store_error
from ..home import ConnectOptions
from . import tree
from .segments import Sealed

if TYPE_CHECKING:
    from .group import Committer

__all__ = ["LogHandle"]


class LogHandle:
    """The audit log of one database file, without its operations (see :class:`.log.AuditLog`
    for the arguments). Opens a writer and a reader connection lazily and closes both in
    :meth:`close`; one thread at a time. A failed write closes the writer connection, so the
    next operation opens a fresh one."""

    __slots__ = (
        "_checkpoint_every",
        "_checkpointed",
        "_group",
        "_key",
        "_options",
        "_path",
        "_protected",
        "_public",
        "_queue",
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
        self._sealed = Sealed(self._path, self._options)
        self._group: tuple[str, str | None] | None = None
        #: The commit queue of this log's file (see :func:`.group.queue_of`).
        self._queue: Committer | None = None

    def _group_key(self) -> tuple[str, str | None]:
        """What this log's appends share commits by (see :mod:`.group`): the database file's
        resolved path and the VFS."""
        if self._group is None:
            self._group = (os.path.realpath(self._path), self._options.vfs)
        return self._group

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
            try:
                tree.catch_up(self._writer, self._sealed)  # a home made before the tree
            except apsw.Error as e:
                raise self._write_failed("cannot build the audit log's tree", e) from e
            except StoreError:
                pass  # a sealed segment is missing: the tree stays behind, verify says so
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
            self._forget(writer)
            close_quietly(writer)
        return store_error(what, error, self._path)

    def _forget(self, writer: apsw.Connection) -> None:
        """The commit queue no longer remembers the head ``writer`` committed (it closes)."""
        if self._queue is not None:
            self._queue.forget(writer)

    def _read_conn(self) -> apsw.Connection:
        if self._reader is None:
            if not self._path.exists() and not self.read_only:
                self._write_conn()  # a reader never creates the database: the writer does
            self._reader = self._connect(write=False)
        return self._reader

    def _query_one(self, sql: str, args: tuple[Any, ...]) -> Any:
        try:
            return self._read_conn().execute(sql, args).fetchone()
        except (apsw.Error, OverflowError) as e:
            raise store_error("cannot read the audit log", e, self._path) from e

    def _private_key(self) -> signing.PrivateKey:
        key = self._key
        if key is None:
            raise AuditError("this audit log has no signing key")
        return key if isinstance(key, signing.PrivateKey) else key()

    def close(self) -> None:
        """Close the connections this log opened (idempotent)."""
        if self._writer is not None:
            self._forget(self._writer)
        for conn in (self._reader, self._writer):
            if conn is not None:
                close_quietly(conn)
        self._reader = self._writer = None
        self._writer_codec = None
        self._sealed.close()
