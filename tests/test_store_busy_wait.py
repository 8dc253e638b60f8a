"""Waiting for a lock never holds the interpreter lock: a connection that waits for another
connection's write lock (SQLite's busy handler) lets the other threads of its process run, so
a thread of the same process holding that lock can finish and commit. The handler keeps
SQLite's own schedule and timeout. With SQLite's built-in handler (which sleeps in C, under
apsw calls that keep the interpreter lock, such as ``with conn:``'s ``BEGIN``) the holder could
not run, and the waiter failed after the whole busy timeout: threads appending while one of
them stored an automatic checkpoint stalled the process that long at a time. Real databases,
real threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

from rensei_routing.store import busy, db
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

T = "2025-03-01T12:00:00.000000Z"


def _writers(path: Path, timeout_ms: int) -> tuple[apsw.Connection, apsw.Connection]:
    first = db.connect(path, write=True, busy_timeout_ms=timeout_ms)
    first.execute("CREATE TABLE IF NOT EXISTS t(who TEXT)")
    return first, db.connect(path, write=True, busy_timeout_ms=timeout_ms)


def test_a_waiting_writer_lets_the_lock_holder_of_its_own_process_finish(
    tmp_path: Path,
) -> None:
    holder, waiter = _writers(tmp_path / "w.db", 5_000)
    go = threading.Event()
    failed: list[BaseException] = []

    def hold() -> None:
        try:
            with holder:  # BEGIN IMMEDIATE: the write lock
                holder.execute("INSERT INTO t VALUES ('holder')")
                go.wait()
                time.sleep(0.05)  # the waiter is in its busy wait by now
                rows = [f"work-{i}" for i in range(1_000)]  # Python: needs the interpreter
                holder.execute("INSERT INTO t VALUES (?)", (str(len(rows)),))
        except BaseException as e:
            failed.append(e)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        go.set()
        with waiter:  # waits for the holder's commit
            waiter.execute("INSERT INTO t VALUES ('waiter')")
    finally:
        thread.join()
    assert failed == []
    assert [r[0] for r in waiter.execute("SELECT who FROM t ORDER BY rowid")] == [
        "holder",
        "1000",
        "waiter",
    ]
    holder.close()
    waiter.close()


def test_the_busy_timeout_still_ends_a_wait_and_nothing_is_written(tmp_path: Path) -> None:
    holder, waiter = _writers(tmp_path / "w.db", 300)
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with holder:
            holder.execute("INSERT INTO t VALUES ('holder')")
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        holding.wait(10)
        start = time.monotonic()
        with pytest.raises(apsw.BusyError), waiter:
            waiter.execute("INSERT INTO t VALUES ('waiter')")
        assert time.monotonic() - start >= 0.3
    finally:
        release.set()
        thread.join()
    assert [r[0] for r in waiter.execute("SELECT who FROM t")] == ["holder"]
    holder.close()
    waiter.close()


def test_the_handler_keeps_sqlites_schedule_and_stops_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(busy.time, "sleep", slept.append)
    patience = busy.Patience(100)
    answers = [patience(count) for count in range(10)]
    assert answers == [True] * 8 + [False] * 2
    # SQLite's pauses (1, 2, 5, 10, 15, 20, 25 ms), the last cut to end at the timeout.
    assert [round(s * 1000) for s in slept] == [1, 2, 5, 10, 15, 20, 25, 22]
    assert sum(slept) == pytest.approx(0.1)
    long = busy.Patience(1_000)
    slept.clear()
    count = 0
    while long(count):
        count += 1
    assert sum(slept) == pytest.approx(1.0)
    assert max(slept) == pytest.approx(0.1)  # past the schedule, 100 ms at a time
    conn = db.connect(tmp_path / "x.db", write=True, busy_timeout_ms=1234)
    assert busy.busy_timeout_ms(conn) == 1234
    conn.close()


def test_threads_appending_while_one_stores_an_automatic_checkpoint_never_stall(
    tmp_path: Path,
) -> None:
    """Eight threads, each its own log of one home, append one record at a time past several
    automatic checkpoints, under a 2 s busy timeout: every append commits, every checkpoint is
    stored (none failed), and the chain verifies."""
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("[store]\nbusy_timeout = 2\n\n[audit]\ncheckpoint_every = 40\n")
    threads, each = 8, 30
    errors: list[str] = []
    logs = [AuditLog.open(home) for _ in range(threads)]
    start_line = threading.Barrier(threads)

    def work(k: int) -> None:
        log = logs[k]
        start_line.wait()
        try:
            for i in range(each):
                log.append({"thread": k, "i": i, "pad": "x" * 40}, recorded_at=T)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
        if log.auto_checkpoint_error:
            errors.append(log.auto_checkpoint_error)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        for log in logs:
            log.close()
    assert errors == []
    with AuditLog.open(home) as log:
        assert log.count() == threads * each
        sizes = [
            int(r[0])
            for r in log._read_conn().execute("SELECT size FROM audit_checkpoints ORDER BY size")
        ]
        assert len(sizes) >= threads * each // 40 - 1 and all(s >= 40 for s in sizes)
        result = log.verify()
        assert result.ok and result.records_checked == threads * each


_HOLDER = """
import sys, time
import apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (-1, 'x', 'x')")
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["append", "execute"])
def test_ctrl_c_ends_a_wait_at_once_as_a_keyboard_interrupt(tmp_path: Path, how: str) -> None:
    """A lock held by another process, the main thread waiting for it with a 20 s timeout (an
    audit append, whose transaction begins under ``with conn:``, or a plain statement): a SIGINT
    ends the wait as ``KeyboardInterrupt``, not a busy timeout, and nothing is written."""
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("[store]\nbusy_timeout = 20\n")
    path = home.db_path
    log = AuditLog.open(home)
    log.append({"first": True}, recorded_at=T)  # its writer is open before the lock is taken
    waiter = db.connect(path, write=True, busy_timeout_ms=20_000)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            if how == "append":
                log.append({"second": True}, recorded_at=T)
            else:
                waiter.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")
        assert time.monotonic() - start < 5
    finally:
        timer.cancel()
        holder.kill()
        holder.communicate()
    waiter.close()
    log.close()
    with AuditLog.open(home) as log:
        assert log.count() == 1 and log.verify().ok
