"""The console's incremental verification checks the tree too: the stored hashes the appended
records added are recomputed from their record hashes, so a tree node replaced (or the tree's
storage cut) among them after the console's first full walk fails the increment, and the full
walk that follows names it. Real homes, real writers in other connections."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw

from rensei_routing.console.state import Verifier
from rensei_routing.core.audit import merkle
from rensei_routing.store.audit.tree import CHUNK

from .test_console_verify import Clock, _home, _record, full_walks  # noqa: F401


def _tree(home_db: Path) -> list[tuple[int, bytes]]:
    conn = apsw.Connection(str(home_db))
    try:
        return [(int(k), bytes(h)) for k, h in conn.execute("SELECT * FROM audit_tree")]
    finally:
        conn.close()


def _replace(home_db: Path, index: int) -> None:
    conn = apsw.Connection(str(home_db))
    with conn:
        row = bytearray(
            conn.execute("SELECT hashes FROM audit_tree WHERE chunk = ?", (index // CHUNK,)).get
        )
        at = (index % CHUNK) * 32
        row[at : at + 32] = hashlib.sha256(b"forged").digest()
        conn.execute(
            "UPDATE audit_tree SET hashes = ? WHERE chunk = ?", (bytes(row), index // CHUNK)
        )
    conn.close()


def test_a_tree_node_replaced_among_appended_records_is_reported(
    tmp_path: Path,
    full_walks: list[int],  # noqa: F811
) -> None:
    home, clock = _home(tmp_path, 40), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    assert verifier.last is not None and verifier.last.result and full_walks == [1]
    _record(home, 5, hour=11)  # seqs 40..44
    index = merkle.stored_hash_index(1, 21)  # the node over leaves 42 and 43
    _replace(home.db_path, index)
    before = _tree(home.db_path)
    clock.advance(2)
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert not last.result and last.result.reason == "tree-node-mismatch"
    assert last.result.first_broken_seq == 43
    assert full_walks == [1, 1]  # the increment failed: the full walk named the node
    assert _tree(home.db_path) == before  # nothing written


def test_an_appended_leaf_replaced_is_reported(
    tmp_path: Path,
    full_walks: list[int],  # noqa: F811
) -> None:
    home, clock = _home(tmp_path, 40), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _record(home, 3, hour=11)
    _replace(home.db_path, merkle.stored_hash_index(0, 41))
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert (last.result.reason, last.result.first_broken_seq) == ("tree-node-mismatch", 41)


def test_tree_storage_cut_after_an_append_is_reported(
    tmp_path: Path,
    full_walks: list[int],  # noqa: F811
) -> None:
    home, clock = _home(tmp_path, 40), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _record(home, 30, hour=11)  # 70 records: stored hashes 0..137, rows 0..4
    conn = apsw.Connection(str(home.db_path))
    with conn:
        conn.execute("DELETE FROM audit_tree WHERE chunk = (SELECT max(chunk) FROM audit_tree)")
    conn.close()
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert last.result.reason == "tree-truncated" and full_walks == [1, 1]


def test_an_intact_append_is_still_walked_alone(
    tmp_path: Path,
    full_walks: list[int],  # noqa: F811
) -> None:
    home, clock = _home(tmp_path, 40), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _record(home, 33, hour=11)  # crosses rows of the tree's storage
    verifier.step()
    last = verifier.last
    assert last is not None and last.result and (last.full, last.walked) == (False, 33)
    assert full_walks == [1]
