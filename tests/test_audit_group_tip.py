"""The head and tree edge a commit queue remembers (store/audit/group.py): a leader on the same
writer connection with no commit by any other connection since links after them without
reading the head or the tree again; any other commit in between (another process, another
connection of this process, a rotation, a failed job or transaction) is seen, and the next
append follows it: the chain and the tree verify, seq after seq."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import apsw
import pytest

from rensei_routing import signing
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.errors import StoreError
from rensei_routing.store import db
from rensei_routing.store.audit import AuditLog, group
from rensei_routing.store.home import ConnectOptions

from .faultvfs import FaultVFS

T = "2025-03-01T12:00:00.000000Z"
ORIGIN = "rensei-routing/test/group-tip"

#: Appends ``count`` records through a log of its own, in another process.
_OTHER = r"""
import sys
from rensei_routing.store.audit import AuditLog
path, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with AuditLog(path, origin="rensei-routing/test/group-tip") as log:
    for n in range(count):
        print(log.append({"who": f"{who}-{n}"}, recorded_at="2025-03-01T12:00:00.000000Z").seq)
"""


def _log(path: Path, vfs: str | None = None) -> AuditLog:
    return AuditLog(path, origin=ORIGIN, options=ConnectOptions(vfs=vfs))


def _other_process(path: Path, who: str, count: int) -> list[int]:
    """The seqs another process's appends were given."""
    out = subprocess.run(
        [sys.executable, "-c", _OTHER, str(path), who, str(count)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return [int(line) for line in out.stdout.split()]


def _whole(log: AuditLog) -> None:
    result = log.verify()
    assert result, result
    assert log.tree_size() == log.count() == result.records_checked


@contextmanager
def _reads(log: AuditLog) -> Iterator[list[str]]:
    """The statements run on ``log``'s writer meanwhile that read the head or the tree."""
    conn = log._write_conn()
    seen: list[str] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        if sql.lstrip().upper().startswith("SELECT") and (
            "audit_records" in sql or "audit_tree" in sql
        ):
            seen.append(sql)
        return True

    conn.exec_trace = trace
    try:
        yield seen
    finally:
        conn.exec_trace = None


def test_a_leader_on_the_same_connection_reads_neither_the_head_nor_the_tree(
    tmp_path: Path,
) -> None:
    with _log(tmp_path / "a.db") as log:
        log.append({"who": "first"}, recorded_at=T)  # reads them once
        with _reads(log) as seen:
            for n in range(40):  # across tree rows: the partial row is carried over
                assert log.append({"who": n}, recorded_at=T).seq == n + 1
            log.append_many([{"who": "many"}] * 70, recorded_at=T)
        assert seen == []
        _whole(log)


def test_another_process_appending_between_two_appends_is_chained_after(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with _log(path) as log:
        assert log.append({"who": "mine-0"}, recorded_at=T).seq == 0
        assert log.append({"who": "mine-1"}, recorded_at=T).seq == 1  # remembered now
        assert _other_process(path, "other", 3) == [2, 3, 4]
        with _reads(log) as seen:
            assert log.append({"who": "mine-2"}, recorded_at=T).seq == 5
        assert seen  # the other process's commit was seen: the head was read again
        assert log.append({"who": "mine-3"}, recorded_at=T).seq == 6
        for k in range(3):  # turn and turn about
            theirs = _other_process(path, f"other{k}", 1)
            mine = log.append_many([{"who": f"mine{k}"}] * 2, recorded_at=T)
            assert list(mine.seqs) == [theirs[0] + 1, theirs[0] + 2]
        _whole(log)
        whos = [r.payload["who"] for r in log.records()]
        assert whos[:7] == ["mine-0", "mine-1", "other-0", "other-1", "other-2", "mine-2", "mine-3"]


def test_another_connection_of_this_process_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with _log(path) as one, _log(path) as two:
        assert one.append({"who": "one"}, recorded_at=T).seq == 0
        assert one.append({"who": "one"}, recorded_at=T).seq == 1
        assert two.append({"who": "two"}, recorded_at=T).seq == 2  # another writer connection
        assert one.append({"who": "one"}, recorded_at=T).seq == 3
        with closing(db.connect(path, write=True)) as plain, plain:  # any commit at all
            plain.execute("CREATE TABLE unrelated(x INTEGER) STRICT")
        with _reads(one) as seen:
            assert one.append({"who": "one"}, recorded_at=T).seq == 4
        assert seen
        _whole(one)


def test_a_tree_changed_by_another_connection_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with _log(path) as log:
        for n in range(5):
            log.append({"who": n}, recorded_at=T)
        with closing(db.connect(path, write=True)) as other, other:  # damage, same length
            other.execute("UPDATE audit_tree SET hashes = zeroblob(length(hashes))")
        log.append({"who": "after"}, recorded_at=T)
        # Read again, the damaged row is extended as stored (a remembered copy would have
        # written the undamaged hashes back over it): verification names the damage.
        found = log.verify_segments()
        assert not found.result
        assert found.tree is not None and found.tree.state == "tree-node-mismatch"
        assert found.tree.index == 0


def test_a_failed_job_and_a_failed_transaction_forget_the_head(tmp_path: Path) -> None:
    fault = FaultVFS("tip-fault")
    try:
        path = tmp_path / "f.db"
        with _log(path, vfs="tip-fault") as log:
            log.append({"who": "before"}, recorded_at=T)

            def refuse(conn: apsw.Connection, first: int, head: str) -> Iterable[Any]:
                conn.execute("INSERT INTO audit_records(seq) VALUES (NULL)")  # refused
                return iter(())

            with pytest.raises(StoreError):
                log.append_stamped(refuse)
            assert log.append({"who": "after-job"}, recorded_at=T).seq == 1
            fault.arm("xSync", 1, persistent=False)  # the next commit's sync fails
            with pytest.raises(StoreError):
                log.append({"who": "lost"}, recorded_at=T)
            fault.disarm()
            assert log.append({"who": "after-commit"}, recorded_at=T).seq == 2
            _whole(log)
            assert [r.payload["who"] for r in log.records()] == [
                "before",
                "after-job",
                "after-commit",
            ]
    finally:
        fault.unregister()


def test_a_rotation_between_appends_keeps_the_chain(tmp_path: Path) -> None:
    key = signing.generate()
    path = tmp_path / "r.db"
    with AuditLog(
        path, origin=ORIGIN, public_key=key.public_key, private_key=key, rotate_at_records=4
    ) as log:
        assert [log.append({"who": n}, recorded_at=T).seq for n in range(10)] == list(range(10))
        found = log.verify_segments()
        assert found.result and found.segments >= 2  # sealed on the way, by this writer
        _whole(log)


def test_payload_encoding_is_unchanged_by_the_remembered_head(tmp_path: Path) -> None:
    with _log(tmp_path / "e.db") as log:
        for n in range(3):
            rec = log.append({"who": n}, recorded_at=T)
            assert rec.payload_bytes == encode_payload({"who": n})
        assert group.queue_of(log)._tip is not None
    assert group.queue_of(log)._tip is None  # closing the log forgets its writer
