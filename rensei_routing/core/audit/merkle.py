"""The audit log's Merkle tree: RFC 6962 hashing as Go's ``golang.org/x/mod/sumdb/tlog`` does it,
the addressing of the hashes a store keeps, proofs over them, and the checks of proofs. Pure: no
I/O, no clock; a store hands its hashes in through a :data:`HashReader` callback.

Hashing. Leaf ``i`` of the log's tree is record ``i``'s 32 record-hash bytes, hashed as
:func:`leaf_hash` = SHA-256(0x00 ‖ data); an inner node is :func:`node_hash` = SHA-256(0x01 ‖
left ‖ right). The tree over ``n`` leaves is RFC 6962's: split at the largest power of two below
``n``. The root of the empty tree is :data:`EMPTY_ROOT`, 32 zero bytes, as Go's
``tlog.TreeHash(0)`` returns (and equal to the chain's genesis hash), not SHA-256 of nothing.

Storage: the *stored hash index*. A store keeps the hash of every complete subtree, each once, in
one append-only sequence numbered from 0 (a SQLite table keyed by an INTEGER). Leaf ``n``'s hash
is written first, then the hash of every subtree that leaf completes, lowest level first; so the
hash at level ``L`` (subtrees of ``2**L`` leaves), position ``k`` sits at
:func:`stored_hash_index` ``(L, k)``, a tree of ``n`` leaves holds :func:`stored_hash_count`
``(n)`` (under ``2n``) hashes, and appending a leaf writes :func:`stored_hashes_for_record`: one
leaf hash and one hash per trailing 1 bit of ``n`` (amortised two, at most ``log2 n + 1``),
reading as many. Nothing is ever rewritten, so a tree of ``n`` leaves is exactly the first
``stored_hash_count(n)`` rows, and every root and proof of a smaller size reads from the same
rows. (Go's tlog numbers its hashes this way; its tiles group the same hashes into files, which
a table does not need.)

Proofs. :func:`tree_hash`, :func:`inclusion_proof` and :func:`consistency_proof` read the
``O(log n)`` complete-subtree hashes they need in one call of the reader, and return RFC 6962
audit paths and consistency proofs (RFC 9162 §2.1.3 and §2.1.4, the same hash lists Go's
``tlog.ProveRecord`` and ``tlog.ProveTree`` return). :func:`verify_inclusion` and
:func:`verify_consistency` need no reader: they check a proof against roots and raise
:class:`~rensei_routing.errors.ProofError`, whose ``verdict`` (``inclusion-failed`` or
``inconsistent``) and ``reason`` are stable codes.

:class:`MemoryTree` keeps the stored hashes in a list: the reference a store is tested against.

Names other modules rely on: :func:`leaf_hash`, :func:`node_hash`, :data:`EMPTY_ROOT`,
:data:`HASH_SIZE`, :data:`HashReader`, :func:`stored_hash_index`, :func:`split_stored_hash_index`,
:func:`stored_hash_count`, :func:`stored_hashes_for_record`, :func:`tree_hash`,
:func:`inclusion_proof`, :func:`consistency_proof`, :func:`verify_inclusion`,
:func:`verify_consistency`, :class:`MemoryTree`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final

from ...errors import ProofError, TreeError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_PROOF_HASHES",
    "HashReader",
    "MemoryTree",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "split_stored_hash_index",
    "stored_hash_count",
    "stored_hash_index",
    "stored_hashes_for_record",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final = 32
#: The root of the tree of no leaves (Go's ``tlog.TreeHash(0)``; the chain's genesis hash).
EMPTY_ROOT: Final = bytes(HASH_SIZE)
#: No proof over a tree of at most 2**63 leaves holds more hashes than this.
MAX_PROOF_HASHES: Final = 64
_MAX_SIZE: Final = 2**63 - 1

#: Reads stored hashes: given stored hash indexes, returns their hashes in the same order.
HashReader = Callable[[Sequence[int]], Sequence[bytes]]


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 ‖ data). The log's leaf data is a record's 32 hash bytes."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 ‖ left ‖ right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


# -- stored hash addressing -------------------------------------------------------------------


def stored_hash_index(level: int, n: int) -> int:
    """Where the hash of subtree ``n`` at ``level`` (leaves ``n*2**level`` up to
    ``(n+1)*2**level``) sits in the stored sequence.

    That subtree's hash is written right after the hash of its last leaf
    (``(n+1)*2**level - 1``) and the ``level - 1`` subtrees below it that the leaf completes;
    leaf ``m`` itself sits after every hash of the leaves before it, ``2m - popcount(m)``.
    """
    if level < 0 or n < 0:
        raise ValueError("level and n must be non-negative")
    last = ((n + 1) << level) - 1
    return 2 * last - last.bit_count() + level


def split_stored_hash_index(index: int) -> tuple[int, int]:
    """The ``(level, n)`` whose :func:`stored_hash_index` is ``index`` (its inverse)."""
    if index < 0:
        raise ValueError("index must be non-negative")
    # the last leaf written at or before index: the largest m with 2m - popcount(m) <= index
    lo, hi = index // 2, index
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if 2 * mid - mid.bit_count() <= index:
            lo = mid
        else:
            hi = mid - 1
    level = index - (2 * lo - lo.bit_count())
    return level, lo >> level


def stored_hash_count(size: int) -> int:
    """How many hashes a tree of ``size`` leaves stores: every hash up to and including those
    the last leaf completes."""
    if size < 0:
        raise ValueError("size must be non-negative")
    if size == 0:
        return 0
    last = size - 1
    trailing_ones = (~last & (last + 1)).bit_length() - 1
    return stored_hash_index(0, last) + 1 + trailing_ones


def stored_hashes_for_record(n: int, data: bytes, read: HashReader) -> list[bytes]:
    """The hashes to append when leaf ``n`` (with leaf data ``data``) arrives, in order, to be
    stored from :func:`stored_hash_index` ``(0, n)`` on: its leaf hash, then the hash of each
    subtree it completes. Reads the left sibling of each of those subtrees (hashes already
    stored: a tree of ``n`` leaves).

    Raises:
        TreeError: ``read`` returned the wrong number of hashes or a hash of the wrong length.
    """
    if n < 0 or n >= _MAX_SIZE:
        raise ValueError("leaf index out of range")
    h = leaf_hash(data)
    siblings: list[int] = []
    level, k = 0, n
    while k & 1:
        siblings.append(stored_hash_index(level, k - 1))
        level, k = level + 1, k >> 1
    out = [h]
    for left in _read(read, siblings):
        h = node_hash(left, h)
        out.append(h)
    return out


def _read(read: HashReader, indexes: Sequence[int]) -> list[bytes]:
    if not indexes:
        return []
    hashes = list(read(indexes))
    if len(hashes) != len(indexes):
        raise TreeError(f"tree storage returned {len(hashes)} hashes for {len(indexes)} indexes")
    for i, h in zip(indexes, hashes, strict=True):
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise TreeError(f"stored tree hash {i} is not {HASH_SIZE} bytes")
    return hashes


# -- subtree plans: which stored hashes a range's hash needs ----------------------------------


def _largest_power_below(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _complete_subtrees(lo: int, hi: int) -> list[int]:
    """Stored indexes of the complete subtrees that cover leaves ``[lo, hi)``, left to right,
    largest first. ``lo`` is a multiple of the first one's width, as every range an RFC 6962
    split produces is; their hashes folded from the right give the range's hash."""
    indexes = []
    while lo < hi:
        width = 1 << ((hi - lo).bit_length() - 1)
        if lo:
            width = min(width, lo & -lo)
        level = width.bit_length() - 1
        indexes.append(stored_hash_index(level, lo >> level))
        lo += width
    return indexes


class _Plan:
    """The ranges whose hashes a proof lists, read in one call and hashed afterwards."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def add(self, lo: int, hi: int) -> None:
        self.ranges.append((lo, hi))

    def hashes(self, read: HashReader) -> list[bytes]:
        plans = [_complete_subtrees(lo, hi) for lo, hi in self.ranges]
        flat = _read(read, [i for p in plans for i in p])
        out, at = [], 0
        for p in plans:
            parts = flat[at : at + len(p)]
            at += len(p)
            h = parts[-1]
            for left in reversed(parts[:-1]):
                h = node_hash(left, h)
            out.append(h)
        return out


def _check_size(size: int, what: str = "tree size") -> None:
    if not 0 <= size <= _MAX_SIZE:
        raise ValueError(f"{what} out of range: {size}")


def tree_hash(size: int, read: HashReader) -> bytes:
    """The root hash of the tree of the first ``size`` leaves (:data:`EMPTY_ROOT` for 0).

    Raises:
        TreeError: the stored hashes ``read`` returned are missing or malformed.
    """
    _check_size(size)
    if size == 0:
        return EMPTY_ROOT
    plan = _Plan()
    plan.add(0, size)
    return plan.hashes(read)[0]


def inclusion_proof(index: int, size: int, read: HashReader) -> list[bytes]:
    """The RFC 6962 audit path of leaf ``index`` in the tree of ``size`` leaves, bottom up.

    Raises:
        ValueError: ``index`` is not below ``size``.
        TreeError: the stored hashes ``read`` returned are missing or malformed.
    """
    _check_size(size)
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    plan = _Plan()
    lo, hi = 0, size
    while hi - lo > 1:
        k = _largest_power_below(hi - lo)
        if index < lo + k:
            plan.add(lo + k, hi)
            hi = lo + k
        else:
            plan.add(lo, lo + k)
            lo += k
    plan.ranges.reverse()
    return plan.hashes(read)


def consistency_proof(old_size: int, new_size: int, read: HashReader) -> list[bytes]:
    """The RFC 6962 consistency proof that the tree of ``old_size`` leaves is a prefix of the
    tree of ``new_size`` (empty when the sizes are equal or ``old_size`` is 0).

    Raises:
        ValueError: ``old_size`` is above ``new_size``.
        TreeError: the stored hashes ``read`` returned are missing or malformed.
    """
    _check_size(old_size, "old size")
    _check_size(new_size, "new size")
    if old_size > new_size:
        raise ValueError(f"old size {old_size} is above new size {new_size}")
    if old_size == 0 or old_size == new_size:
        return []
    plan = _Plan()
    lo, hi, m, complete = 0, new_size, old_size, True
    # SUBPROOF(m, D[lo:hi], complete): each step lists the sibling range, deepest last
    while m != hi - lo:
        k = _largest_power_below(hi - lo)
        if m <= k:
            plan.add(lo + k, hi)
            hi = lo + k
        else:
            plan.add(lo, lo + k)
            lo, m, complete = lo + k, m - k, False
    if not complete:
        plan.add(lo, hi)
    plan.ranges.reverse()
    return plan.hashes(read)


# -- verification -----------------------------------------------------------------------------


def _check_hashes(proof: Sequence[bytes], verdict: str) -> None:
    if len(proof) > MAX_PROOF_HASHES:
        raise ProofError(verdict, "wrong-proof-length", f"proof has {len(proof)} hashes")
    for h in proof:
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise ProofError(verdict, "malformed-hash", f"a proof hash is not {HASH_SIZE} bytes")


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf`` (a :func:`leaf_hash`) is leaf ``index`` of the tree of ``size``
    leaves whose root is ``root``, by the audit path ``proof`` (RFC 9162 §2.1.3.2).

    Raises:
        ProofError: verdict ``inclusion-failed``; reason ``index-out-of-range``,
            ``wrong-proof-length``, ``malformed-hash`` or ``root-mismatch``.
    """
    verdict = "inclusion-failed"
    if not 0 <= index < size <= _MAX_SIZE:
        raise ProofError(verdict, "index-out-of-range", f"leaf {index} is not in a tree of {size}")
    _check_hashes([leaf, root, *proof], verdict)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError(verdict, "wrong-proof-length", "the proof has hashes to spare")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(verdict, "wrong-proof-length", "the proof is missing hashes")
    if r != root:
        raise ProofError(verdict, "root-mismatch", "the proof leads to another root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``old_size`` leaves with root ``old_root`` is a prefix of the tree
    of ``new_size`` with root ``new_root``, by ``proof`` (RFC 9162 §2.1.4.2). Equal sizes need
    an empty proof and equal roots; old size 0 an empty proof and ``old_root`` =
    :data:`EMPTY_ROOT`.

    Raises:
        ProofError: verdict ``inconsistent``; reason ``size-order`` (old above new),
            ``wrong-proof-length``, ``malformed-hash`` or ``root-mismatch``.
    """
    verdict = "inconsistent"
    if not 0 <= old_size <= new_size <= _MAX_SIZE:
        raise ProofError(verdict, "size-order", f"old size {old_size} above new size {new_size}")
    _check_hashes([old_root, new_root, *proof], verdict)
    if old_size == 0 or old_size == new_size:
        if proof:
            raise ProofError(verdict, "wrong-proof-length", "the proof should be empty")
        expected = EMPTY_ROOT if old_size == 0 else new_root
        if old_root != expected:
            raise ProofError(verdict, "root-mismatch", "the old root is not the new tree's")
        return
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a complete subtree: its root starts the path
        path.insert(0, old_root)
    if not path:
        raise ProofError(verdict, "wrong-proof-length", "the proof is missing hashes")
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(verdict, "wrong-proof-length", "the proof has hashes to spare")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(verdict, "wrong-proof-length", "the proof is missing hashes")
    if fr != old_root or sr != new_root:
        raise ProofError(verdict, "root-mismatch", "the proof does not join the two roots")


# -- in memory --------------------------------------------------------------------------------


class MemoryTree:
    """A tree whose stored hashes live in a list: append leaf data, read roots and proofs of
    any size up to the current one. The reference a stored tree is compared with in tests."""

    def __init__(self, leaves: Sequence[bytes] = ()) -> None:
        self.hashes: list[bytes] = []
        self.size = 0
        for data in leaves:
            self.append(data)

    def read(self, indexes: Sequence[int]) -> list[bytes]:
        """The :data:`HashReader` over this tree's stored hashes."""
        return [self.hashes[i] for i in indexes]

    def append(self, data: bytes) -> int:
        """Add a leaf (its data: a record's 32 hash bytes); returns its index."""
        n = self.size
        self.hashes.extend(stored_hashes_for_record(n, data, self.read))
        self.size = n + 1
        return n

    def root(self, size: int | None = None) -> bytes:
        """The root of the tree of ``size`` leaves (default: all)."""
        return tree_hash(self._size(size), self.read)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """:func:`inclusion_proof` of leaf ``index`` in the tree of ``size`` (default: all)."""
        return inclusion_proof(index, self._size(size), self.read)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """:func:`consistency_proof` from ``old_size`` to ``new_size`` (default: all)."""
        return consistency_proof(old_size, self._size(new_size), self.read)

    def _size(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not 0 <= size <= self.size:
            raise ValueError(f"the tree has {self.size} leaves, not {size}")
        return size
