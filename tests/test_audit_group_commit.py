"""Group commit (store/audit/group.py): one process's concurrent appends to one database file
share write transactions and syncs. A call returns only once its own record is durable; a job
that fails rolls back alone (its index rows with it) and its caller gets its own error; a
transaction that fails as a whole writes nothing of any job; seqs follow the queue; the chain
and the tree stay whole; an append from inside a builder is refused instead of waiting for
itself. The SIGKILL tests kill real processes appending from 8 threads and find every
acknowledged record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from unittest import mock

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.errors import StoreError
from rensei_routing.store import db
from rensei_routing.store.audit import AuditLog, group
from rensei_routing.store.home import ConnectOptions

from .faultvfs import FaultVFS

T = "2025-03-01T12:00:00.000000Z"
ORIGIN = "rensei-routing/test/group"
Build = Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]]


class Refused(Exception):
    """What a test builder raises: a caller's own, typed failure."""


def _log(path: Path, vfs: str | None = None) -> AuditLog:
    return AuditLog(path, origin=ORIGIN, options=ConnectOptions(vfs=vfs))


def _home_db(path: Path, vfs: str | None = None) -> Path:
    """A migrated database with a side table the builders write index rows to."""
    with closing(db.connect(path, write=True, vfs=vfs)) as conn, conn:
        conn.execute("CREATE TABLE side(seq INTEGER PRIMARY KEY, who TEXT NOT NULL) STRICT")
    return path


def _side(path: Path) -> dict[int, str]:
    with closing(db.connect(path)) as conn:
        return {int(s): str(w) for s, w in conn.execute("SELECT seq, who FROM side")}


def _indexed(who: str, *, fail: str | None = None, records: int = 1) -> Build:
    """A builder that writes its index row, then yields ``records`` records of ``who``; ``fail``
    = "raise" (a typed error after the row is written) or "constraint" (a statement refused)."""

    def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
        conn.execute("INSERT INTO side(seq, who) VALUES (?, ?)", (first, who))
        if fail == "raise":
            raise Refused(who)
        if fail == "constraint":
            conn.execute("INSERT INTO side(seq, who) VALUES (?, ?)", (first, who))
        return iter([(T, encode_payload({"who": who, "i": i})) for i in range(records)])

    return build


def _late(who: str, records: int) -> Build:
    """A builder that writes its index row, yields ``records`` records of ``who`` and then
    raises: with chunks smaller than ``records`` its first chunks were inserted, and the tree
    grown by them (and written, past the flush size), before it fails."""

    def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
        conn.execute("INSERT INTO side(seq, who) VALUES (?, ?)", (first, who))

        def pairs() -> Iterator[tuple[str, bytes]]:
            for i in range(records):
                yield T, encode_payload({"who": who, "i": i})
            raise Refused(who)

        return pairs()

    return build


def _whos(log: AuditLog) -> list[str]:
    return [r.payload["who"] for r in log.records()]


def _whole(log: AuditLog) -> None:
    verdict = log.verify_segments()
    result = verdict.result
    assert result, result
    assert verdict.tree is not None and verdict.tree.state == "ok", verdict.tree
    assert log.tree_size() == log.count() == result.records_checked


# -- one transaction, job by job (the leader's commit, driven directly) ---------------------------


def test_a_batch_commits_in_queue_order_and_a_failing_job_rolls_back_alone(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "a.db")
    with _log(path) as log:
        log.append({"who": "before"}, recorded_at=T)
        seen: list[tuple[int, str]] = []

        def change(conn: apsw.Connection) -> list[Any]:
            conn.execute("INSERT INTO side(seq, who) VALUES (-1, 'within')")
            return [{"who": "within"}]

        def watch(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
            seen.append((first, head))
            return iter([(T, encode_payload({"who": "watch"}))])

        batch = [
            group.Job(encoded=[encode_payload({"who": "plain"})], recorded_at=T, keep=True),
            group.Job(stamped=_indexed("refused", fail="raise")),
            group.Job(stamped=_indexed("many", records=3)),
            group.Job(stamped=_indexed("clash", fail="constraint")),
            group.Job(within=change, recorded_at=T),
            group.Job(stamped=watch),
        ]
        group.commit(log, batch)
        plain, refused, many, clash, within, watched = batch
        assert isinstance(refused.error, Refused) and not refused.committed
        assert isinstance(clash.error, StoreError) and "UNIQUE" in str(clash.error)
        assert [j.error for j in (plain, many, within, watched)] == [None] * 4
        assert (plain.first, plain.count, len(plain.rows)) == (1, 1, 1)
        assert (many.first, many.count) == (2, 3)
        assert (within.first, within.count) == (5, 1)
        assert (watched.first, watched.count) == (6, 1)
        # Each job follows the head the last good one left, not the failed ones'.
        assert many.before == plain.head and within.before == many.head
        assert seen == [(6, within.head)]
        assert _whos(log) == ["before", "plain", "many", "many", "many", "within", "watch"]
        assert _side(path) == {2: "many", -1: "within"}
        _whole(log)
        # The writer is sound after a job's own failure: the next append goes through it.
        assert log.append({"who": "after"}, recorded_at=T).seq == 7
        _whole(log)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from([None, "raise", "constraint"]), st.integers(1, 4)),
        min_size=1,
        max_size=10,
    )
)
def test_any_mix_of_failing_jobs_leaves_the_good_ones_contiguous_in_order(
    plan: list[tuple[str | None, int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _home_db(Path(tmp, "p.db"))
        with _log(path) as log:
            batch = [
                group.Job(stamped=_indexed(f"j{k}", fail=fail, records=n))
                for k, (fail, n) in enumerate(plan)
            ]
            group.commit(log, batch)
            expected: list[str] = []
            side: dict[int, str] = {}
            for k, ((fail, n), job) in enumerate(zip(plan, batch, strict=True)):
                assert job.committed == (fail is None)
                assert (job.error is None) == (fail is None)
                if fail is None:
                    assert job.first == len(expected) and job.count == n
                    side[job.first] = f"j{k}"
                    expected += [f"j{k}"] * n
            assert _whos(log) == expected
            assert _side(path) == side
            _whole(log)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from([None, None, "late", "raise"]), st.integers(1, 9)),
        min_size=2,
        max_size=8,
    ),
)
def test_a_job_failing_after_its_records_grew_the_tree_takes_its_hashes_back(
    plan: list[tuple[str | None, int]],
) -> None:
    # A job failing after some of its chunks were inserted (and the tree grown by them, its
    # rows written) rolls back to its savepoint, and the tree must forget exactly its hashes.
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(group, "APPEND_CHUNK", 2),
    ):
        path = _home_db(Path(tmp, "l.db"))
        with _log(path) as log:
            log.append({"who": "before"}, recorded_at=T)
            batch = [
                group.Job(
                    stamped=_late(f"j{k}", n) if fail == "late" else _indexed(f"j{k}", fail=fail)
                )
                for k, (fail, n) in enumerate(plan)
            ]
            group.commit(log, batch)
            expected = ["before"]
            for k, ((fail, _), job) in enumerate(zip(plan, batch, strict=True)):
                assert (job.error is None) == (fail is None) and job.committed == (fail is None)
                if fail is None:
                    assert job.first == len(expected)
                    expected.append(f"j{k}")
            assert _whos(log) == expected
            _whole(log)
            # The next transaction links after the kept head and grows the tree it left.
            log.append({"who": "after"}, recorded_at=T)
            _whole(log)


def test_a_transaction_that_fails_as_a_whole_writes_nothing_of_any_job(tmp_path: Path) -> None:
    fault = FaultVFS("group-fault")
    try:
        path = _home_db(tmp_path / "f.db", vfs="group-fault")
        with _log(path, vfs="group-fault") as log:
            log.append({"who": "before"}, recorded_at=T)
            batch = [group.Job(stamped=_indexed(f"j{k}")) for k in range(4)]
            fault.arm("xSync", 1, persistent=False)  # the commit's sync
            group.commit(log, batch)
            fault.disarm()
            assert fault.hits == 1
            for job in batch:
                assert isinstance(job.error, StoreError) and not job.committed
            assert len({id(j.error) for j in batch}) == 4  # each caller raises its own
            assert _whos(log) == ["before"]
            assert _side(path) == {}
            assert log.append({"who": "after"}, recorded_at=T).seq == 1
            _whole(log)
    finally:
        fault.unregister()


# -- through the public API, from threads ---------------------------------------------------------


def _wait_for(what: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def _queued(path: Path) -> int:
    return len(group.committer_of((os.path.realpath(path), None))._queue)


def _held_leader(path: Path) -> tuple[threading.Event, threading.Thread, list[Any]]:
    """A thread whose append leads and holds its transaction open until the event is set."""
    entered, release = threading.Event(), threading.Event()
    out: list[Any] = []

    def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
        entered.set()
        assert release.wait(20)
        return iter([(T, encode_payload({"who": "leader"}))])

    def lead() -> None:
        with _log(path) as log:
            out.append(log.append_stamped(build))

    thread = threading.Thread(target=lead)
    thread.start()
    assert entered.wait(20)
    return release, thread, out


def test_callers_queued_while_the_leader_runs_share_its_commit_each_with_its_own_outcome(
    tmp_path: Path,
) -> None:
    path = _home_db(tmp_path / "t.db")
    fault = FaultVFS("group-count")
    try:
        logs = [_log(path, vfs="group-count") for _ in range(8)]
        for log in logs:
            log._write_conn()  # opened (and its first-open work done) before counting
        logs[0].append({"who": "warm"}, recorded_at=T)
        fault.arm("xSync", 10**9, persistent=False)  # counts every sync, fails none
        logs[0].append({"who": "one"}, recorded_at=T)
        one_commit = fault.calls
        assert one_commit >= 1

        entered, release = threading.Event(), threading.Event()

        def hold(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
            entered.set()
            assert release.wait(20)
            return iter([(T, encode_payload({"who": "leader"}))])

        outcomes: dict[int, Any] = {}

        def call(k: int) -> None:
            try:
                if k == 0:
                    outcomes[k] = logs[0].append_stamped(hold)
                elif k == 3:
                    outcomes[k] = logs[k].append_stamped(_indexed("three", fail="raise"))
                else:
                    outcomes[k] = logs[k].append_stamped(_indexed(f"t{k}"))
            except Exception as e:  # the caller's own error, raised in its own thread
                outcomes[k] = e

        fault.calls = 0
        threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
        threads[0].start()
        assert entered.wait(20)
        key = (os.path.realpath(path), "group-count")
        for k in range(1, 8):  # queued one after another: the queue's order is known
            threads[k].start()
            _wait_for(lambda k=k: len(group.committer_of(key)._queue) == k)
        release.set()
        for t in threads:
            t.join(30)
        fault.disarm()
        # The seven queued while the leader's job ran join its transaction: one commit.
        assert fault.calls == one_commit
        assert isinstance(outcomes[3], Refused)
        seqs = {k: outcomes[k].first_seq for k in outcomes if k != 3}
        assert seqs == {0: 2, 1: 3, 2: 4, 4: 5, 5: 6, 6: 7, 7: 8}
        assert _side(path) == {seqs[k]: f"t{k}" for k in seqs if k}
        assert _whos(logs[0]) == ["warm", "one", "leader", *[f"t{k}" for k in (1, 2, 4, 5, 6, 7)]]
        _whole(logs[0])
    finally:
        for log in logs:
            log.close()
        fault.unregister()


def test_the_leader_takes_the_queued_jobs_up_to_its_limit_in_queue_order() -> None:
    committer = group.Committer()
    queued = [group.Job(recorded_at=str(k)) for k in range(group.MAX_JOBS + 5)]
    committer._queue.extend(queued)
    batch = [group.Job(recorded_at="leader")]
    assert committer._take_queued(batch)
    assert len(batch) == group.MAX_JOBS
    assert all(a is b for a, b in zip(batch[1:], queued, strict=False))
    rest = queued[group.MAX_JOBS - 1 :]
    assert len(committer._queue) == 6
    assert all(a is b for a, b in zip(committer._queue, rest, strict=True))
    assert not committer._take_queued(batch)  # full: the rest wait for the next leader
    again: list[group.Job] = []
    assert committer._take_queued(again) and len(again) == 6 and not committer._queue
    assert not committer._take_queued(again)  # nothing queued


def test_the_leader_waits_for_a_caller_of_the_last_transaction_until_its_deadline() -> None:
    committer = group.Committer()
    late = group.Job(recorded_at="late")

    def queue_late() -> None:
        time.sleep(0.05)
        with committer._cond:
            late.caller = 7
            committer._queue.append(late)
            committer._arrived.notify()

    committer._missing = {7}  # a caller of the last transaction, not here yet
    committer._deadline = time.monotonic() + 20
    thread = threading.Thread(target=queue_late)
    thread.start()
    batch: list[group.Job] = []
    assert committer._take_queued(batch)  # it waited for it
    thread.join()
    assert batch == [late] and not committer._missing and committer._waited > 0
    # Nobody else expected: no wait; a deadline passed: no wait either.
    assert not committer._take_queued(batch)
    committer._missing = {8}
    committer._deadline = time.monotonic() - 1
    start = time.monotonic()
    assert not committer._take_queued(batch)
    assert time.monotonic() - start < 1


def test_one_thread_appending_alone_never_waits(tmp_path: Path) -> None:
    with _log(tmp_path / "alone.db") as log:
        for n in range(5):
            log.append({"who": n}, recorded_at=T)
        committer = group.queue_of(log)
        assert committer._recent == {threading.get_ident()}
        assert not committer._missing and committer._waited == 0


def test_eight_threads_appending_every_way_keep_one_chain(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "m.db")
    rounds = 30
    acked: dict[int, list[tuple[int, str]]] = {}
    failed: list[str] = []

    def worker(k: int) -> None:
        mine: list[tuple[int, str]] = []
        with _log(path) as log:
            for n in range(rounds):
                who = f"w{k}-{n}"
                kind = n % 4
                try:
                    if n % 7 == 3:
                        log.append_stamped(_indexed(who, fail="raise"))
                    elif kind == 0:
                        mine.append((log.append({"who": who}, recorded_at=T).seq, who))
                    elif kind == 1:
                        r = log.append_many([{"who": who}] * 2, recorded_at=T)
                        mine += [(s, who) for s in r.seqs]
                    elif kind == 2:
                        r = log.append_stamped(_indexed(who))
                        mine.append((r.first_seq, who))
                    else:

                        def change(conn: apsw.Connection, who: str = who, n: int = n) -> list[Any]:
                            conn.execute(
                                "INSERT INTO side(seq, who) VALUES (?, ?)", (-n - 1 - 100 * k, who)
                            )
                            return [{"who": who}]

                        mine.append((log.append_within(change, recorded_at=T).first_seq, who))
                except Refused:
                    failed.append(who)
        acked[k] = mine

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    with _log(path) as log:
        _whole(log)
        stored = {r.seq: r.payload["who"] for r in log.records()}
        every = [pair for k in acked for pair in acked[k]]
        assert len(every) == len(stored)
        assert all(stored[seq] == who for seq, who in every)
        for k in acked:  # one thread's appends are in its own order
            seqs = [s for s, _ in acked[k]]
            assert seqs == sorted(seqs)
        assert failed and not set(failed) & set(stored.values())
        assert not set(failed) & set(_side(path).values())


def test_an_append_from_inside_a_builder_is_refused_not_deadlocked(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "n.db")
    inner: list[BaseException] = []
    with _log(path) as outer, _log(path) as other:

        def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
            try:
                other.append({"who": "inner"}, recorded_at=T)
            except StoreError as e:
                inner.append(e)
            return iter([(T, encode_payload({"who": "outer"}))])

        assert outer.append_stamped(build).first_seq == 0
        assert len(inner) == 1 and "inside an append" in str(inner[0])
        assert _whos(outer) == ["outer"]
        assert other.append({"who": "later"}, recorded_at=T).seq == 1


def test_a_read_only_log_refuses_before_queueing(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "r.db")
    with _log(path) as log:
        log.append({"who": "x"}, recorded_at=T)
    ro = AuditLog(path, origin=ORIGIN, read_only=True)
    with ro, pytest.raises(StoreError, match="read-only"):
        ro.append({"who": "y"}, recorded_at=T)
    assert _queued(path) == 0


# -- SIGKILL: no acknowledged record lost --------------------------------------------------------

_CHILD = r"""
import os, sys, threading
from rensei_routing.store.audit import AuditLog
path, proc = sys.argv[1], sys.argv[2]
T = "2025-03-01T12:00:00.000000Z"

def worker(k):
    with AuditLog(path, origin="rensei-routing/test/group") as log:
        n = 0
        while True:
            seq = log.append({"who": f"{proc}-{k}-{n}"}, recorded_at=T).seq
            os.write(1, f"{seq} {proc}-{k}-{n}\n".encode())  # one write: one whole line
            n += 1

for k in range(8):
    threading.Thread(target=worker, args=(k,), daemon=True).start()
threading.Event().wait()
"""


def _spawn(path: Path, proc: str) -> subprocess.Popen[bytes]:
    with open(path.with_suffix(f".{proc}.err"), "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), proc], stdout=subprocess.PIPE, stderr=err
        )


def _acks(child: subprocess.Popen[bytes], at_least: int) -> Iterator[tuple[int, str]]:
    """The child's acknowledged ``(seq, who)`` lines, read until it is killed."""
    assert child.stdout is not None
    with child.stdout:
        for got, line in enumerate(child.stdout, 1):
            seq, who = line.decode().split()
            if got == at_least:
                child.send_signal(signal.SIGKILL)
            yield int(seq), who


@pytest.mark.slow
def test_sigkill_mid_run_loses_no_acknowledged_record(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "k.db")
    child = _spawn(path, "p")
    acked = list(_acks(child, 400))
    assert child.wait(30) == -signal.SIGKILL, path.with_suffix(".p.err").read_text()
    assert len(acked) >= 400
    with _log(path) as log:
        _whole(log)
        for seq, who in acked:
            assert log.get(seq).payload == {"who": who}


@pytest.mark.slow
def test_two_processes_of_eight_threads_keep_one_chain_through_a_sigkill(tmp_path: Path) -> None:
    path = _home_db(tmp_path / "k2.db")
    first, second = _spawn(path, "a"), _spawn(path, "b")
    results: dict[str, list[tuple[int, str]]] = {}
    readers = [
        threading.Thread(target=lambda c=c, p=p, n=n: results.__setitem__(p, list(_acks(c, n))))
        for c, p, n in ((first, "a", 300), (second, "b", 600))
    ]
    for r in readers:
        r.start()
    for r in readers:
        r.join(120)
    assert first.wait(30) == -signal.SIGKILL and second.wait(30) == -signal.SIGKILL
    with _log(path) as log:
        _whole(log)
        for acked in results.values():
            assert acked
            for seq, who in acked:
                assert log.get(seq).payload == {"who": who}
        assert {who[0] for who in _whos(log)} == {"a", "b"}
