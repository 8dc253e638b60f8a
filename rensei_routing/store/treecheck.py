"""Reading and checking the stored Merkle tree (the ``audit_tree`` table; its layout and its
writes are :mod:`.audit.tree`'s): the row layout, reading stored hashes (every row a read needs
in one query), hashing the leaves a stretch of records adds, and comparing what is recomputed
with the table as it comes. Owns no table and writes nothing.

A stretch of leaves ``[lo, hi)`` is checked on its own (:class:`RangeCheck`): the hashes it
adds are computed from its records' hashes and the stored *frontier* at ``lo`` (the complete
subtrees ending at leaf ``lo - 1``, read from the table), and compared with the stored hashes
``stored_hash_count(lo)`` up to ``stored_hash_count(hi)``. So the verify ranges of
:mod:`.parallel` check the tree where they read the rows, each record hash read once. Checked in
seq order, the first stretch that fails names exactly the stored hash one walk from the first
leaf names: every stored hash a stretch reads lies below its own, so the stretches before it
(which held) proved them; a stretch can only be misled by a hash an earlier stretch refuses.

Kept apart from :mod:`.audit.tree` so a verify worker process imports only this, the core and
apsw.
"""

from __future__ import annotations

import binascii
import collections
import functools
import hashlib
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ..core.audit.merkle import (
    HASH_SIZE,
    HashReader,
    split_stored_hash_index,
    stored_hash_count,
    stored_hash_index,
)
from ..core.canonical import SHA256_PREFIX
from ..errors import TreeError

__all__ = [
    "CHUNK",
    "Extender",
    "RangeCheck",
    "RangeTree",
    "TreeCheck",
    "frontier",
    "mismatch_at",
    "reader",
    "stored_count",
]

#: Stored hashes per row of ``audit_tree``.
CHUNK: Final = 32
ROW: Final = CHUNK * HASH_SIZE
_PREFIX: Final = len(SHA256_PREFIX)
#: The largest subtree :meth:`Extender.add` hashes level by level at once (256 leaves): the
#: objects one call holds at its peak (hash objects, digests, stored bytes: about 150 KiB of
#: Python heap) stay in a core's own cache beside the walk reading the rows, where 4,096
#: leaves' (about 2.5 MiB) pushed the walk's out at every batch.
MAX_BLOCK_HEIGHT: Final = 8
_SHA: Final = hashlib.sha256
_DIGEST: Final = type(hashlib.sha256()).digest
#: SHA-256 of one block (a leaf's 33 bytes): the interpreter's own implementation, when it has
#: one, costs less than OpenSSL's context set-up for so little data (two blocks, a node's 65
#: bytes, cost less in OpenSSL). The same digest either way.
try:
    from _sha256 import sha256 as _SHA_BLOCK  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - 3.12 renamed it _sha2; a build may have neither
    try:
        from _sha2 import sha256 as _SHA_BLOCK  # type: ignore[import-not-found]
    except ImportError:
        _SHA_BLOCK = hashlib.sha256
_BLOCK_DIGEST: Final = type(_SHA_BLOCK()).digest
_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"
#: Hash objects that have taken a leaf's and a node's prefix byte: each leaf or node hashed by
#: :meth:`Extender.add` starts as a copy of one (no concatenation, no constructor's look-up of
#: the algorithm by name).
_LEAF_START: Final = _SHA_BLOCK(_LEAF)
_NODE_START: Final = hashlib.sha256(_NODE)
_BLOCK_COPY: Final = type(_LEAF_START).copy
_BLOCK_UPDATE: Final = type(_LEAF_START).update
_COPY: Final = type(_NODE_START).copy
_UPDATE: Final = type(_NODE_START).update
#: Runs an iterator to its end, keeping nothing (the ``update`` calls above return ``None``).
_drain: Final[Callable[[Iterable[object]], None]] = collections.deque[object](maxlen=0).extend
#: A record hash's hex digits: ``sha256:`` dropped (a method of ``str``, so anything else is
#: refused), then read by ``a2b_hex``.
_DROP: Final = str.removeprefix
_PREFIXES: Final = itertools.repeat(SHA256_PREFIX)
_UNHEX: Final = binascii.a2b_hex
_LAST: Final = "SELECT chunk, length(hashes) FROM audit_tree ORDER BY chunk DESC LIMIT 1"
#: Rows named in one ``IN (...)`` (a proof or a frontier needs at most ~130).
_IN_LIMIT: Final = 500

#: What a stretch's check sends back: ``("ok", leaves, "")``, ``("unchecked", None, why)``
#: (a record hash was not one: the chain walk refuses that record), or a failure
#: ``(state, stored hash index, detail)`` (see :class:`TreeCheck`).
RangeTree = tuple[str, int | None, str]


def stored_count(conn: apsw.Connection) -> int:
    """How many stored hashes the table holds, by its last row (in the caller's transaction).

    Raises:
        apsw.Error: the table cannot be read.
    """
    row = conn.execute(_LAST).fetchone()
    return 0 if row is None else int(row[0]) * CHUNK + int(row[1]) // HASH_SIZE


def reader(conn: apsw.Connection) -> HashReader:
    """The :data:`~...core.audit.merkle.HashReader` over ``conn``'s stored hashes, in the
    caller's transaction: every row a call needs read in one query. A hash not stored raises
    :class:`TreeError`."""

    def read(indexes: Sequence[int]) -> list[bytes]:
        wanted = sorted({i // CHUNK for i in indexes})
        rows: dict[int, bytes] = {}
        for at in range(0, len(wanted), _IN_LIMIT):
            part = wanted[at : at + _IN_LIMIT]
            marks = ",".join("?" * len(part))
            sql = f"SELECT chunk, hashes FROM audit_tree WHERE chunk IN ({marks})"
            for k, hashes in conn.execute(sql, part):
                rows[int(k)] = bytes(hashes)
        out = []
        for i in indexes:
            at = (i % CHUNK) * HASH_SIZE
            h = rows.get(i // CHUNK, b"")[at : at + HASH_SIZE]
            if len(h) != HASH_SIZE:
                level, n = split_stored_hash_index(i)
                raise TreeError(f"the tree has no stored hash {i} (level {level}, node {n})")
            out.append(h)
        return out

    return read


def frontier(read: HashReader, size: int) -> list[bytes]:
    """The right edge of the tree of ``size`` leaves: at level ``L`` (for each set bit ``L`` of
    ``size``) the hash of the complete subtree ending at leaf ``size - 1``.

    Raises:
        TreeError: one of them is not stored.
    """
    levels = [lv for lv in range(size.bit_length()) if size >> lv & 1]
    hashes = read([stored_hash_index(lv, (size >> lv) - 1) for lv in levels])
    edge = [b""] * 64
    for lv, h in zip(levels, hashes, strict=True):
        edge[lv] = h
    return edge


class Extender:
    """The stored hashes leaves add to a tree of ``size`` leaves whose right edge is ``edge``
    (:func:`frontier`): :meth:`add` record hashes in seq order, :meth:`take` what they added.

    A batch is hashed a level at a time, not a leaf at a time: it is cut into the aligned
    complete subtrees it fills (:func:`blocks`), each subtree's nodes are hashed level by level
    with no Python code per node, and written in stored order (:func:`postorder`); the root of
    each then joins the edge as one leaf's hash would. :meth:`add_plain`, the walk leaf by leaf,
    is the reference the tests hold it to."""

    __slots__ = ("_edge", "_pending", "size")

    def __init__(self, edge: list[bytes], size: int) -> None:
        self._edge = edge
        self._pending = bytearray()
        self.size = size

    def add(self, record_hashes: Iterable[str]) -> None:
        """Add the leaves of these records (the next seqs, in order). Nothing is added when
        one is refused.

        Raises:
            ValueError: a record hash is not ``sha256:`` and hex digits.
            TypeError: a record hash is not a string.
        """
        hashes = record_hashes if type(record_hashes) is list else list(record_hashes)
        if len(hashes) == 1:  # one record (a live append's): its leaf and the nodes it completes
            leaf = _BLOCK_COPY(_LEAF_START)
            _BLOCK_UPDATE(leaf, _UNHEX(_DROP(hashes[0], SHA256_PREFIX)))
            self._join(_BLOCK_DIGEST(leaf), 0)
            return
        leaves = list(map(_BLOCK_COPY, itertools.repeat(_LEAF_START, len(hashes))))
        _drain(map(_BLOCK_UPDATE, leaves, map(_UNHEX, map(_DROP, hashes, _PREFIXES))))
        level = list(map(_BLOCK_DIGEST, leaves))
        out = self._pending
        at = 0
        for height in blocks(self.size, len(level)):
            width = 1 << height
            if height == 0:
                h = level[at]
            else:
                nodes = level[at : at + width]
                row = nodes
                for _ in range(height):
                    row = parents(row)
                    nodes += row
                out += b"".join(_in_postorder(height)(nodes))
                h = row[0]
            self._join(h, height)  # the subtree's root joins the edge
            at += width

    def _join(self, h: bytes, height: int) -> None:
        """The root ``h`` of the complete subtree of ``2**height`` leaves that starts at leaf
        ``size`` joins the edge, as its last leaf completes it: the nodes it completes are
        hashed and stored after it (a leaf is stored here, a larger subtree by the caller)."""
        out, edge = self._pending, self._edge
        if not height:
            out += h
        lv, m = height, self.size >> height
        while m & 1:
            h = _SHA(_NODE + edge[lv] + h).digest()
            out += h
            lv += 1
            m >>= 1
        edge[lv] = h
        self.size += 1 << height

    def add_plain(self, record_hashes: Iterable[str]) -> None:
        """:meth:`add`, one leaf at a time (the reference for it).

        Raises:
            ValueError: a record hash is not ``sha256:`` and 64 hex digits.
        """
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

    def take(self) -> bytes:
        """The stored hashes added since the last call."""
        out, self._pending = bytes(self._pending), bytearray()
        return out


def parents(row: list[bytes]) -> list[bytes]:
    """The hashes of the nodes over ``row`` (an even number of hashes, pairs in order), with
    no Python code and no concatenation per node: each node's hash object is a copy of one
    that has taken the ``0x01`` prefix, then takes its left child, then its right."""
    nodes = list(map(_COPY, itertools.repeat(_NODE_START, len(row) >> 1)))
    _drain(map(_UPDATE, nodes, row[::2]))
    _drain(map(_UPDATE, nodes, row[1::2]))
    return list(map(_DIGEST, nodes))


def blocks(size: int, count: int) -> list[int]:
    """The heights of the aligned complete subtrees (at most :data:`MAX_BLOCK_HEIGHT`) that
    leaves ``size`` up to ``size + count`` fill, in order: each starts at a multiple of its
    width."""
    out = []
    while count > 0:
        height = min(MAX_BLOCK_HEIGHT, count.bit_length() - 1)
        if size:
            height = min(height, (size & -size).bit_length() - 1)
        out.append(height)
        size += 1 << height
        count -= 1 << height
    return out


@functools.cache
def _in_postorder(height: int) -> Callable[[list[bytes]], tuple[bytes, ...]]:
    """The nodes of a complete subtree of ``2**height`` leaves (listed level by level) in
    stored order, picked by one C call (:func:`postorder`)."""
    return operator.itemgetter(*postorder(height))


@functools.cache
def postorder(height: int) -> tuple[int, ...]:
    """Where each stored hash of a complete subtree of ``2**height`` leaves sits in the list
    of its nodes level by level (its leaves, then level 1, and so on up to its root): the
    stored order, each leaf followed by the nodes it completes."""
    starts = [0]
    for lv in range(height):
        starts.append(starts[-1] + (1 << (height - lv)))
    order: list[int] = []
    for p in range(1 << height):
        order.append(p)
        lv = 0
        while p >> lv & 1 and lv < height:
            lv += 1
            order.append(starts[lv] + (p >> lv))
    return tuple(order)


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeCheck:
    """What a check of the tree found: ``state`` ``ok`` (every stored hash recomputed from the
    record hashes present and equal), ``unavailable`` (no tree: its oldest leaves were pruned
    before it existed), ``absent`` (no tree yet, and no signed tree-root checkpoint says there
    was one; or a sealed segment's file verified on its own), or a failure: ``tree-truncated``
    (hashes missing, from ``first_bad_seq``'s leaf), ``tree-node-mismatch`` (the stored hash
    ``index`` at ``level``, ``node`` is not the one recomputed; ``first_bad_seq`` is the leaf
    it was written with), ``tree-overrun`` (hashes stored past the chain's head)."""

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
        return self.state in ("ok", "unavailable", "absent")

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


def mismatch_at(index: int, detail: str, state: str) -> TreeCheck:
    """The failure ``state`` at stored hash ``index`` (its leaf, level and node named)."""
    level, n = split_stored_hash_index(index)
    seq = ((n + 1) << level) - 1
    return TreeCheck(
        state=state, size=seq, first_bad_seq=seq, index=index, level=level, node=n, detail=detail
    )


class Compare:
    """The stored rows, compared with the recomputed hashes as they come."""

    def __init__(self, rows: Iterator[Any], index: int) -> None:
        self._rows = rows
        self._next = index // CHUNK
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
                    return mismatch_at(
                        index,
                        f"stored hash {index} (level {level}, node {node}) is not the hash "
                        "recomputed from the records",
                        "tree-node-mismatch",
                    )
        if n < len(computed):
            index = self._index + n // HASH_SIZE
            return mismatch_at(
                index, f"the tree's storage ends before stored hash {index}", "tree-truncated"
            )
        self._index += n // HASH_SIZE
        whole = (at + n) // ROW * ROW
        self._stored = stored[whole:]
        self._offset = at + n - whole
        return None


def start_failure(lo: int, error: TreeError) -> TreeCheck:
    """The frontier at ``lo`` could not be read: the tree is truncated at leaf ``lo - 1``."""
    return mismatch_at(stored_hash_index(0, lo - 1), str(error), "tree-truncated")


class RangeCheck:
    """The check of the stored hashes leaves ``lo`` onwards add (see the module docstring), in
    the caller's read transaction on ``conn`` (the database holding ``audit_tree``): :meth:`add`
    record hashes in seq order, then :meth:`outcome`; :meth:`close` always.

    Leaves are hashed :data:`BATCH` at a time, each batch ending at a multiple of
    :data:`BATCH` (the first one at the first such leaf past ``lo``): then every later batch is
    one aligned block of :meth:`Extender.add`, however the range's ``lo`` falls, not a run of
    small blocks (and their Python code) each time."""

    #: Record hashes hashed and compared at a time: one largest block (see
    #: :data:`MAX_BLOCK_HEIGHT`), what the walk hands on at a time.
    BATCH: Final = 1 << MAX_BLOCK_HEIGHT

    def __init__(self, conn: apsw.Connection, lo: int) -> None:
        self.leaves = 0
        self._batch: list[str] = []
        #: Record hashes the next batch takes: up to the next multiple of :data:`BATCH`.
        self._room = self.BATCH - lo % self.BATCH
        self._failed: RangeTree | None = None
        self._cursor: apsw.Cursor | None = None
        try:
            edge = frontier(reader(conn), lo) if lo else [b""] * 64
        except TreeError as e:
            bad = start_failure(lo, e)
            self._failed = (bad.state, bad.index, bad.detail)
            return
        self._extender = Extender(edge, lo)
        start = stored_hash_count(lo)
        self._cursor = conn.execute(
            "SELECT chunk, hashes FROM audit_tree WHERE chunk >= ? ORDER BY chunk",
            (start // CHUNK,),
        )
        self._compare = Compare(iter(self._cursor), start)

    def add(self, record_hash: Any) -> None:
        """One more record's hash (the next seq)."""
        self._batch.append(record_hash)
        if len(self._batch) >= self._room:
            self._flush_whole()

    def add_many(self, record_hashes: Iterable[Any]) -> None:
        """More records' hashes (the next seqs, in order): :meth:`add` of each."""
        self._batch.extend(record_hashes)
        if len(self._batch) >= self._room:
            self._flush_whole()

    def _flush_whole(self) -> None:
        """Hash and compare every whole batch held, keeping the rest for the next."""
        held = self._batch
        while len(held) >= self._room:
            self._batch, held = held[: self._room], held[self._room :]
            self._room = self.BATCH
            self._flush()
        self._batch = held

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if self._failed is not None or not batch:
            return
        try:
            self._extender.add(batch)
        except (ValueError, TypeError) as e:
            self._failed = ("unchecked", None, f"a record hash is not one: {e}")
            return
        self.leaves += len(batch)
        bad = self._compare.feed(self._extender.take())
        if bad is not None:
            self._failed = (bad.state, bad.index, bad.detail)

    def outcome(self) -> RangeTree:
        """What the stretch found (after its last record)."""
        self._flush()
        return ("ok", self.leaves, "") if self._failed is None else self._failed

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close(True)
            self._cursor = None


def failure(outcome: RangeTree) -> TreeCheck:
    """The :class:`TreeCheck` of a stretch's failure outcome."""
    state, index, detail = outcome
    assert index is not None
    return mismatch_at(index, detail, state)
