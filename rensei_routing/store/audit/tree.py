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

from collections.abc import Iterator, Sequence
from typing import Any, Final

import apsw

from ...core.audit import merkle
from ...core.audit.merkle import stored_hash_count
from ...core.canonical import SHA256_PREFIX
from ...errors import TreeError
from ..treecheck import (
    CHUNK,
    ROW,
    Compare,
    Extender,
    TreeCheck,
    frontier,
    reader,
    start_failure,
    stored_count,
)
from .segments import Sealed, head_across, read_catalog

__all__ = [
    "CHUNK",
    "Appender",
    "TreeCheck",
    "catch_up",
    "check",
    "conclude",
    "precheck",
    "reader",
    "root_at",
    "size_of",
    "stored_count",
]

_PREFIX: Final = len(SHA256_PREFIX)
_UPSERT: Final = "INSERT OR REPLACE INTO audit_tree(chunk, hashes) VALUES (?, ?)"
#: Records read per query when building or checking the tree.
_PAGE: Final = 10_000


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


class Appender(Extender):
    """Extends the stored tree of ``size`` leaves inside the caller's write transaction:
    :meth:`add` the record hashes in seq order, :meth:`flush` (at least once, before the
    commit) to write the rows."""

    __slots__ = ("_chunk", "_conn")

    def __init__(self, conn: apsw.Connection, size: int) -> None:
        """The frontier and the last row's hashes (rewritten with the new ones) in one read.

        Raises:
            TreeError: the frontier of ``size`` is not stored.
            apsw.Error: the table cannot be read.
        """
        count = stored_hash_count(size)
        partial = list(range(count - count % CHUNK, count))
        got: list[bytes] = []

        def read(indexes: Sequence[int]) -> Sequence[bytes]:
            hashes = reader(conn)([*indexes, *partial])
            got.extend(hashes[len(indexes) :])
            return hashes[: len(indexes)]

        edge = frontier(read, size) if size else [b""] * 64
        super().__init__(edge, size)
        self._conn = conn
        self._chunk = count // CHUNK
        self._pending += b"".join(got)

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

    def flush(self) -> None:
        """Write the rows the hashes added since the last flush fill (and the partial last).

        Raises:
            apsw.Error: the write failed.
        """
        data = self._pending
        if not data:
            return
        rows = [
            (self._chunk + i, bytes(data[off : off + ROW]))
            for i, off in enumerate(range(0, len(data), ROW))
        ]
        self._conn.executemany(_UPSERT, rows)
        full = len(data) // ROW
        self._chunk += full
        self._pending = data[full * ROW :]


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


def precheck(conn: apsw.Connection, start: int, records: int, claimed: int = 0) -> TreeCheck | None:
    """The verdict :func:`check` reaches without recomputing anything (no tree stored: it is
    ``unavailable`` or ``absent``), or ``None``: the hashes must be recomputed. Arguments as
    :func:`check`'s.

    Raises:
        apsw.Error: a read failed.
    """
    if records == 0 or stored_count(conn):
        return None
    if start:
        return TreeCheck(
            state="unavailable",
            size=0,
            detail=f"records 0..{start - 1} were pruned before the tree existed",
        )
    segment = conn.execute("SELECT 1 FROM meta WHERE key = 'segment.first_seq'").get
    if segment is not None:
        return TreeCheck(
            state="absent", size=0, detail="a sealed segment's file: the tree is the home's"
        )
    if not claimed:
        return TreeCheck(
            state="absent",
            size=0,
            detail="not built yet: the next writer to open the log builds it",
        )
    return None


def conclude(conn: apsw.Connection, size: int) -> TreeCheck:
    """Every stored hash of the tree of ``size`` leaves was recomputed and held: ``ok``, unless
    the table stores hashes past them (``tree-overrun``).

    Raises:
        apsw.Error: a read failed.
    """
    count, want = stored_count(conn), stored_hash_count(size)
    if count > want:
        return TreeCheck(
            state="tree-overrun",
            size=size,
            first_bad_seq=size,
            index=want,
            detail=f"the tree stores {count} hashes, {count - want} past the chain's head",
        )
    return TreeCheck(state="ok", size=size)


def check(
    conn: apsw.Connection, sealed: Sealed, start: int, records: int, claimed: int = 0
) -> TreeCheck:
    """Recompute every stored hash from the record hashes present (from ``start``, the first
    seq present; the hashes below it are the pruned stretch's, held by the anchor) and compare
    with the table, for a chain of ``records`` records; in the caller's read transaction, in
    this process (the verify walk does the same in its ranges: :mod:`..treecheck`).
    ``claimed``: the largest size a signed tree-root checkpoint states (an empty table is then
    truncated storage, not a tree not built yet).

    Raises:
        apsw.Error, StoreError: a read failed.
    """
    early = precheck(conn, start, records, claimed)
    if early is not None:
        return early
    try:
        edge = frontier(reader(conn), start) if start else [b""] * 64
    except TreeError as e:
        return start_failure(start, e)
    app = Extender(edge, start)
    index = stored_hash_count(start)
    rows = iter(
        conn.execute(
            "SELECT chunk, hashes FROM audit_tree WHERE chunk >= ? ORDER BY chunk",
            (index // CHUNK,),
        )
    )
    state = Compare(rows, index)
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
    return conclude(conn, app.size)
