"""The audit chain cut into segments: the catalog of sealed and pruned segments, reading records
across them, and verifying the whole chain segment by segment. Owns the ``audit_segments``
table (schema step 5) and the files under ``<home>/audit/segments/``; sealing and pruning (the
writes) are :mod:`.rotation`'s.

Layout (docs/store.md "Segments"):

* The **live segment** is the ``audit_records`` table of the home database, as it always was:
  appends go there, and its first record links to the head of the newest sealed segment (or
  to the genesis hash when nothing was ever sealed).
* A **sealed segment** is a file ``<home>/audit/segments/<first>-<last>.db``: a rensei-routing
  database (mode 0444, rollback journal, opened read-only) holding the records ``first..last``
  exactly as they were stored, the checkpoints of that stretch, the seal checkpoint (a signed
  note of size ``last + 1`` and the segment's head hash) and every compression dictionary the
  home held, so it reads and verifies on its own. Its row in ``audit_segments`` keeps its
  bounds, the hash its first record links to, its head and its seal note.
* A **pruned segment** keeps only that row (``pruned = 1``, with the SHA-256 of the export that
  held its records, its seal replaced by a prune statement signed with the host key:
  :mod:`..core.audit.anchors`): it is the **anchor** a verification starts from. A row that no
  statement of its kind covers is never an anchor (:mod:`.chainwalk`).

The catalog is read in the same read snapshot as the live rows, so a reader never sees a
record twice or misses one while a rotation moves records out of the live table; files that
the catalog does not list are ignored by every reader (a rotation that did not commit) and
removed by :func:`recover`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from ...core.audit.chain import (
    ROW_COLUMNS,
    AuditRecord,
)
from ...errors import StoreError
from ..codec import FUNCTION, Codec
from ..db import SEGMENT_MIN_VERSION, close_quietly, connect, store_error
from ..home import ConnectOptions

__all__ = [
    "CATALOG",
    "Sealed",
    "Segment",
    "SegmentLock",
    "count_across",
    "get_across",
    "head_across",
    "iter_records",
    "iter_stored",
    "read_catalog",
    "segment_path",
    "segments_dir",
]

CATALOG: Final = (
    "SELECT first_seq, last_seq, prev_hash, head_hash, note, pruned, export_sha256 "
    "FROM audit_segments ORDER BY first_seq"
)
_SELECT: Final = (
    f"SELECT {', '.join(ROW_COLUMNS[:-1])}, {FUNCTION}(payload) AS payload FROM audit_records"
)
_SELECT_STORED: Final = "SELECT seq, payload FROM audit_records"
_MAX_INT64: Final = 2**63 - 1
#: The lock file every rotation, prune and recovery holds (``flock``: released by the kernel
#: when its holder dies, so a SIGKILLed rotation never leaves it held).
_LOCK: Final = ".lock"


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """One sealed (or pruned) segment: records ``first_seq..last_seq``."""

    first_seq: int
    last_seq: int
    prev_hash: str
    head_hash: str
    note: str
    pruned: bool = False
    export_sha256: str | None = None

    @property
    def name(self) -> str:
        """``<first>-<last>``: its file is ``<name>.db``."""
        return f"{self.first_seq}-{self.last_seq}"

    @property
    def count(self) -> int:
        """How many records it holds."""
        return self.last_seq - self.first_seq + 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "prev_hash": self.prev_hash,
            "head_hash": self.head_hash,
            "pruned": self.pruned,
            "export_sha256": self.export_sha256,
            "checkpoint": self.note,
        }


def segments_dir(db_path: Path) -> Path:
    """``<home>/audit/segments`` for the home database ``<home>/rensei.db``."""
    return Path(db_path).parent / "audit" / "segments"


def segment_path(db_path: Path, segment: Segment) -> Path:
    """Where ``segment``'s file lives."""
    return segments_dir(db_path) / f"{segment.name}.db"


def read_catalog(conn: apsw.Connection) -> tuple[Segment, ...]:
    """Every catalogued segment, oldest first (in the caller's transaction, if any).

    Raises:
        apsw.Error: the table cannot be read.
    """
    return tuple(
        Segment(
            first_seq=int(r[0]),
            last_seq=int(r[1]),
            prev_hash=str(r[2]),
            head_hash=str(r[3]),
            note=str(r[4]),
            pruned=bool(r[5]),
            export_sha256=None if r[6] is None else str(r[6]),
        )
        for r in conn.execute(CATALOG)
    )


class SegmentLock:
    """The segments' lock (``<home>/audit/segments/.lock``, ``flock``). ``acquire(wait=False)``
    returns ``False`` when another process holds it."""

    def __init__(self, db_path: Path) -> None:
        self._path = segments_dir(db_path) / _LOCK
        self._fd: int | None = None

    def acquire(self, *, wait: bool) -> bool:
        """Take the lock (creating the directory); ``False`` if busy and not ``wait``.

        Raises:
            OSError: the directory or lock file cannot be created.
        """
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        """Let go (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


class Sealed:
    """Read-only connections to one log's sealed segment files, opened on first use and
    closed together."""

    def __init__(self, db_path: Path, options: ConnectOptions) -> None:
        self._db_path = Path(db_path)
        self._options = options
        self._conns: dict[str, apsw.Connection] = {}

    def path(self, segment: Segment) -> Path:
        """The segment's file."""
        return segment_path(self._db_path, segment)

    def conn(self, segment: Segment) -> apsw.Connection:
        """A read-only connection to ``segment``'s file.

        Raises:
            StoreError: the file is missing or cannot be opened.
        """
        found = self._conns.get(segment.name)
        if found is None:
            path = self.path(segment)
            if not path.is_file():
                raise StoreError(f"sealed audit segment {segment.name} is missing: {path}")
            o = self._options
            found = connect(
                path,
                write=False,
                busy_timeout_ms=o.busy_timeout_ms,
                vfs=o.vfs,
                min_version=SEGMENT_MIN_VERSION,
            )
            self._conns[segment.name] = found
        return found

    def close(self) -> None:
        """Close every connection opened (idempotent)."""
        for conn in self._conns.values():
            close_quietly(conn)
        self._conns.clear()


# -- reading across segments ----------------------------------------------------------------------


def iter_records(
    live: apsw.Connection,
    sealed: Sealed,
    db_path: Path,
    *,
    start: int = 0,
    stop: int | None = None,
    newest_first: bool = False,
    batch: int = 1_000,
) -> Iterator[AuditRecord]:
    """Every record with ``start <= seq < stop`` across the sealed segments present and the
    live one, in seq order (or newest first), a page of ``batch`` at a time. Each page of the
    live table is read in one snapshot with the catalog, so a rotation committing meanwhile
    moves the next records into a segment the next page finds: nothing is seen twice or missed.

    Raises:
        StoreError: a database read failed or a catalogued segment file is missing.
    """
    for _, rows in _pages(live, sealed, db_path, _SELECT, start, stop, newest_first, batch):
        for row in rows:
            yield AuditRecord.from_row(row)


def iter_stored(
    live: apsw.Connection,
    sealed: Sealed,
    db_path: Path,
    *,
    start: int = 0,
    stop: int | None = None,
    batch: int = 10_000,
) -> Iterator[tuple[Codec, list[tuple[int, bytes]]]]:
    """The records of :func:`iter_records` (oldest first) as pages of ``(seq, stored payload)``
    with the codec that reads that page's payloads (:meth:`.Codec.inflate` gives the canonical
    bytes): the payload as stored, compressed or not, read without the SQL function. Sources
    whose dictionaries are the same share one codec object, so equal stored bytes under the
    same codec are the same canonical bytes.

    Raises:
        StoreError: a database read failed or a catalogued segment file is missing.
    """
    codecs: dict[apsw.Connection, Codec] = {}
    for conn, rows in _pages(live, sealed, db_path, _SELECT_STORED, start, stop, False, batch):
        codec = codecs.get(conn)
        if codec is None:
            try:
                loaded = Codec.load(conn)
            except apsw.Error as e:
                raise store_error("cannot read the audit log", e, db_path) from e
            codec = next((c for c in codecs.values() if c.reads_as(loaded)), loaded)
            codecs[conn] = codec
        yield codec, rows


def _pages(
    live: apsw.Connection,
    sealed: Sealed,
    db_path: Path,
    select: str,
    start: int,
    stop: int | None,
    newest_first: bool,
    batch: int,
) -> Iterator[tuple[apsw.Connection, list[Any]]]:
    """The pages of ``select``'s rows (seq first) for :func:`iter_records`, each with the
    connection it was read from."""
    low = max(0, min(start, _MAX_INT64))
    high = _MAX_INT64 if stop is None else max(0, min(stop, _MAX_INT64))
    order = "DESC" if newest_first else "ASC"
    sql = f"{select} WHERE seq >= ? AND seq < ? ORDER BY seq {order} LIMIT ?"
    while low < high:
        try:
            with live:
                catalog = read_catalog(live)
                present = [s for s in catalog if not s.pruned]
                live_first = 0 if not catalog else catalog[-1].last_seq + 1
                source = _source(present, live_first, low, high, newest_first)
                conn = live
                if source is None:
                    rows = list(live.execute(sql, (max(low, live_first), high, batch)))
            if source is not None:
                lo, hi = max(low, source.first_seq), min(high, source.last_seq + 1)
                conn = sealed.conn(source)
                rows = list(conn.execute(sql, (lo, hi, batch)))
        except apsw.Error as e:
            raise store_error("cannot read the audit log", e, db_path) from e
        if not rows:
            if source is not None:  # nothing (more) in this segment: on to the next one
                if newest_first:
                    high = source.first_seq
                else:
                    low = source.last_seq + 1
                continue
            if newest_first and high > live_first > low:
                high = live_first  # nothing live below high: on to the sealed segments
                continue
            return
        yield conn, rows
        if newest_first:
            high = int(rows[-1][0])
        else:
            low = int(rows[-1][0]) + 1


def _source(
    present: Sequence[Segment], live_first: int, low: int, high: int, newest_first: bool
) -> Segment | None:
    """The sealed segment the next page comes from, or ``None`` for the live table."""
    if newest_first:
        if high > live_first:
            return None
        below = [s for s in present if s.first_seq < high and s.last_seq >= low]
        return below[-1] if below else None
    for s in present:
        if s.last_seq >= low and s.first_seq < high:
            return s
    return None


def get_across(live: apsw.Connection, sealed: Sealed, seq: int) -> tuple[Any, ...] | None:
    """The row with this seq in a sealed segment (the caller looked in the live table).

    Raises:
        apsw.Error, StoreError: a read failed, or the segment file is missing.
    """
    for s in read_catalog(live):
        if not s.pruned and s.first_seq <= seq <= s.last_seq:
            row = sealed.conn(s).execute(f"{_SELECT} WHERE seq = ?", (seq,)).fetchone()
            return None if row is None else tuple(row)
    return None


def count_across(live: apsw.Connection) -> int:
    """Records present: the live table's and every sealed (not pruned) segment's.

    Raises:
        apsw.Error: a read failed.
    """
    with live:
        n = int(live.execute("SELECT count(*) FROM audit_records").get)
        sealed = sum(s.count for s in read_catalog(live) if not s.pruned)
    return n + sealed


def head_across(conn: apsw.Connection) -> tuple[int, str] | None:
    """``(last seq, head hash)`` of the newest segment when the live table is empty, the head
    an append links to; ``None`` when nothing was ever sealed (in the caller's transaction).

    Raises:
        apsw.Error: a read failed.
    """
    row = conn.execute(
        "SELECT last_seq, head_hash FROM audit_segments ORDER BY first_seq DESC LIMIT 1"
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))
