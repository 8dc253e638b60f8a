"""The coming wait (store/audit/group.py, ``Committer.coming``): a thread that has started a
request ending in an append says so, and a leader that becomes one while such a request is
under way waits for its append (bounded by the last transaction's duration and
``MAX_PAUSE_S``) before it begins, so both commit in one transaction. A request that ends
without appending holds a leader no longer than the bound; a thread appending alone, or one
that never said it was coming, never waits. The records are the same whichever way they are
batched: eight threads of Enforcers each get a record of their own, and two processes of them,
SIGKILLed, lose no acknowledged record and keep one chain."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rensei_routing.core.enforce.records import DECISION_RECORD
from rensei_routing.enforce import Enforcer, arm
from rensei_routing.store.audit import AuditLog, group
from rensei_routing.store.home import ConnectOptions

from .enforce_support import NOW, REPO, STAMP, gateway_spawn, make_home
from .shadow_support import registry

T = "2025-03-01T12:00:00.000000Z"
ORIGIN = "rensei-routing/test/coming"


def _log(path: Path) -> AuditLog:
    return AuditLog(path, origin=ORIGIN, options=ConnectOptions())


def _when(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_leader_waits_for_a_coming_caller_and_commits_it_with_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group, "MAX_PAUSE_S", 30.0)  # a bound no slow machine reaches
    with _log(tmp_path / "a.db") as log, _log(tmp_path / "a.db") as other:
        log.append({"who": "first"}, recorded_at=T)  # opens the writer
        committer = group.queue_of(log)
        assert group.queue_of(other) is committer
        committer.last_s = 30.0
        said = threading.Event()
        done: list[int] = []

        def late() -> None:
            committer.coming()
            said.set()
            _when(lambda: committer._leader is not None)  # the leader is waiting for it
            done.append(other.append({"who": "late"}, recorded_at=T).seq)
            committer.gone()

        thread = threading.Thread(target=late)
        thread.start()
        said.wait()
        mine = log.append({"who": "leader"}, recorded_at=T).seq
        thread.join()
        # One transaction held both: its callers are both threads.
        assert committer._recent == {threading.get_ident(), thread.ident}
        assert sorted([mine, *done]) == [1, 2]
        assert [r.payload["who"] for r in log.records()] == ["first", "leader", "late"]
        assert log.verify()
        assert not committer._coming


def test_a_request_that_never_appends_holds_a_leader_no_longer_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group, "MAX_PAUSE_S", 0.2)
    with _log(tmp_path / "b.db") as log:
        log.append({"who": "first"}, recorded_at=T)
        committer = group.queue_of(log)
        said, leave = threading.Event(), threading.Event()

        def idle() -> None:
            committer.coming()
            said.set()
            leave.wait()
            committer.gone()

        thread = threading.Thread(target=idle)
        thread.start()
        said.wait()
        committer.last_s = 10.0  # the bound is MAX_PAUSE_S
        start = time.monotonic()
        log.append({"who": "waited"}, recorded_at=T)
        waited = time.monotonic() - start
        assert 0.19 <= waited < 5.0
        leave.set()
        thread.join()
        assert not committer._coming
        committer.last_s = 10.0
        start = time.monotonic()
        log.append({"who": "alone"}, recorded_at=T)  # nobody coming: no wait
        assert time.monotonic() - start < 0.19
        assert [r.payload["who"] for r in log.records()] == ["first", "waited", "alone"]


def test_an_enforcer_alone_never_waits_and_leaves_nobody_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group, "MAX_PAUSE_S", 30.0)
    home = make_home(tmp_path)
    arm(home, REPO, now=NOW, actor="alice")
    with Enforcer(home, registry(), clock=lambda: STAMP) as enforcer:
        enforcer.enforce(gateway_spawn())  # opens the log
        committer = group.queue_of(enforcer._audit())
        committer.last_s = 30.0
        start = time.monotonic()
        for _ in range(20):
            assert enforcer.enforce(gateway_spawn()).seq  # type: ignore[union-attr]
            assert not committer._coming
        assert time.monotonic() - start < 10.0


def test_eight_threads_of_enforcers_each_get_a_record_of_their_own(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    arm(home, REPO, now=NOW, actor="alice")
    answers: list[list[int]] = [[] for _ in range(8)]
    line = threading.Barrier(8)
    queues: list[group.Committer] = []

    def work(k: int) -> None:
        with Enforcer(home, registry(), clock=lambda: STAMP) as enforcer:
            enforcer.enforce(gateway_spawn())  # opens the log: from here on, it says it's coming
            queues.append(group.queue_of(enforcer._audit()))
            line.wait()
            for _ in range(25):
                answers[k].append(enforcer.enforce(gateway_spawn()).seq)  # type: ignore[union-attr]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [s for mine in answers for s in mine]
    assert len(seqs) == 200 and len(set(seqs)) == 200
    assert all(q is queues[0] for q in queues) and not queues[0]._coming
    with AuditLog.open(home) as log:
        assert bool(log.verify())
        for s in seqs:
            assert log.get(s).payload["record_type"] == DECISION_RECORD


_CHILD = r"""
import os, sys, threading
from pathlib import Path
from rensei_routing.enforce import Enforcer
from rensei_routing.store.home import Home
from tests.enforce_support import STAMP, gateway_spawn
from tests.shadow_support import registry

home = Home(Path(sys.argv[1]))

def worker():
    with Enforcer(home, registry(), clock=lambda: STAMP) as enforcer:
        while True:
            os.write(1, f"{enforcer.enforce(gateway_spawn()).seq}\n".encode())

for _ in range(8):
    threading.Thread(target=worker, daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.slow
def test_two_processes_of_eight_enforcer_threads_lose_no_acknowledged_record_to_a_sigkill(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    arm(home, REPO, now=NOW, actor="alice")
    root = Path(__file__).resolve().parent.parent
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(home.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=root,
        )
        for _ in range(2)
    ]
    acked: list[int] = []
    for child in children:  # each killed after 150 acknowledged answers
        assert child.stdout is not None
        with child.stdout:
            for got, line in enumerate(child.stdout, 1):
                acked.append(int(line))
                if got == 150:
                    child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    assert len(acked) >= 300 and len(set(acked)) == len(acked)
    with AuditLog.open(home) as log:
        assert bool(log.verify())
        for seq in acked:
            assert log.get(seq).payload["record_type"] == DECISION_RECORD
