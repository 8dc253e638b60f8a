"""I/O faults, walked systematically: every write, sync, truncate and file control of ``append``,
``append_many``, ``policy save``, ``checkpoint`` and the schema migration fails in turn (the n-th
call, n = 1, 2, ... until the operation completes with no fault hit). Each fault must surface as
a typed error, lose nothing acknowledged, leave a database that passes ``integrity_check`` and
a chain (and its checkpoints) that verifies, and the next operation after the fault clears must
succeed. Faults come from a real VFS wrapping SQLite's default (tests/faultvfs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import pytest

from rensei_routing.core.audit.treehead import chain_head
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.errors import DiskFullError, StoreError
from rensei_routing.store import db
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .faultvfs import FaultVFS

EXAMPLES = Path(__file__).parent.parent / "rensei_routing" / "examples"
T = "2025-03-01T12:00:00.000000Z"
#: More fault points than any operation here has: a loop that reaches it is a bug in the loop.
MAX_POINTS = 400

FAULTS = [
    ("xWrite", apsw.IOError),
    ("xSync", apsw.IOError),
    ("xTruncate", apsw.IOError),
    ("xFileControl", apsw.IOError),
    ("xWrite", apsw.FullError),
]
FAULT_IDS = ["write-ioerr", "sync-ioerr", "truncate-ioerr", "filecontrol-ioerr", "write-full"]

pytestmark = [
    pytest.mark.slow,
    # SQLite ignores the result of some calls (a sync hint, a file control it only offers);
    # apsw then reports the injected exception as unraisable, which is expected here.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(scope="module")
def vfs() -> Iterator[FaultVFS]:
    fault = FaultVFS("fault")
    try:
        yield fault
    finally:
        fault.unregister()


def _policies() -> PolicySnapshot:
    return PolicySnapshot.from_dict(json.loads((EXAMPLES / "policies.json").read_text()))


@dataclass
class Acknowledged:
    """What the operations under test reported as done, to be found intact after every fault."""

    payloads: list[dict[str, Any]] = field(default_factory=list)
    revisions: list[tuple[int, str]] = field(default_factory=list)
    failed_saves: int = 0
    checkpoints: list[tuple[int, str]] = field(default_factory=list)


def _check(home: Home, ack: Acknowledged, attempted: list[list[dict[str, Any]]]) -> None:
    """The home read through SQLite's default VFS: intact, and holding everything acknowledged.
    ``attempted`` are the payload groups of failed operations: each is stored whole or not at
    all (a failed commit may still have reached the disk), and never twice."""
    conn = db.connect(home.db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        store = PolicyStore(conn)
        revisions = [(r.revision, r.content_hash) for r in store.history()]
        assert set(ack.revisions) <= set(revisions)
        assert [r for r, _ in revisions] == list(range(1, len(revisions) + 1))
        # a save that reported a failure after its commit point may be there, whole
        assert len(revisions) <= len(ack.revisions) + ack.failed_saves
        assert store.load().state in ("ok", "absent")
        stored_cps = [
            (int(s), str(h))
            for s, h in conn.execute("SELECT size, head_hash FROM audit_checkpoints ORDER BY id")
        ]
        assert set(ack.checkpoints) <= set(stored_cps)
    finally:
        conn.close()
    with AuditLog.open(home) as log:
        result = log.verify()  # every stored checkpoint included
        assert result.ok, result
        stored = [json.loads(r.payload_bytes) for r in log.tail(10**9)]
    failed = [p for group in attempted for p in group]
    assert [p for p in stored if p not in failed] == ack.payloads
    for group in attempted:
        found = [p for p in stored if p in group]
        assert found in ([], group), found  # all or nothing, each once


Operation = Callable[[Home, str], list[dict[str, Any]]]


def _append(home: Home, tag: str) -> list[dict[str, Any]]:
    payload = {"op": "append", "tag": tag}
    with AuditLog.open(home) as log:
        log.append(payload, recorded_at=T)
    return [payload]


def _append_many(home: Home, tag: str) -> list[dict[str, Any]]:
    payloads = [{"op": "append_many", "tag": tag, "j": j} for j in range(5)]
    with AuditLog.open(home) as log:
        log.append_many(payloads, recorded_at=T)
    return payloads


def _walk(
    vfs: FaultVFS,
    tmp_path: Path,
    method: str,
    error: type[apsw.Error],
    run: Callable[[Home, str, Acknowledged], list[dict[str, Any]]],
    persistent: bool = True,
) -> int:
    """Run ``run`` with the n-th ``method`` call failing, for n = 1, 2, ...; returns the number
    of fault points walked. ``run`` records what it acknowledged and returns the payloads it
    tried to append."""
    plain = Home(tmp_path / "home")
    plain.init(org="acme")
    faulty = Home(plain.path, vfs=vfs.vfs_name)
    ack = Acknowledged()
    attempted: list[list[dict[str, Any]]] = []
    with AuditLog.open(plain) as log:  # something to lose: a record and a checkpoint
        ack.payloads += [_append_seed(log)]
        cp = log.checkpoint()
        ack.checkpoints.append((cp.size, chain_head(cp)))
    for n in range(1, MAX_POINTS):
        vfs.arm(method, n, error=error, persistent=persistent)
        tag = f"{method}-{n}"
        try:
            done = run(faulty, tag, ack)
        except StoreError as e:
            assert vfs.hits > 0, f"n={n}: failed without an injected fault: {e}"
            if error is apsw.FullError:
                assert isinstance(e, DiskFullError) and str(plain.path) in str(e), e
            vfs.disarm()
            attempted.append(_payloads_of(tag))
        else:
            vfs.disarm()
            ack.payloads += done
            if vfs.hits == 0:
                _check(plain, ack, attempted)
                return n
        finally:
            vfs.disarm()
        _check(plain, ack, attempted)
        # the fault has cleared: the next operation succeeds
        ack.payloads += run(faulty, f"{tag}-after", ack)
        _check(plain, ack, attempted)
    raise AssertionError(f"no end to the fault points of {method} within {MAX_POINTS}")


def _append_seed(log: AuditLog) -> dict[str, Any]:
    payload = {"op": "seed"}
    log.append(payload, recorded_at=T)
    return payload


def _payloads_of(tag: str) -> list[dict[str, Any]]:
    """The payloads the failed operation tagged ``tag`` tried to write (none for a save or a
    checkpoint)."""
    return _ATTEMPTS.pop(tag, [])


#: The payload groups each tagged attempt tried to write, filled in before it writes.
_ATTEMPTS: dict[str, list[dict[str, Any]]] = {}


def _run_append(home: Home, tag: str, ack: Acknowledged) -> list[dict[str, Any]]:
    _ATTEMPTS[tag] = [{"op": "append", "tag": tag}]
    done = _append(home, tag)
    _ATTEMPTS.pop(tag, None)
    return done


def _run_append_many(home: Home, tag: str, ack: Acknowledged) -> list[dict[str, Any]]:
    _ATTEMPTS[tag] = [{"op": "append_many", "tag": tag, "j": j} for j in range(5)]
    done = _append_many(home, tag)
    _ATTEMPTS.pop(tag, None)
    return done


def _run_policy_save(home: Home, tag: str, ack: Acknowledged) -> list[dict[str, Any]]:
    ack.failed_saves += 1  # until it returns
    conn = home.connect(write=True)
    try:
        saved = PolicyStore(conn).save(_policies().policies, saved_at=T)
    finally:
        db.close_quietly(conn)  # as the CLI closes: a failed checkpoint-on-close loses nothing
    ack.failed_saves -= 1
    ack.revisions.append((saved.revision, saved.content_hash))
    return []


def _run_checkpoint(home: Home, tag: str, ack: Acknowledged) -> list[dict[str, Any]]:
    with AuditLog.open(home) as log:
        cp = log.checkpoint()
    ack.checkpoints.append((cp.size, chain_head(cp)))
    return []


OPERATIONS = {
    "append": _run_append,
    "append_many": _run_append_many,
    "policy-save": _run_policy_save,
    "checkpoint": _run_checkpoint,
}


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "transient"])
@pytest.mark.parametrize(("method", "error"), FAULTS, ids=FAULT_IDS)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_fault_point_of_an_operation(
    vfs: FaultVFS,
    tmp_path: Path,
    operation: str,
    method: str,
    error: type[apsw.Error],
    persistent: bool,
) -> None:
    points = _walk(vfs, tmp_path, method, error, OPERATIONS[operation], persistent)
    print(f"{operation} {method} {error.__name__}: {points - 1} fault points")


@pytest.mark.parametrize(("method", "error"), FAULTS, ids=FAULT_IDS)
def test_every_fault_point_of_the_schema_migration(
    vfs: FaultVFS, tmp_path: Path, method: str, error: type[apsw.Error]
) -> None:
    reference = db.connect(tmp_path / "reference.db", write=True)
    complete = (db.SCHEMA_VERSION, reference.execute("SELECT count(*) FROM sqlite_schema").get)
    db.close_quietly(reference)
    for n in range(1, MAX_POINTS):
        path = tmp_path / f"m{n}" / "rensei.db"
        path.parent.mkdir()
        vfs.arm(method, n, error=error)
        try:
            db.close_quietly(db.connect(path, write=True, vfs=vfs.vfs_name))
        except StoreError as e:
            assert vfs.hits > 0, e
            if error is apsw.FullError:
                assert isinstance(e, DiskFullError) and str(path.parent) in str(e)
        else:
            if vfs.hits == 0:
                print(f"migration {method} {error.__name__}: {n - 1} fault points")
                return
        finally:
            vfs.disarm()
        # never half-migrated: empty (version 0) or the whole schema, and intact
        if path.exists() and path.stat().st_size > 0:
            raw = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                assert raw.execute("PRAGMA integrity_check").get == "ok"
                version = raw.pragma("user_version")
                tables = raw.execute("SELECT count(*) FROM sqlite_schema").get
                assert (version, tables) in ((0, 0), complete), (version, tables)
            finally:
                raw.close()
        db.connect(path, write=True).close()  # the fault cleared: the migration completes
        conn = db.connect(path)
        try:
            assert conn.pragma("user_version") == db.SCHEMA_VERSION
        finally:
            conn.close()
    raise AssertionError("no end to the fault points of the migration")


# -- a full disk ----------------------------------------------------------------------------------


def test_max_page_count_reached_is_disk_full_naming_the_home(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init()
    with AuditLog.open(home) as log:
        log.append({"seed": 1}, recorded_at=T)
        writer = log._write_conn()
        writer.pragma("max_page_count", writer.pragma("page_count"))
        big = [{"blob": "x" * 4000, "j": j} for j in range(50)]
        with pytest.raises(DiskFullError) as info:
            log.append_many(big, recorded_at=T)
        assert str(home.path) in str(info.value) and "disk full" in str(info.value)
        assert log.count() == 1  # nothing half-written
        log.append({"after": 1}, recorded_at=T)  # a fresh writer has no such limit
        assert log.verify().ok and log.count() == 2


def _cli_with_fault(
    tmp_path: Path, home: Path, method: str, n: int, error: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], int]:
    report = tmp_path / "hits"
    env = {
        **os.environ,
        "FAULT_METHOD": method,
        "FAULT_N": str(n),
        "FAULT_ERROR": error,
        "FAULT_REPORT": str(report),
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.faultvfs", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done, int(report.read_text() or "0")


@pytest.mark.parametrize(
    ("method", "error"), [("xWrite", "full"), ("xSync", "io")], ids=["disk-full", "sync-ioerr"]
)
def test_the_cli_reports_a_fault_in_one_line_and_writes_nothing(
    tmp_path: Path, method: str, error: str
) -> None:
    home = Home(tmp_path / "home")
    home.init()
    context = str(EXAMPLES / "context.json")
    for n in range(1, MAX_POINTS):
        done, hits = _cli_with_fault(
            tmp_path, home.path, method, n, error, "explain", context, "--record"
        )
        if hits == 0:
            assert done.returncode == 0, done.stderr
            break
        with AuditLog.open(home) as log:
            count = log.count()
            assert log.verify().ok
        if done.returncode == 0:
            continue  # SQLite rode out that fault; the record is there
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
        assert "Traceback" not in done.stderr
        if error == "full":
            assert "disk full" in lines[0] and str(home.path) in lines[0]
        assert count in (0, 1)
    else:
        raise AssertionError("no end to the fault points")
