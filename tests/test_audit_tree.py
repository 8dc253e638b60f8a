"""The Merkle tree stored under the audit chain: written with the records, the same as a tree
kept in memory (roots and proofs of every size), one tree across sealed and pruned segments,
built for a home made before it, checked by verify, doctor and backup (each attack a typed
verdict naming the first bad leaf or node, nothing written). Real homes, real SQLite, real
keys; the reference is the pure core's MemoryTree."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.cli import cli
from rensei_routing.core.audit import merkle
from rensei_routing.core.audit.treehead import chain_head, form, root_of
from rensei_routing.store.audit import AuditLog, rotation
from rensei_routing.store.audit.tree import CHUNK, leaf_data
from rensei_routing.store.home import Home

T = "2026-12-02T12:00:00.000000Z"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="acme")
    return h


def _fill(home: Home, batches: list[int]) -> None:
    with AuditLog.open(home) as log:
        for i, n in enumerate(batches):
            if n == 1:
                log.append({"i": i}, recorded_at=T)
            else:
                log.append_many([{"i": i, "j": j} for j in range(n)], recorded_at=T)


def _memory(log: AuditLog) -> merkle.MemoryTree:
    return merkle.MemoryTree([leaf_data(r.record_hash) for r in log.records()])


def _raw(home: Home) -> apsw.Connection:
    return apsw.Connection(str(home.db_path))


def _state(home: Home) -> tuple[Any, ...]:
    conn = _raw(home)
    try:
        tree = conn.execute("SELECT chunk, hashes FROM audit_tree ORDER BY chunk").fetchall()
        cps = conn.execute("SELECT id, note FROM audit_checkpoints ORDER BY id").fetchall()
        n = conn.execute("SELECT count(*) FROM audit_records").get
    finally:
        conn.close()
    return tuple(tree), tuple(cps), n


def _run(runner: CliRunner, home: Home, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--no-plugins", "--home", str(home.path), *args])


@settings(max_examples=15, deadline=None)
@given(batches=st.lists(st.integers(min_value=1, max_value=70), min_size=1, max_size=6))
def test_the_stored_tree_is_the_memory_tree_at_every_size(
    tmp_path_factory: pytest.TempPathFactory, batches: list[int]
) -> None:
    home = Home(tmp_path_factory.mktemp("h") / "home")
    home.init(org="acme")
    _fill(home, batches)
    with AuditLog.open(home) as log:
        mem = _memory(log)
        n = log.count()
        assert log.tree_size() == n == sum(batches)
        for size in range(n + 1):
            assert log.tree_root(size) == mem.root(size)
        for seq in range(0, n, 3):
            assert log.leaf(seq) == merkle.leaf_hash(leaf_data(log.get(seq).record_hash))
            proof = log.inclusion_proof(seq, n)
            assert proof == mem.inclusion_proof(seq, n)
            merkle.verify_inclusion(seq, n, log.leaf(seq), proof, log.tree_root(n))
        for old in range(0, n + 1, 5):
            proof = log.consistency_proof(old, n)
            merkle.verify_consistency(old, n, log.tree_root(old), log.tree_root(n), proof)


def test_out_of_range_requests_are_typed(home: Home) -> None:
    from rensei_routing.errors import NotFoundError

    _fill(home, [5])
    with AuditLog.open(home) as log:
        for call in (
            lambda: log.tree_root(6),
            lambda: log.leaf(5),
            lambda: log.inclusion_proof(5, 5),
            lambda: log.consistency_proof(3, 6),
            lambda: log.consistency_proof(4, 3),
        ):
            with pytest.raises(NotFoundError):
                call()


def test_checkpoints_are_tree_roots_and_verify_json_names_each_form(home: Home) -> None:
    _fill(home, [10])
    with AuditLog.open(home) as log:
        cp = log.checkpoint()
        assert form(cp) == "tree-root"
        assert root_of(cp) == log.tree_root(10)
        assert chain_head(cp) == log.head()[1]
    done = _run(CliRunner(), home, "audit", "verify", "--json")
    doc = json.loads(done.stdout)
    assert done.exit_code == 0 and doc["tree"]["state"] == "ok" and doc["tree"]["size"] == 10
    assert doc["checkpoints"] == [{"size": 10, "form": "tree-root"}]


def test_one_tree_across_rotated_and_pruned_segments(home: Home, tmp_path: Path) -> None:
    _fill(home, [7])
    with AuditLog.open(home) as log:
        rotation.rotate(log)
        log.append_many([{"after": i} for i in range(5)], recorded_at=T)
        rotation.rotate(log)
        log.append_many([{"later": i} for i in range(4)], recorded_at=T)
        mem = _memory(log)
        root = log.tree_root(16)
        assert log.tree_size() == 16 and root == mem.root(16)
        proof = log.inclusion_proof(9, 16)
        assert log.verify().ok
    export = tmp_path / "x.jsonl"
    assert _run(CliRunner(), home, "audit", "export", str(export)).exit_code == 0
    with AuditLog.open(home) as log:
        pruned = rotation.prune(log, before=7, exported=[export])
        assert [s.name for s in pruned] == ["0-6"]
        assert form(json_cp(pruned[0].note)) == "tree-root"
        # records 0..6 are gone; their leaves and every proof still read from the home
        assert log.tree_root(16) == root and log.inclusion_proof(9, 16) == proof
        assert log.inclusion_proof(3, 16) == mem.inclusion_proof(3, 16)
        verdict = log.verify_segments()
        assert verdict.result.ok and verdict.tree is not None and verdict.tree.state == "ok"


def json_cp(note: str) -> Any:
    from rensei_routing.core.audit.chain import parse_checkpoint

    return parse_checkpoint(note)


def test_a_home_made_before_the_tree_gains_it_from_its_chain(home: Home) -> None:
    _fill(home, [40, 1, 3])
    with AuditLog.open(home) as log:
        want = log.tree_root(44)
    conn = _raw(home)
    with conn:
        conn.execute("DELETE FROM audit_tree")  # as a home of the schema before
    conn.close()
    with AuditLog.open(home) as log:
        assert log.tree_size() == 0
        assert log.verify_segments().tree.state == "absent"  # type: ignore[union-attr]
        log.append({"next": 1}, recorded_at=T)  # the first writer builds it, then appends
        assert log.tree_size() == 45 and log.tree_root(44) == want


# -- attacks: each a typed verdict naming the first bad leaf or node, nothing written -------------


def _attacked(home: Home) -> None:
    with AuditLog.open(home) as log:
        log.checkpoint()


def _verdict(home: Home) -> dict[str, Any]:
    done = _run(CliRunner(), home, "audit", "verify", "--json")
    assert done.exit_code == 1, done.output
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _checks_fail(home: Home, tmp_path: Path) -> None:
    runner = CliRunner()
    doctor = _run(runner, home, "doctor")
    assert doctor.exit_code == 1, doctor.output
    target = tmp_path / "backup"
    backup = _run(runner, home, "backup", str(target))
    assert backup.exit_code != 0 and not target.exists(), backup.output


def test_a_replaced_tree_node_is_named(home: Home, tmp_path: Path) -> None:
    _fill(home, [100])
    _attacked(home)
    conn = _raw(home)
    index = merkle.stored_hash_index(1, 20)  # the node over leaves 40 and 41
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
    before = _state(home)
    doc = _verdict(home)
    assert (doc["reason"], doc["first_broken_seq"]) == ("tree-node-mismatch", 41)
    assert doc["tree"]["node"] == {"index": index, "level": 1, "n": 20}
    _checks_fail(home, tmp_path)
    assert _state(home) == before


def test_truncated_tree_storage_is_named(home: Home, tmp_path: Path) -> None:
    _fill(home, [100])
    _attacked(home)
    conn = _raw(home)
    with conn:
        conn.execute("DELETE FROM audit_tree WHERE chunk >= 3")  # stored hashes 96 on
    conn.close()
    before = _state(home)
    doc = _verdict(home)
    assert doc["reason"] == "tree-truncated"
    first = doc["first_broken_seq"]
    assert merkle.stored_hash_count(first) <= 96 < merkle.stored_hash_count(first + 1)
    _checks_fail(home, tmp_path)
    assert _state(home) == before


def test_the_whole_tree_dropped_under_a_tree_root_checkpoint_is_named(
    home: Home, tmp_path: Path
) -> None:
    _fill(home, [30])
    _attacked(home)
    conn = _raw(home)
    with conn:
        conn.execute("DELETE FROM audit_tree")
    conn.close()
    before = _state(home)
    doc = _verdict(home)
    assert (doc["reason"], doc["first_broken_seq"]) == ("tree-truncated", 0)
    _checks_fail(home, tmp_path)
    assert _state(home) == before


def test_a_rebuilt_tree_over_rewritten_records_fails_the_signed_root(home: Home) -> None:
    """An attacker without the key who rewrites a record, rehashes the chain and rebuilds the
    tree and the checkpoint's head line still cannot match the signed root."""
    _fill(home, [20])
    with AuditLog.open(home) as log:
        cp = log.checkpoint()
    conn = _raw(home)
    with conn:
        conn.execute("DELETE FROM audit_records WHERE seq = 19")
        conn.execute("DELETE FROM audit_tree")
    conn.close()
    with AuditLog.open(home) as log:
        log._write_conn()  # rebuilt over 19 records
        log.append({"forged": True}, recorded_at=T)
        result = log.verify((cp,), stored=False)
    assert not result.ok and result.first_broken_seq == 19


def test_an_overrun_tree_is_named(home: Home) -> None:
    _fill(home, [12])
    conn = _raw(home)
    with conn:
        conn.execute("DELETE FROM audit_records WHERE seq >= 10")
    conn.close()
    with AuditLog.open(home) as log:
        result = log.verify()
    assert (result.ok, result.reason, result.first_broken_seq) == (False, "tree-overrun", 10)
