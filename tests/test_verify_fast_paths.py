"""The verify walk's batch forms against their row-by-row references: the tree's stored hashes
added a level at a time (:meth:`.treecheck.Extender.add` against ``add_plain`` and the core's
:class:`~rensei_routing.core.audit.merkle.MemoryTree`), payloads inflated a batch at a time
(:meth:`.Codec.inflate_many` against ``inflate``, for every kind of stored value a damaged
database can hold) and the rows of a walk put back together from columns (``_inflated``
against ``_inflated_plain``, tree outcome included). Real SQLite, real zstd frames."""

from __future__ import annotations

import hashlib
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit import merkle
from rensei_routing.core.audit.chain import GENESIS_HASH, walk_range
from rensei_routing.store import parallel, treecheck
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import MAX_PAYLOAD_BYTES, ZSTD_MAGIC, Codec, shipped_dictionary
from rensei_routing.store.db import connect

T = "2026-12-02T12:00:00.000000Z"


def _hashes(count: int) -> list[str]:
    return ["sha256:" + hashlib.sha256(str(i).encode()).hexdigest() for i in range(count)]


HASHES = _hashes(9_000)


def _edge_at(size: int) -> list[bytes]:
    plain = treecheck.Extender([b""] * 64, 0)
    plain.add_plain(HASHES[:size])
    return list(plain._edge)


@settings(max_examples=60, deadline=None)
@given(
    start=st.one_of(st.sampled_from([0, 1, 2, 3, 4095, 4096, 4097]), st.integers(0, 5_000)),
    cuts=st.lists(
        st.one_of(st.sampled_from([0, 1, 2, 31, 4096, 4097]), st.integers(0, 600)),
        max_size=5,
    ),
)
def test_level_at_a_time_adds_exactly_the_hashes_leaf_by_leaf_adds(
    start: int, cuts: list[int]
) -> None:
    edge = _edge_at(start)
    fast = treecheck.Extender(list(edge), start)
    plain = treecheck.Extender(list(edge), start)
    at = start
    for size in cuts:
        batch = HASHES[at : at + size]
        at += len(batch)
        fast.add(batch)
        plain.add_plain(batch)
        assert fast.take() == plain.take()
        assert fast.size == plain.size == at
    # the edge each leaves is the one the next leaf reads
    fast.add(HASHES[at : at + 3])
    plain.add_plain(HASHES[at : at + 3])
    assert fast.take() == plain.take()


def test_level_at_a_time_stores_the_core_trees_hashes() -> None:
    reference = merkle.MemoryTree()
    for rh in HASHES[:5_000]:
        reference.append(bytes.fromhex(rh[7:]))
    fast = treecheck.Extender([b""] * 64, 0)
    for lo, hi in ((0, 1), (1, 6), (6, 4_102), (4_102, 4_103), (4_103, 5_000)):
        fast.add(HASHES[lo:hi])
    stored = fast.take()
    assert [stored[i : i + 32] for i in range(0, len(stored), 32)] == list(reference.hashes)


@pytest.mark.parametrize("bad", ["sha256:zz" + "0" * 62, 7, b"sha256:" + b"0" * 64, None], ids=repr)
def test_a_refused_record_hash_adds_nothing(bad: Any) -> None:
    fast = treecheck.Extender([b""] * 64, 0)
    with pytest.raises((ValueError, TypeError)):
        fast.add([*HASHES[:10], bad, *HASHES[11:20]])
    assert fast.size == 0 and fast.take() == b""
    plain = treecheck.Extender([b""] * 64, 0)
    with pytest.raises((ValueError, TypeError)):
        plain.add_plain([*HASHES[:10], bad])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=32, max_size=32), max_size=40).map(lambda r: r[: len(r) // 2 * 2])
)
def test_a_level_of_nodes_is_each_pair_hashed_with_the_node_prefix(row: list[bytes]) -> None:
    expected = [
        hashlib.sha256(b"\x01" + left + right).digest()
        for left, right in zip(row[::2], row[1::2], strict=True)
    ]
    assert treecheck.parents(row) == expected
    assert treecheck.parents(row) == expected  # the shared prefixed hash object is unchanged


@settings(max_examples=40, deadline=None)
@given(
    digests=st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=70),
    upper=st.booleans(),
    start=st.sampled_from([0, 1, 5, 4095, 4096]),
)
def test_any_record_hashes_add_what_leaf_by_leaf_adds(
    digests: list[bytes], upper: bool, start: int
) -> None:
    hashes = ["sha256:" + (d.hex().upper() if upper else d.hex()) for d in digests]
    fast = treecheck.Extender(_edge_at(start), start)
    plain = treecheck.Extender(_edge_at(start), start)
    fast.add(hashes)
    plain.add_plain(hashes)
    assert fast.take() == plain.take() and fast.size == plain.size == start + len(hashes)


@pytest.mark.parametrize(
    "bad",
    ["sha512:" + "0" * 64, "sha256:" + "00 " * 21 + "0", "sha256:" + "\u00e9" * 64, "0" * 71],
    ids=repr,
)
def test_the_batch_form_refuses_a_record_hash_not_sha256_and_hex_digits(bad: str) -> None:
    fast = treecheck.Extender([b""] * 64, 0)
    with pytest.raises(ValueError):
        fast.add([*HASHES[:5], bad])
    assert fast.size == 0 and fast.take() == b""


def test_blocks_tile_the_leaves_with_aligned_subtrees() -> None:
    for size in (0, 1, 3, 6, 4_095, 4_096, 12_345):
        for count in (0, 1, 2, 7, 4_096, 9_999):
            at = size
            for height in treecheck.blocks(size, count):
                assert at % (1 << height) == 0 and height <= treecheck.MAX_BLOCK_HEIGHT
                at += 1 << height
            assert at == size + count


_SAMPLES = [b'{"k":%d,"v":"%s"}' % (i, b"x" * (i % 50)) for i in range(2_000)]
#: A second dictionary, as a database holds after a release ships a new one.
_OTHER = zstandard.train_dictionary(4_096, _SAMPLES)


def _codecs() -> tuple[Codec, Codec]:
    """A codec with the shipped dictionary alone, and one with the other dictionary too."""
    shipped = shipped_dictionary()
    shipped_id = zstandard.ZstdCompressionDict(shipped).dict_id()
    both = Codec({shipped_id: shipped, _OTHER.dict_id(): _OTHER.as_bytes()})
    return Codec({shipped_id: shipped}), both


def _declaring(size: int, dict_id: int = 0) -> bytes:
    """A frame header declaring ``size`` bytes of content (8-byte content size field), naming
    the dictionary ``dict_id`` (none: 0), and a block that is not one."""
    fhd = 0b1110_0000 | (0b11 if dict_id else 0)  # 8-byte size, single segment, 4-byte dict id
    named = dict_id.to_bytes(4, "little") if dict_id else b""
    return ZSTD_MAGIC + bytes([fhd]) + named + size.to_bytes(8, "little") + b"\x01\x00\x00"


def _stored_kinds() -> dict[str, Any]:
    frame = _codecs()[0].compress(b'{"a":1}')
    return {
        "frame": frame,
        "frame of the other dictionary": zstandard.ZstdCompressor(dict_data=_OTHER).compress(
            b'{"b":2}'
        ),
        "frame with no dictionary": zstandard.ZstdCompressor().compress(b'{"c":3}'),
        "damaged frame": frame[:-3] + b"\x00\x00\x00",
        "truncated frame": frame[:8],
        "magic alone": ZSTD_MAGIC,
        "declared past the cap": _declaring(MAX_PAYLOAD_BYTES + 1),
        # read without the cap, this would allocate a terabyte
        "declared far past the cap": _declaring(
            1 << 40, zstandard.ZstdCompressionDict(shipped_dictionary()).dict_id()
        ),
        "canonical bytes": b'{"plain":true}',
        "empty": b"",
        "text": '{"t":1}',
        "integer": 5,
        "null": None,
    }


KINDS = _stored_kinds()


def test_inflating_a_batch_reads_each_payload_as_inflate_reads_it() -> None:
    kinds = KINDS
    frames = [kinds["frame"]] * 5
    for codec in _codecs():
        batches = [[], frames, *([*frames[:2], v, *frames[2:]] for v in kinds.values())]
        batches.append([kinds["frame of the other dictionary"]] * 3)
        batches.append([kinds["frame"], kinds["frame of the other dictionary"]])
        for batch in batches:
            assert codec.inflate_many(batch) == [codec.inflate(s) for s in batch]
    assert _codecs()[0].inflate(kinds["declared past the cap"]) == kinds["declared past the cap"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(KINDS)), max_size=12))
def test_any_mixture_of_stored_values_inflates_as_one_by_one(names: list[str]) -> None:
    codec = _codecs()[1]
    batch = [KINDS[n] for n in names]
    assert codec.inflate_many(batch) == [codec.inflate(s) for s in batch]


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fast") / "audit.db"
    with AuditLog(path, origin="test/fast") as log:
        for start in range(0, 1_300, 325):
            log.append_many(
                [{"i": i, "pad": "x" * (i % 40)} for i in range(start, start + 325)], recorded_at=T
            )
    return path


@pytest.mark.parametrize("lo", [0, 1, 255, 256, 700])
def test_rows_put_back_from_columns_are_the_rows_inflated_one_by_one(
    log_path: Path, lo: int
) -> None:
    with closing(connect(log_path)) as conn, conn:
        codec = Codec.load(conn)
        rows = list(conn.execute(parallel._SELECT, (lo, 1_300)))
        fast_tree, plain_tree = treecheck.RangeCheck(conn, lo), treecheck.RangeCheck(conn, lo)
        try:
            fast = list(parallel._inflated(rows, codec.inflate_many, fast_tree))
            plain = list(parallel._inflated_plain(rows, codec.inflate, plain_tree))
            assert fast == plain and len(fast) == 1_300 - lo
            assert fast_tree.outcome() == plain_tree.outcome() == ("ok", 1_300 - lo, "")
        finally:
            fast_tree.close()
            plain_tree.close()
        assert list(parallel._inflated(rows, codec.inflate_many)) == plain
        first = walk_range(
            parallel._inflated(conn.execute(parallel._SELECT_ALL), codec.inflate_many),
            {},
            expected=0,
            prev=GENESIS_HASH,
            parsed_below=0,
        )
        assert first.ok and first.records_checked == 1_300


@settings(max_examples=40, deadline=None)
@given(
    lo=st.one_of(st.sampled_from([0, 1, 255, 256, 257]), st.integers(0, 1_299)),
    chunks=st.lists(st.one_of(st.just(256), st.integers(1, 700)), min_size=1, max_size=6),
    damage=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_a_range_fed_in_any_chunks_hashes_aligned_batches_and_names_the_first_bad_hash(
    log_path: Path, lo: int, chunks: list[int], damage: int | None
) -> None:
    """However the walk hands record hashes on, a range hashes them in whole batches that end
    at multiples of ``BATCH`` (one aligned block each), and names exactly the forged stored
    hash (any one of those its leaves add), or none."""
    first, end = merkle.stored_hash_count(lo), merkle.stored_hash_count(1_300)
    bad = None if damage is None else first + damage % (end - first)
    with closing(connect(log_path, write=True)) as conn:
        hashes = [
            r[0]
            for r in conn.execute(
                "SELECT record_hash FROM audit_records WHERE seq >= ? ORDER BY seq", (lo,)
            )
        ]
        conn.execute("BEGIN")
        try:
            if bad is not None:
                chunk, at = divmod(bad, treecheck.CHUNK)
                (row,) = conn.execute("SELECT hashes FROM audit_tree WHERE chunk = ?", (chunk,))
                forged = bytearray(row[0])
                forged[at * 32 : at * 32 + 32] = hashlib.sha256(b"forged").digest()
                conn.execute(
                    "UPDATE audit_tree SET hashes = ? WHERE chunk = ?", (bytes(forged), chunk)
                )
            check = treecheck.RangeCheck(conn, lo)
            try:
                at = k = 0
                while at < len(hashes):
                    size = chunks[k % len(chunks)]
                    check.add_many(hashes[at : at + size])
                    at, k = at + size, k + 1
                    assert len(check._batch) < treecheck.RangeCheck.BATCH
                    assert check.leaves == 0 or (lo + check.leaves) % check.BATCH == 0
                found = check.outcome()
            finally:
                check.close()
        finally:
            conn.execute("ROLLBACK")
    if bad is None:
        assert found == ("ok", 1_300 - lo, "")
    else:
        assert found[:2] == ("tree-node-mismatch", bad)


def test_a_damaged_row_reaches_the_walk_as_the_plain_rows_bring_it(log_path: Path) -> None:
    with closing(connect(log_path)) as conn, conn:
        codec = Codec.load(conn)
        rows = [list(r) for r in conn.execute(parallel._SELECT_ALL)]
    rows[300][5] = rows[300][5][:-4] + b"\x00\x00\x00\x00"  # a damaged frame
    rows[600][5] = "text"  # a stored value of the wrong type
    rows[900][4] = "sha256:" + "0" * 63  # a record hash that is not one
    tuples = [tuple(r) for r in rows]
    fast = list(parallel._inflated(tuples, codec.inflate_many))
    plain = list(parallel._inflated_plain(tuples, codec.inflate))
    assert fast == plain
    for bad in (fast, plain):
        result = walk_range(iter(bad), {}, expected=0, prev=GENESIS_HASH, parsed_below=0)
        assert (result.first_broken_seq, result.reason) == (300, "unparseable-record")


@settings(max_examples=30, deadline=None)
@given(start=st.one_of(st.sampled_from([0, 1, 31, 32, 255, 4095]), st.integers(0, 5_000)))
def test_one_leaf_at_a_time_adds_exactly_the_hashes_leaf_by_leaf_adds(start: int) -> None:
    """A live append adds one record hash per call: its own path, held to the reference over
    a run of such calls (each subtree it completes, up to the one the run ends in)."""
    edge = _edge_at(start)
    fast = treecheck.Extender(list(edge), start)
    plain = treecheck.Extender(list(edge), start)
    for at in range(start, start + 300):
        fast.add([HASHES[at]])
        plain.add_plain([HASHES[at]])
        assert fast.take() == plain.take()
        assert fast.size == plain.size == at + 1
    assert fast._edge == plain._edge
