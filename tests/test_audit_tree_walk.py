"""The tree checked inside the verify walk: each range recomputes the stored hashes its own
leaves add (from the rows it reads and the stored frontier at its start), in worker processes
and in one process, across sealed segments, and the verdict is exactly the one-process
recomputation's (:func:`rensei_routing.store.audit.tree.check`) for every damage: a replaced
node at any level, near and on range boundaries, a row deleted from the middle of the tree's
storage, its tail truncated, hashes stored past the head. Real homes, real SQLite, real worker
processes; the reference is the serial check, and the walk must not fall back on it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import apsw
import pytest

from rensei_routing.core.audit import merkle
from rensei_routing.store import parallel
from rensei_routing.store.audit import AuditLog, rotation, tree
from rensei_routing.store.audit.tree import CHUNK
from rensei_routing.store.home import Home

T = "2026-12-02T12:00:00.000000Z"
N = 1_500
SMALLEST = 97  # ranges start at seqs that are no power of two


@pytest.fixture
def many_ranges(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Cut even a small log into ranges; count the serial checks (the walk must not need one)."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_RECORDS", 1)
    monkeypatch.setattr(parallel, "MIN_RANGE_RECORDS", SMALLEST)
    calls: list[int] = []
    real = tree.check

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(tree, "check", counted)
    return calls


def _home(tmp_path: Path, *, rotate: bool) -> Home:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    with AuditLog.open(home) as log:
        for start in range(0, N, 250):
            log.append_many([{"i": i} for i in range(start, start + 250)], recorded_at=T)
            if rotate and start in (250, 750):
                rotation.rotate(log)
    return home


def _walked(home: Home, workers: int) -> tuple[Any, tree.TreeCheck | None]:
    with AuditLog.open(home) as log:
        verdict = log.verify_segments(workers=workers)
    return verdict.result, verdict.tree


def _tables(home: Home) -> tuple[Any, ...]:
    conn = apsw.Connection(str(home.db_path))
    try:
        return tuple(conn.execute("SELECT chunk, hashes FROM audit_tree ORDER BY chunk"))
    finally:
        conn.close()


def _replace(home: Home, index: int) -> None:
    conn = apsw.Connection(str(home.db_path))
    with conn:
        row = bytearray(
            conn.execute("SELECT hashes FROM audit_tree WHERE chunk = ?", (index // CHUNK,)).get
        )
        at = (index % CHUNK) * 32
        row[at : at + 32] = hashlib.sha256(b"forged %d" % index).digest()
        conn.execute(
            "UPDATE audit_tree SET hashes = ? WHERE chunk = ?", (bytes(row), index // CHUNK)
        )
    conn.close()


def _sql(home: Home, sql: str, *args: Any) -> None:
    conn = apsw.Connection(str(home.db_path))
    with conn:
        conn.execute(sql, args)
    conn.close()


def _boundaries() -> list[int]:
    return [lo for lo, _ in parallel.cut(0, N, 2, 0, smallest=SMALLEST)][1:]


def _damages() -> list[tuple[str, Any]]:
    b = _boundaries()
    cases: list[tuple[str, Any]] = [
        ("leaf", merkle.stored_hash_index(0, 777)),
        ("leaf-at-boundary", merkle.stored_hash_index(0, b[2])),
        ("leaf-before-boundary", merkle.stored_hash_index(0, b[2] - 1)),
        ("level-1", merkle.stored_hash_index(1, 333)),
        ("level-9 (spans ranges)", merkle.stored_hash_index(9, 1)),
        ("level-10", merkle.stored_hash_index(10, 0)),
        ("last", merkle.stored_hash_count(N) - 1),
    ]
    return cases


@pytest.mark.parametrize("rotate", [False, True], ids=["live", "segments"])
@pytest.mark.parametrize(("what", "index"), _damages(), ids=[c[0] for c in _damages()])
def test_a_replaced_node_is_named_as_the_one_process_check_names_it(
    tmp_path: Path, many_ranges: list[int], rotate: bool, what: str, index: int
) -> None:
    home = _home(tmp_path, rotate=rotate)
    _replace(home, index)
    before = _tables(home)
    level, n = merkle.split_stored_hash_index(index)
    for workers in (2, 1):
        result, found = _walked(home, workers)
        assert found is not None and found.state == "tree-node-mismatch", (what, workers)
        assert (found.index, found.level, found.node) == (index, level, n)
        assert result.reason == "tree-node-mismatch" and not result.ok
        assert found == _reference(home)
    assert many_ranges == [1] * 2  # only the reference: the walk settled it each time
    assert _tables(home) == before


def _reference(home: Home) -> tree.TreeCheck:
    with AuditLog.open(home) as log:
        conn = log._read_conn()
        with conn:
            return tree.check(conn, log._sealed, 0, N)


@pytest.mark.parametrize("rotate", [False, True], ids=["live", "segments"])
@pytest.mark.parametrize(
    ("what", "sql", "state"),
    [
        ("middle row deleted", "DELETE FROM audit_tree WHERE chunk = 40", "tree-truncated"),
        ("tail truncated", "DELETE FROM audit_tree WHERE chunk >= 70", "tree-truncated"),
        (
            "a row past the head",
            "INSERT INTO audit_tree(chunk, hashes) VALUES (1000, zeroblob(32))",
            "tree-overrun",
        ),
        (
            "the last row cut short",
            "UPDATE audit_tree SET hashes = substr(hashes, 1, 32) "
            "WHERE chunk = (SELECT max(chunk) FROM audit_tree)",
            "tree-truncated",
        ),
    ],
)
def test_missing_or_extra_storage_is_named_as_the_one_process_check_names_it(
    tmp_path: Path, many_ranges: list[int], rotate: bool, what: str, sql: str, state: str
) -> None:
    home = _home(tmp_path, rotate=rotate)
    _sql(home, sql)
    before = _tables(home)
    reference = _reference(home)
    assert reference.state == state, what
    for workers in (2, 1):
        result, found = _walked(home, workers)
        assert found == reference, (what, workers)
        assert result.reason == state and not result.ok
    assert _tables(home) == before


@pytest.mark.parametrize("rotate", [False, True], ids=["live", "segments"])
def test_an_intact_tree_is_settled_by_the_walk_alone(
    tmp_path: Path, many_ranges: list[int], rotate: bool
) -> None:
    home = _home(tmp_path, rotate=rotate)
    for workers in (2, 1):
        result, found = _walked(home, workers)
        assert result.ok and found is not None
        assert (found.state, found.size) == ("ok", N)
    assert many_ranges == []  # never recomputed in one process


def test_a_broken_chain_is_the_verdict_whatever_the_tree(
    tmp_path: Path, many_ranges: list[int]
) -> None:
    """A record rewritten and the tree rebuilt over it: the chain's failure is named, the tree
    not looked at (as before the walk checked it)."""
    home = _home(tmp_path, rotate=False)
    _sql(
        home,
        "UPDATE audit_records SET record_hash = 'sha256:' || hex(zeroblob(32)) WHERE seq = 900",
    )
    for workers in (2, 1):
        result, found = _walked(home, workers)
        assert not result.ok and result.first_broken_seq == 900 and found is None
