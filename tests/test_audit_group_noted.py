"""Noted jobs (store/audit/group.py, the enforced decisions' noter in store/enforcement.py): a
run of jobs whose records are known before the transaction and whose side write a noter does
for all of them at once must leave exactly what the same jobs leave one at a time through their
builders (``noted=False``): the records and their bytes, the tree, the trip window's rows, each
job's seqs and heads, which jobs are refused, and a failing run's errors. And eight threads of
Enforcers on one home, their decisions noted together, each get a record of their own, and two
processes of them, SIGKILLed, lose no acknowledged record and keep one chain."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.enforce.records import DECISION_RECORD
from rensei_routing.enforce import Enforcer, arm
from rensei_routing.store import db
from rensei_routing.store import enforcement as state
from rensei_routing.store.audit import AuditLog, group
from rensei_routing.store.enforcement import Decision

from .enforce_support import KEEP, NOW, REPO, STAMP, gateway_spawn, make_home
from .shadow_support import registry

T = "2025-03-01T12:00:00.000000Z"
T2 = "2025-03-01T12:00:01.000000Z"
ORIGIN = "rensei-routing/test/noted"
#: The canaries armed in every test database: repository -> its arm's seq ("c" was disarmed).
ARMS = {"a": 5, "b": 7}
BASE_US = 1_000_000_000


def _database(path: Path, window: list[tuple[int, str, int]]) -> Path:
    """A migrated database with the canaries of :data:`ARMS` (and a disarmed ``c``) and the
    trip window's rows ``(seq, repo, at_us)``."""
    with closing(db.connect(path, write=True)) as conn, conn:
        for repo, armed, arm_seq in (("a", 1, ARMS["a"]), ("b", 1, ARMS["b"]), ("c", 0, 3)):
            conn.execute(
                "INSERT INTO enforce_canaries(repo, armed, revision, policy_hash, arm_seq, "
                "override, armed_at, armed_at_us, actor) VALUES (?, ?, 1, 'h', ?, 0, ?, 0, 't')",
                (repo, armed, arm_seq, T),
            )
        conn.executemany(
            "INSERT INTO enforce_decisions(seq, repo, at_us, refused) VALUES (?, ?, ?, 0)", window
        )
    return path


Spec = tuple[bool, str, int, int, int | None, int]  # noted, repo, arm_seq, at, trim, records


def _build(spec: Spec, pairs: list[tuple[str, bytes]]) -> group.Stamped:
    """The plain path of a job: an enforced decision's builder (check, count, trim, yield), or,
    for a job that is not noted, one writing no decision at all."""
    noted, repo, arm_seq, at_us, trim, _ = spec

    def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
        if noted and not state.note_decision(
            conn, repo, first, at_us, False, trim, arm_seq=arm_seq
        ):
            return iter(())
        return iter(pairs)

    return build


def _jobs(specs: list[Spec], compress: Callable[[bytes], bytes] | None, key: object) -> list[Any]:
    jobs = []
    for k, spec in enumerate(specs):
        noted, repo, arm_seq, at_us, trim, records = spec
        pairs = [
            (T if i % 2 == 0 else T2, encode_payload({"k": k, "i": i})) for i in range(records)
        ]
        job = group.Job(stamped=_build(spec, pairs))
        if noted:
            job.pairs = pairs
            job.noter, job.note = state.DECISIONS, Decision(repo, arm_seq, at_us, False, trim)
            if compress is not None:
                job.stored, job.stored_by = [compress(d) for _, d in pairs], key
        jobs.append(job)
    return jobs


def _state(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    with closing(db.connect(path)) as conn:
        return (
            conn.execute("SELECT * FROM audit_records ORDER BY seq").fetchall(),
            conn.execute("SELECT * FROM audit_tree ORDER BY chunk").fetchall(),
            conn.execute("SELECT * FROM enforce_decisions ORDER BY seq").fetchall(),
        )


def _run(
    path: Path, specs: list[Spec], *, noted: bool, precompressed: str, before: int
) -> tuple[Any, list[Any]]:
    """Commit ``before`` plain records, then ``specs`` as one batch; what the database holds
    afterwards, and each job's outcome."""
    with AuditLog(path, origin=ORIGIN) as log:
        for i in range(before):
            log.append({"before": i}, recorded_at=T)
        codec = log._codec(log._write_conn())
        compress, key = {
            "no": (None, None),
            "same": (codec.compress_here, codec.key),
            "other": (lambda b: b"not what the leader makes", "another dictionary"),
        }[precompressed]
        batch = _jobs(specs, compress, key)
        group.commit(log, batch, noted=noted)
        assert bool(log.verify())
    outcomes = [
        (j.committed, j.first, j.count, j.before, j.head, type(j.error).__name__) for j in batch
    ]
    return _state(path), outcomes


specs = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([5, 7, 9]),
        st.integers(0, 50).map(lambda s: BASE_US + s * 1_000),
        st.none() | st.integers(0, 60).map(lambda s: BASE_US + s * 1_000),
        st.integers(1, 3),
    ),
    min_size=1,
    max_size=12,
)
window = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 60)), max_size=8).map(
    lambda rows: [(1_000 + i, r, BASE_US + s * 1_000) for i, (r, s) in enumerate(rows)]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=specs,
    window=window,
    precompressed=st.sampled_from(["no", "same", "other"]),
    before=st.integers(0, 40),
    clash=st.none() | st.integers(0, 20),
)
def test_a_noted_run_leaves_exactly_what_its_builders_leave_one_at_a_time(
    specs: list[Spec],
    window: list[tuple[int, str, int]],
    precompressed: str,
    before: int,
    clash: int | None,
) -> None:
    """``clash``: a trip-window row already at that seq (past the head), so a decision counted
    there is refused by the table: the run is replayed one job at a time and that job alone
    fails, as it does on the plain path."""
    if clash is not None:
        window = [*window, (before + clash, "a", BASE_US)]
    with tempfile.TemporaryDirectory() as tmp:
        fast = _run(
            _database(Path(tmp, "fast.db"), window),
            specs,
            noted=True,
            precompressed=precompressed,
            before=before,
        )
        plain = _run(
            _database(Path(tmp, "plain.db"), window),
            specs,
            noted=False,
            precompressed=precompressed,
            before=before,
        )
    assert fast == plain


def test_a_refused_noted_job_writes_nothing_and_the_next_links_to_the_head(
    tmp_path: Path,
) -> None:
    path = _database(tmp_path / "r.db", [(900, "a", BASE_US - 10**9)])
    specs: list[Spec] = [
        (True, "a", 5, BASE_US, BASE_US - 1, 1),  # counted; trims the old row
        (True, "a", 9, BASE_US, None, 1),  # another arm: refused
        (True, "c", 3, BASE_US, None, 1),  # disarmed: refused
        (True, "b", 7, BASE_US + 1, None, 2),
    ]
    (records, _, decisions), outcomes = _run(
        path, specs, noted=True, precompressed="same", before=2
    )
    assert [o[2] for o in outcomes] == [1, 0, 0, 2]
    assert [o[1] for o in outcomes] == [2, 3, 3, 3]
    assert outcomes[1][3] == outcomes[1][4] == outcomes[0][4]  # a refused job: at the head
    assert [r[0] for r in records] == [0, 1, 2, 3, 4]
    assert [tuple(d) for d in decisions] == [(2, "a", BASE_US, 0), (3, "b", BASE_US + 1, 0)]


def test_the_stored_form_made_outside_the_transaction_is_the_leaders(tmp_path: Path) -> None:
    with AuditLog(_database(tmp_path / "s.db", []), origin=ORIGIN) as log:
        codec = log._codec(log._write_conn())
        data = encode_payload({"record_type": "x", "text": "y" * 500})
        made: list[bytes] = []
        other = threading.Thread(target=lambda: made.append(codec.compress_here(data)))
        other.start()
        other.join()
        assert made == [codec.compress(data)] == [codec.compress_here(data)]


def test_eight_threads_of_enforcers_each_get_a_record_of_their_own(tmp_path: Path) -> None:
    home = make_home(tmp_path, KEEP)
    arm(home, REPO, now=NOW, actor="alice")
    answers: list[list[int]] = [[] for _ in range(8)]
    line = threading.Barrier(8)

    def work(k: int) -> None:
        with Enforcer(home, registry(), clock=lambda: STAMP) as enforcer:
            line.wait()
            for _ in range(25):
                answers[k].append(enforcer.enforce(gateway_spawn()).seq)  # type: ignore[union-attr]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = sorted(s for mine in answers for s in mine)
    assert len(set(seqs)) == 200
    with AuditLog.open(home) as log:
        assert bool(log.verify())
        for s in seqs:
            assert log.get(s).payload["record_type"] == DECISION_RECORD
    with closing(home.connect()) as conn:
        counted = [int(r[0]) for r in conn.execute("SELECT seq FROM enforce_decisions")]
    assert set(counted) <= set(seqs) and counted  # trimmed at most, never another seq


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
    home = make_home(tmp_path, KEEP)
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
