"""The Merkle tree under the audit chain, stored in the home database. Owns the ``audit_tree``
table; the hashing, the addressing and the proofs are :mod:`...core.audit.merkle`'s.

Leaf ``i`` is record ``i``'s 32 record-hash bytes. The table keeps every stored hash of the tree
(the hash of every complete subtree, in stored-hash-index order: a leaf's hash, then the hash
of each subtree it completes) packed :data:`CHUNK` to a row: row ``k`` holds stored hashes
``k * CHUNK`` up to ``(k + 1) * CHUNK``, the last row possibly fewer. So:

* an append writes one or two rows per :data:`CHUNK` / 2 records (the last, partial row is
  rewritten with the new hashes) in the same transaction as the records, computing the new
  hashes from the *frontier* (the right edge's complete subtrees, one per set bit of the size,
  read once per transaction): two SHA-256 per record on average;
* a root or a proof reads ``O(log n)`` stored hashes, at most one row each;
* nothing is ever rewritten below the size, so every root and proof of a smaller size reads
  the same rows; sealing and pruning segments never touch the table: the tree covers every
  record of the chain, across the segments, and a proof of a record whose segment was pruned
  still reads (its leaf and its neighbours' subtrees are stored here).

The tree is behind the chain in one case only: a home made before the tree, until its first
writer opens it (:func:`catch_up` builds it from the record hashes across the segments, checking
seq and links as it goes). A home whose oldest records were pruned before the tree existed
cannot build it (the leaves are gone): its tree stays empty, appends leave it so, its
checkpoints stay of the head-hash form, and verification says ``unavailable``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ...core.audit import merkle
from ...core.audit.merkle import (
    HASH_SIZE,
    HashReader,
    split_stored_hash_index,
    stored_hash_count,
    stored_hash_index,
)
from ...core.canonical import SHA256_PREFIX
from ...errors import TreeError
from .segments import Sealed, head_across, read_catalog

__all__ = [
    "CHUNK",
    "Appender",
    "TreeCheck",
    "catch_up",
    "check",
    "reader",
    "root_at",
    "size_of",
    "stored_count",
]

#: Stored hashes per row of ``audit_tree``.
CHUNK: Final = 32
_ROW: Final = CHUNK * HASH_SIZE
_PREFIX: Final = len(SHA256_PREFIX)
_LAST: Final = "SELECT chunk, length(hashes) FROM audit_tree ORDER BY chunk DESC LIMIT 1"
_UPSERT: Final = "INSERT OR REPLACE INTO audit_tree(chunk, hashes) VALUES (?, ?)"
#: Records read per query when building or checking the tree.
_PAGE: Final = 10_000


def stored_count(conn: apsw.Connection) -> int:
    """How many stored hashes the table holds, by its last row (in the caller's transaction).

    Raises:
        apsw.Error: the table cannot be read.
    """
    row = conn.execute(_LAST).fetchone()
    return 0 if row is None else int(row[0]) * CHUNK + int(row[1]) // HASH_SIZE


def size_of(count: int) -> int:
    """The largest tree size whose stored hashes number at most ``count``: the tree's size
    when ``count`` is exactly ``stored_hash_count(size)``."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if stored_hash_count(mid) <= count:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reader(conn: apsw.Connection) -> HashReader:
    """The :data:`~...core.audit.merkle.HashReader` over ``conn``'s stored hashes (one row read
    per distinct row needed), in the caller's transaction. A hash not stored raises
    :class:`TreeError`."""

    def read(indexes: Sequence[int]) -> list[bytes]:
        rows: dict[int, bytes] = {}
        for k in sorted({i // CHUNK for i in indexes}):
            row = conn.execute("SELECT hashes FROM audit_tree WHERE chunk = ?", (k,)).fetchone()
            rows[k] = b"" if row is None else bytes(row[0])
        out = []
        for i in indexes:
            at = (i % CHUNK) * HASH_SIZE
            h = rows[i // CHUNK][at : at + HASH_SIZE]
            if len(h) != HASH_SIZE:
                level, n = split_stored_hash_index(i)
                raise TreeError(f"the tree has no stored hash {i} (level {level}, node {n})")
            out.append(h)
        return out

    return read


def root_at(conn: apsw.Connection, size: int) -> bytes | None:
    """The tree's root at ``size`` records, or ``None`` when the stored tree does not cover
    them (a checkpoint of that size is then of the head-hash form); in the caller's
    transaction.

    Raises:
        apsw.Error: the table cannot be read.
    """
    if size_of(stored_count(conn)) < size:
        return None
    try:
        return merkle.tree_hash(size, reader(conn))
    except TreeError:
        return None


def leaf_data(record_hash: str) -> bytes:
    """A record's leaf data: the 32 bytes of its ``sha256:<hex>`` record hash."""
    return bytes.fromhex(record_hash[_PREFIX:])


def _frontier(read: HashReader, size: int) -> list[bytes]:
    """The right edge of the tree of ``size`` leaves: at level ``L`` (for each set bit ``L`` of
    ``size``) the hash of the complete subtree ending at leaf ``size - 1``."""
    levels = [lv for lv in range(size.bit_length()) if size >> lv & 1]
    hashes = read([stored_hash_index(lv, (size >> lv) - 1) for lv in levels])
    edge = [b""] * 64
    for lv, h in zip(levels, hashes, strict=True):
        edge[lv] = h
    return edge


class Appender:
    """Extends the stored tree of ``size`` leaves inside the caller's write transaction:
    :meth:`add` the record hashes in seq order, :meth:`flush` (at least once, before the
    commit) to write the rows."""

    __slots__ = ("_chunk", "_conn", "_edge", "_pending", "size")

    def __init__(self, conn: apsw.Connection, size: int, *, detached: bool = False) -> None:
        """``detached``: never written (:meth:`take` the hashes instead of :meth:`flush`).

        Raises:
            TreeError: the frontier of ``size`` is not stored.
            apsw.Error: the table cannot be read.
        """
        self._conn = conn
        self.size = size
        count = stored_hash_count(size)
        self._chunk = count // CHUNK
        self._edge = _frontier(reader(conn), size) if size else [b""] * 64
        self._pending = bytearray()
        partial = count % CHUNK
        if partial and not detached:  # the last row's hashes, rewritten with the new ones
            self._pending += b"".join(reader(conn)(range(count - partial, count)))

    def take(self) -> bytes:
        """The stored hashes added since the last call (a detached appender's output)."""
        out, self._pending = bytes(self._pending), bytearray()
        return out

    @classmethod
    def at(cls, conn: apsw.Connection, size: int) -> Appender | None:
        """An appender when the stored tree has exactly ``size`` leaves (the chain's next
        seq); ``None`` when it has not (a tree that cannot be built, or one damaged: that is
        verification's to report; the records are appended without it).

        Raises:
            apsw.Error: the table cannot be read.
        """
        if stored_count(conn) != stored_hash_count(size):
            return None
        try:
            return cls(conn, size)
        except TreeError:
            return None

    def add(self, record_hashes: Iterable[str]) -> None:
        """Add the leaves of these records (the next seqs, in order)."""
        n, edge, out, sha = self.size, self._edge, self._pending, hashlib.sha256
        for rh in record_hashes:
            h = sha(b"\x00" + bytes.fromhex(rh[_PREFIX:])).digest()
            out += h
            level, m = 0, n
            while m & 1:
                h = sha(b"\x01" + edge[level] + h).digest()
                out += h
                level += 1
                m >>= 1
            edge[level] = h
            n += 1
        self.size = n

    def flush(self) -> None:
        """Write the rows the hashes added since the last flush fill (and the partial last).

        Raises:
            apsw.Error: the write failed.
        """
        data = self._pending
        if not data:
            return
        rows = [
            (self._chunk + i, bytes(data[off : off + _ROW]))
            for i, off in enumerate(range(0, len(data), _ROW))
        ]
        self._conn.executemany(_UPSERT, rows)
        full = len(data) // _ROW
        self._chunk += full
        self._pending = data[full * _ROW :]


# -- reading the record hashes across segments ----------------------------------------------------


def record_hashes(
    conn: apsw.Connection, sealed: Sealed, start: int
) -> Iterator[tuple[int, str, str]]:
    """``(seq, prev_hash, record_hash)`` of every record present from ``start``, in seq order,
    across the sealed segments and the live table, in the caller's read transaction on ``conn``.

    Raises:
        apsw.Error, StoreError: a read failed, or a sealed segment's file is missing.
    """
    sql = (
        "SELECT seq, prev_hash, record_hash FROM audit_records WHERE seq >= ? AND seq <= ? "
        "ORDER BY seq LIMIT ?"
    )
    sources: list[tuple[apsw.Connection, int, int]] = []
    live_first = 0
    for s in read_catalog(conn):
        live_first = s.last_seq + 1
        if not s.pruned and s.last_seq >= start:
            sources.append((sealed.conn(s), s.first_seq, s.last_seq))
    sources.append((conn, live_first, 2**63 - 1))
    for source, lo, hi in sources:
        at = max(lo, start)
        while True:
            rows: list[Any] = source.execute(sql, (at, hi, _PAGE)).fetchall()
            for seq, prev, rh in rows:
                yield int(seq), str(prev), str(rh)
            if len(rows) < _PAGE:
                break
            at = int(rows[-1][0]) + 1


def catch_up(conn: apsw.Connection, sealed: Sealed) -> int:
    """Build the stored tree up to the chain's head when it is behind (a home made before the
    tree): the leaves from the tree's size on, read across the segments, each record following
    the one before it (its seq, its ``prev_hash``); a break stops the build there (verification
    names it). Nothing happens when the tree is level with the head, ahead of it, ragged, or when
    the records it lacks were pruned. Returns the tree's size. One write transaction on ``conn``
    (a writer), taken only when there is something to build.

    Raises:
        apsw.Error, StoreError: a read or the write failed (nothing written).
    """
    with conn:
        size, behind = _behind(conn)
    if not behind:
        return size
    with conn:  # BEGIN IMMEDIATE: no append moves the head meanwhile
        size, behind = _behind(conn)
        if not behind:
            return size
        app = Appender(conn, size)
        prev: str | None = None  # the link of the first is the chain walk's to check
        expected = size
        batch: list[str] = []
        for seq, link, rh in record_hashes(conn, sealed, size):
            if seq != expected or (prev is not None and link != prev):
                break
            batch.append(rh)
            prev, expected = rh, seq + 1
            if len(batch) >= _PAGE:
                app.add(batch)
                app.flush()
                batch = []
        app.add(batch)
        app.flush()
    return app.size


def _behind(conn: apsw.Connection) -> tuple[int, bool]:
    """The tree's size and whether :func:`catch_up` has leaves to add."""
    count = stored_count(conn)
    size = size_of(count)
    if stored_hash_count(size) != count:
        return size, False  # ragged: verification reports it
    head = conn.execute("SELECT max(seq) FROM audit_records").get
    if head is None:
        across = head_across(conn)
        head = None if across is None else across[0]
    following = 0 if head is None else int(head) + 1
    if size >= following:
        return size, False
    if any(s.pruned and s.last_seq >= size for s in read_catalog(conn)):
        return size, False  # the leaves it lacks are gone
    return size, True


# -- verification ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeCheck:
    """What :func:`check` found: ``state`` ``ok`` (every stored hash recomputed from the record
    hashes present and equal), ``unavailable`` (no tree: its oldest leaves were pruned before
    it existed), or a failure: ``tree-truncated`` (hashes missing, from ``first_bad_seq``'s
    leaf), ``tree-node-mismatch`` (the stored hash ``index`` at ``level``, ``node`` is not the
    one recomputed; ``first_bad_seq`` is the leaf it was written with), ``tree-overrun``
    (hashes stored past the chain's head)."""

    state: str
    size: int
    first_bad_seq: int | None = None
    index: int | None = None
    level: int | None = None
    node: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """The tree holds (or there is none to hold)."""
        return self.state in ("ok", "unavailable")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "state": self.state,
            "size": self.size,
            "first_bad_seq": self.first_bad_seq,
            "node": None
            if self.index is None
            else {"index": self.index, "level": self.level, "n": self.node},
            "detail": self.detail,
        }


def check(conn: apsw.Connection, sealed: Sealed, start: int, records: int) -> TreeCheck:
    """Recompute every stored hash from the record hashes present (from ``start``, the first
    seq present; the hashes below it are the pruned stretch's, held by the anchor) and compare
    with the table, for a chain of ``records`` records; in the caller's read transaction.

    Raises:
        apsw.Error, StoreError: a read failed.
    """
    count = stored_count(conn)
    if count == 0 and records and start:
        return TreeCheck(
            state="unavailable",
            size=0,
            detail=f"records 0..{start - 1} were pruned before the tree existed",
        )
    try:
        app = Appender(conn, start, detached=True)
    except TreeError as e:
        return _mismatch_at(stored_hash_index(0, start - 1), str(e), "tree-truncated")
    chunk = stored_hash_count(start) // CHUNK
    rows = iter(
        conn.execute(
            "SELECT chunk, hashes FROM audit_tree WHERE chunk >= ? ORDER BY chunk", (chunk,)
        )
    )
    state = _Compare(rows, chunk, stored_hash_count(start))
    batch: list[str] = []
    for _seq, _link, rh in record_hashes(conn, sealed, start):
        batch.append(rh)
        if len(batch) >= _PAGE:
            app.add(batch)
            batch = []
            bad = state.feed(app.take())
            if bad is not None:
                return bad
    app.add(batch)
    bad = state.feed(app.take())
    if bad is not None:
        return bad
    want = stored_hash_count(app.size)
    if count > want:
        return TreeCheck(
            state="tree-overrun",
            size=app.size,
            first_bad_seq=app.size,
            index=want,
            detail=f"the tree stores {count} hashes, {count - want} past the chain's head",
        )
    return TreeCheck(state="ok", size=app.size)


def _mismatch_at(index: int, detail: str, state: str) -> TreeCheck:
    level, n = split_stored_hash_index(index)
    seq = ((n + 1) << level) - 1
    return TreeCheck(
        state=state, size=seq, first_bad_seq=seq, index=index, level=level, node=n, detail=detail
    )


class _Compare:
    """The stored rows, compared with the recomputed hashes as they come."""

    def __init__(self, rows: Iterator[Any], chunk: int, index: int) -> None:
        self._rows = rows
        self._next = chunk
        self._index = index  # the stored index of the next hash to compare
        self._stored = bytearray()
        self._offset = (index % CHUNK) * HASH_SIZE

    def feed(self, computed: bytes) -> TreeCheck | None:
        """Compare ``computed`` (the next stored hashes); a failure, or ``None``."""
        while len(self._stored) - self._offset < len(computed):
            row = next(self._rows, None)
            if row is None or int(row[0]) != self._next:
                break
            self._stored += bytes(row[1])
            self._next += 1
        at, stored = self._offset, self._stored
        n = min(len(computed), len(stored) - at)
        if computed[:n] != stored[at : at + n]:
            for i in range(0, n, HASH_SIZE):
                if computed[i : i + HASH_SIZE] != stored[at + i : at + i + HASH_SIZE]:
                    index = self._index + i // HASH_SIZE
                    level, node = split_stored_hash_index(index)
                    return _mismatch_at(
                        index,
                        f"stored hash {index} (level {level}, node {node}) is not the hash "
                        "recomputed from the records",
                        "tree-node-mismatch",
                    )
        if n < len(computed):
            index = self._index + n // HASH_SIZE
            return _mismatch_at(
                index, f"the tree's storage ends before stored hash {index}", "tree-truncated"
            )
        self._index += n // HASH_SIZE
        whole = (at + n) // _ROW * _ROW
        self._stored = stored[whole:]
        self._offset = at + n - whole
        return None
