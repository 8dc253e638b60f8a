"""The pure Merkle tree (core/audit/merkle.py): roots and proofs against a naive recursive RFC
6962 reference written here, the stored-hash addressing, and every kind of forged proof refused
with its verdict."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    split_stored_hash_index,
    stored_hash_count,
    stored_hash_index,
    stored_hashes_for_record,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from rensei_routing.errors import ProofError, TreeError

# -- the reference: RFC 6962 §2.1, recursively, over the leaf data ---------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: Sequence[bytes]) -> bytes:
    if not d:
        return EMPTY_ROOT
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: Sequence[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [ref_mth(d)]
    k = _k(len(d))
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


def _leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(f"record {i}".encode()).digest() for i in range(n)]


_CACHE: dict[int, tuple[list[bytes], MemoryTree]] = {}


def _tree(n: int) -> tuple[list[bytes], MemoryTree]:
    if n not in _CACHE:
        data = _leaves(n)
        _CACHE[n] = (data, MemoryTree(data))
    return _CACHE[n]


def _flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8 % len(b)] ^= 1 << (bit % 8)
    return bytes(b)


# -- hashing and addressing ------------------------------------------------------------------


def test_hashes_are_rfc6962_domain_separated() -> None:
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    a, b = b"a" * 32, b"b" * 32
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()


def test_stored_hash_index_matches_the_order_hashes_are_written() -> None:
    """Go tlog's numbering: leaf 0, leaf 1, node(1,0), leaf 2, leaf 3, node(1,1), node(2,0)..."""
    expected = [(0, 0), (0, 1), (1, 0), (0, 2), (0, 3), (1, 1), (2, 0), (0, 4), (0, 5), (1, 2)]
    assert [stored_hash_index(lv, n) for lv, n in expected] == list(range(len(expected)))
    assert [split_stored_hash_index(i) for i in range(len(expected))] == expected


@given(st.integers(0, 40), st.integers(0, 2**40))
def test_split_inverts_stored_hash_index(level: int, n: int) -> None:
    assert split_stored_hash_index(stored_hash_index(level, n)) == (level, n)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 7, 8, 9, 100, 255, 256, 257])
def test_memory_tree_stores_exactly_stored_hash_count(size: int) -> None:
    _, tree = _tree(size)
    assert len(tree.hashes) == stored_hash_count(size)
    # every stored hash is the reference hash of the subtree its index names
    data = _leaves(size)
    for i, h in enumerate(tree.hashes):
        level, n = split_stored_hash_index(i)
        assert h == ref_mth(data[n << level : (n + 1) << level])


def test_append_reads_only_the_left_siblings_it_completes() -> None:
    tree = MemoryTree(_leaves(7))
    asked: list[list[int]] = []

    def read(indexes: Sequence[int]) -> list[bytes]:
        asked.append(list(indexes))
        return tree.read(indexes)

    out = stored_hashes_for_record(7, b"x" * 32, read)
    assert len(out) == 4  # leaf 7 completes subtrees of 2, 4 and 8 leaves
    assert asked == [[stored_hash_index(0, 6), stored_hash_index(1, 2), stored_hash_index(2, 0)]]
    assert stored_hashes_for_record(8, b"y" * 32, read) == [leaf_hash(b"y" * 32)]


# -- roots and proofs against the reference --------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_roots_and_proofs_equal_the_reference_and_verify(data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 300), label="size")
    leaves, tree = _tree(size)
    n = data.draw(st.integers(1, size), label="n")
    root = tree.root(n)
    assert root == ref_mth(leaves[:n])
    index = data.draw(st.integers(0, n - 1), label="index")
    proof = tree.inclusion_proof(index, n)
    assert proof == ref_path(index, leaves[:n])
    verify_inclusion(index, n, leaf_hash(leaves[index]), proof, root)
    old = data.draw(st.integers(1, n), label="old")
    cproof = tree.consistency_proof(old, n)
    assert cproof == ref_subproof(old, leaves[:n], True)
    verify_consistency(old, n, tree.root(old), root, cproof)


def test_edge_sizes() -> None:
    leaves, tree = _tree(1)
    assert tree.root() == leaf_hash(leaves[0])
    assert tree.inclusion_proof(0) == []
    verify_inclusion(0, 1, leaf_hash(leaves[0]), [], tree.root())
    assert MemoryTree().root() == EMPTY_ROOT
    assert tree.consistency_proof(0) == []
    verify_consistency(0, 1, EMPTY_ROOT, tree.root(), [])
    verify_consistency(1, 1, tree.root(), tree.root(), [])
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])


def test_proofs_read_logarithmically_many_hashes_in_one_call() -> None:
    _, tree = _tree(300)
    calls: list[int] = []

    def read(indexes: Sequence[int]) -> list[bytes]:
        calls.append(len(indexes))
        return tree.read(indexes)

    inclusion_proof(137, 299, read)
    consistency_proof(77, 299, read)
    tree_hash(299, read)
    assert len(calls) == 3
    assert max(calls) <= 2 * 9


# -- forgeries -------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_altered_inclusion_proof_fails(data: st.DataObject) -> None:
    size = data.draw(st.integers(2, 300), label="size")
    leaves, tree = _tree(size)
    index = data.draw(st.integers(0, size - 1), label="index")
    leaf, root, proof = leaf_hash(leaves[index]), tree.root(), tree.inclusion_proof(index)
    kind = data.draw(
        st.sampled_from(["flip", "index", "size", "extra", "missing", "leaf", "root", "swap"])
    )
    args = [index, size, leaf, list(proof), root]
    if kind == "flip":
        at = data.draw(st.integers(0, len(proof) - 1))
        args[3][at] = _flip(proof[at], data.draw(st.integers(0, 255)))
    elif kind == "index":
        other = data.draw(st.integers(0, size - 1).filter(lambda i: i != index))
        args[0] = other
    elif kind == "size":
        # another size, with that size's true root: the proof is for neither
        if index + 1 == size:
            return
        other = data.draw(st.integers(index + 1, size - 1))
        args[1], args[4] = other, tree.root(other)
    elif kind == "extra":
        args[3].insert(data.draw(st.integers(0, len(proof))), leaves[0])
    elif kind == "missing":
        del args[3][data.draw(st.integers(0, len(proof) - 1))]
    elif kind == "leaf":
        args[2] = leaf_hash(_flip(leaves[index], data.draw(st.integers(0, 255))))
    elif kind == "root":
        args[4] = _flip(root, data.draw(st.integers(0, 255)))
    else:
        if len(proof) < 2 or proof[0] == proof[-1]:
            return
        args[3] = args[3][::-1]
    with pytest.raises(ProofError) as e:
        verify_inclusion(*args)  # type: ignore[arg-type]
    assert e.value.verdict == "inclusion-failed"


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_altered_consistency_proof_fails(data: st.DataObject) -> None:
    size = data.draw(st.integers(2, 300), label="size")
    leaves, tree = _tree(size)
    old = data.draw(st.integers(1, size - 1), label="old")
    proof = tree.consistency_proof(old)
    args = [old, size, tree.root(old), tree.root(), list(proof)]
    kind = data.draw(st.sampled_from(["flip", "old", "new", "extra", "missing", "oldroot"]))
    if kind == "flip":
        at = data.draw(st.integers(0, len(proof) - 1))
        args[4][at] = _flip(proof[at], data.draw(st.integers(0, 255)))
    elif kind == "old":  # another old size, with its true root
        other = data.draw(st.integers(1, size).filter(lambda s: s != old))
        args[0], args[2] = other, tree.root(other)
    elif kind == "new":  # another new size, with its true root
        other = data.draw(st.integers(old, size - 1))
        args[1], args[3] = other, tree.root(other)
    elif kind == "extra":
        args[4].insert(data.draw(st.integers(0, len(proof))), leaves[0])
    elif kind == "missing":
        del args[4][data.draw(st.integers(0, len(proof) - 1))]
    else:
        args[2] = tree.root(old - 1) if old > 1 else _flip(tree.root(old), 3)
    with pytest.raises(ProofError) as e:
        verify_consistency(*args)  # type: ignore[arg-type]
    assert e.value.verdict == "inconsistent"


def test_a_fork_is_inconsistent() -> None:
    """Two logs sharing 10 records then diverging: no proof from one joins the other."""
    a, b = MemoryTree(_leaves(20)), MemoryTree(_leaves(10))
    for i in range(10, 20):
        b.append(hashlib.sha256(f"forged {i}".encode()).digest())
    verify_consistency(10, 20, b.root(10), a.root(), a.consistency_proof(10))
    with pytest.raises(ProofError) as e:
        verify_consistency(12, 20, b.root(12), a.root(), a.consistency_proof(12))
    assert e.value.reason == "root-mismatch"


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda r: verify_inclusion(5, 5, r, [], r), "index-out-of-range"),
        (lambda r: verify_inclusion(-1, 5, r, [], r), "index-out-of-range"),
        (lambda r: verify_inclusion(0, 2, r, [r[:31]], r), "malformed-hash"),
        (lambda r: verify_inclusion(0, 2, r, [r] * 65, r), "wrong-proof-length"),
        (lambda r: verify_consistency(6, 5, r, r, []), "size-order"),
        (lambda r: verify_consistency(5, 5, r, r, [r]), "wrong-proof-length"),
        (lambda r: verify_consistency(5, 5, r, _flip(r, 0), []), "root-mismatch"),
        (lambda r: verify_consistency(0, 5, r, r, []), "root-mismatch"),
        (lambda r: verify_consistency(3, 5, r, r, []), "wrong-proof-length"),
    ],
    ids=[
        "index-at-size",
        "negative-index",
        "short-hash",
        "long-proof",
        "old-above-new",
        "equal-size-nonempty",
        "equal-size-other-root",
        "empty-old-not-empty-root",
        "no-proof",
    ],
)
def test_malformed_inputs_give_their_reason(call: object, reason: str) -> None:
    with pytest.raises(ProofError) as e:
        call(b"\x07" * 32)  # type: ignore[operator]
    assert e.value.reason == reason


def test_a_reader_that_returns_too_few_or_bad_hashes_is_a_tree_error() -> None:
    _, tree = _tree(20)
    with pytest.raises(TreeError):
        tree_hash(20, lambda idx: tree.read(idx)[:-1])
    with pytest.raises(TreeError):
        inclusion_proof(3, 20, lambda idx: [h[:16] for h in tree.read(idx)])
    with pytest.raises(TreeError):
        stored_hashes_for_record(19, b"x" * 32, lambda idx: [])


def test_memory_tree_refuses_sizes_it_does_not_have() -> None:
    _, tree = _tree(5)
    with pytest.raises(ValueError):
        tree.root(6)
    with pytest.raises(ValueError):
        tree.inclusion_proof(5)
    with pytest.raises(ValueError):
        tree.consistency_proof(4, 3)
