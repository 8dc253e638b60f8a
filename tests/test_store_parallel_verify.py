"""``AuditLog.verify()`` on every core (store/parallel.py, core/audit/ranges.py): the chain cut into
ranges checked in worker processes reaches exactly the one-process walk's verdict (first broken
seq, reason, detail, head), on many generated tampered logs: breaks at range boundaries, inside
ranges, several at once, below and above checkpoints, rehashed by an attacker."""

from __future__ import annotations

import itertools
import random
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.audit.chain import GENESIS_HASH, payload_hash, record_hash
from rensei_routing.core.audit.ranges import check_range, join
from rensei_routing.core.audit.verdict import VerifyResult
from rensei_routing.store import parallel
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

T0 = "2025-03-01T12:00:00.000000Z"
N = 240
WORKERS = 2
#: The smallest range here: a small log still cut into many ranges (16 of 10-30 seqs).
SMALLEST = 10
#: Where the ranges of a log with no checkpoint, or one checkpointed at its head, begin (the
#: cut is the same for both: every record costs alike).
BOUNDARIES = tuple(lo for lo, _ in parallel.cut(0, N, WORKERS, 0, smallest=SMALLEST))
BOUNDARY_SEQS = tuple(s for b in BOUNDARIES for s in (b - 1, b, b + 1) if 0 <= s < N)


def _payload(i: int) -> dict[str, object]:
    return {"decision_id": f"d{i}", "outcome": "selected", "explanation": {"considered": [i]}}


@pytest.fixture
def many_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut even a small log into ranges (the parent decides the ranges; workers only read)."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_RECORDS", 1)
    monkeypatch.setattr(parallel, "MIN_RANGE_RECORDS", SMALLEST)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="acme")
    with AuditLog.open(h) as log:
        for start in range(0, N, 40):  # several batches: several recorded_at-sharing runs
            log.append_many([_payload(i) for i in range(start, start + 40)], recorded_at=T0)
    return h


def _rows(home: Home) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(home.db_path))
    try:
        return list(conn.execute("SELECT * FROM audit_records ORDER BY seq"))
    finally:
        conn.close()


def _canonical(home: Home) -> list[tuple[int, str, str, str, str, bytes]]:
    with AuditLog.open(home) as log:
        return [
            (r.seq, r.recorded_at, r.prev_hash, r.payload_hash, r.record_hash, r.payload_bytes)
            for r in log.records()
        ]


def _sql(home: Home, sql: str, args: tuple[object, ...]) -> None:
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def _rehash_from(home: Home, seq: int, data: bytes) -> None:
    """An attacker with file access: payload ``seq`` becomes ``data``, and every hash from
    there on is recomputed, so the links hold (only a checkpoint can tell)."""
    rows = {r[0]: r for r in _canonical(home)}
    prev = rows[seq][2]
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            for s in sorted(k for k in rows if k >= seq):
                _, at, _, _, _, body = rows[s]
                body = data if s == seq else body
                p_hash = payload_hash(body)
                r_hash = record_hash(s, prev, at, p_hash)
                conn.execute(
                    "UPDATE audit_records SET prev_hash = ?, payload_hash = ?, record_hash = ?,"
                    " payload = ? WHERE seq = ?",
                    (prev, p_hash, r_hash, body, s),
                )
                prev = r_hash
    finally:
        conn.close()


KINDS = ("payload", "record_hash", "prev_hash", "delete", "recorded_at", "dup_key", "rehash")


def _tamper(home: Home, kind: str, seq: int) -> str:
    if kind == "payload":
        _sql(home, "UPDATE audit_records SET payload = ? WHERE seq = ?", (b'{"x":1}', seq))
    elif kind == "record_hash":
        _sql(home, "UPDATE audit_records SET record_hash = ? WHERE seq = ?", (GENESIS_HASH, seq))
    elif kind == "prev_hash":
        _sql(
            home,
            "UPDATE audit_records SET prev_hash = ? WHERE seq = ?",
            ("sha256:" + "1" * 64, seq),
        )
    elif kind == "delete":
        _sql(home, "DELETE FROM audit_records WHERE seq = ?", (seq,))
    elif kind == "recorded_at":
        _sql(home, "UPDATE audit_records SET recorded_at = ? WHERE seq = ?", ("yesterday", seq))
    elif kind == "dup_key":
        data = b'{"a":1,"a":2}'
        _sql(
            home,
            "UPDATE audit_records SET payload = ?, payload_hash = ? WHERE seq = ?",
            (data, payload_hash(data), seq),
        )
    elif any(r[0] == seq for r in _rows(home)):
        _rehash_from(home, seq, b'{"rewritten":' + str(seq).encode() + b"}")
    return kind


def _both(home: Home) -> tuple[VerifyResult, VerifyResult]:
    with AuditLog.open(home) as log:
        return log.verify(workers=1), log.verify(workers=WORKERS)


def _assert_same(home: Home, note: str) -> VerifyResult:
    before = _rows(home)
    one, many = _both(home)
    assert many.to_dict() == one.to_dict(), note
    assert _rows(home) == before  # verify writes nothing
    return one


def test_an_intact_log_verifies_the_same_in_ranges(home: Home, many_ranges: None) -> None:
    result = _assert_same(home, "intact")
    assert result.ok and result.records_checked == N


def test_progress_is_reported_up_to_the_whole_log(home: Home, many_ranges: None) -> None:
    seen: list[int] = []
    with AuditLog.open(home) as log:
        assert log.verify(workers=WORKERS, progress=seen.append).ok
    assert seen and seen[-1] == N and seen == sorted(seen)


@pytest.mark.parametrize(
    "seq",
    [0, *(BOUNDARIES[1] + d for d in (-1, 0, 1)), BOUNDARIES[2] - 1, BOUNDARIES[2], 150, N - 1],
)
@pytest.mark.parametrize(
    "kind", ["payload", "record_hash", "prev_hash", "delete", "recorded_at", "dup_key"]
)
def test_one_break_at_a_boundary_or_inside_names_the_same_seq_and_reason(
    home: Home, many_ranges: None, seq: int, kind: str
) -> None:
    _tamper(home, kind, seq)
    result = _assert_same(home, f"{kind} at {seq}")
    if kind == "delete" and seq == N - 1:  # a shorter chain: the tree's hashes past it tell
        assert result.reason == "tree-overrun" and result.records_checked == N - 1
    assert not result.ok and result.first_broken_seq == seq


@pytest.mark.parametrize("case", range(24))
def test_generated_tampered_logs_match_the_single_walk(
    home: Home, many_ranges: None, case: int
) -> None:
    rng = random.Random(case)
    if case % 3 == 0:  # a checkpoint below some of the damage: its spare of the parse counts
        with AuditLog.open(home) as log:
            log.checkpoint()
    seqs = sorted(
        rng.sample(BOUNDARY_SEQS, rng.randint(1, 2)) + rng.sample(range(N), rng.randint(0, 2))
    )
    kinds = [_tamper(home, rng.choice(KINDS), s) for s in reversed(seqs)]
    _assert_same(home, f"case {case}: {list(zip(seqs, kinds, strict=True))}")


def test_a_rehashed_non_json_record_below_a_checkpoint_is_named(
    home: Home, many_ranges: None
) -> None:
    """The walk that spares the parse below the checkpoint only sees the checkpoint mismatch;
    the strict re-walk (in workers too) names the rewritten record itself."""
    with AuditLog.open(home) as log:
        log.checkpoint()
    _rehash_from(home, 45, b'{"a":1,"a":2}')
    result = _assert_same(home, "rehashed non-JSON below the checkpoint")
    assert (result.first_broken_seq, result.reason) == (45, "unparseable-record")


def test_a_truncated_log_below_a_checkpoint_is_reported_the_same(
    home: Home, many_ranges: None
) -> None:
    with AuditLog.open(home) as log:
        log.checkpoint()
    _sql(home, "DELETE FROM audit_records WHERE seq >= ?", (200,))
    result = _assert_same(home, "truncated")
    assert result.reason == "truncated-below-checkpoint"


def test_an_empty_log_and_a_one_worker_call_take_the_one_process_walk(
    tmp_path: Path, many_ranges: None
) -> None:
    h = Home(tmp_path / "empty")
    h.init(org="acme")
    one, many = _both(h)
    assert one.to_dict() == many.to_dict() and many.ok and many.records_checked == 0
    assert not parallel.wanted(1, 10**9, None)
    assert not parallel.wanted(2, 10**9, "faults")  # a VFS registered in this process only


def test_records_appended_meanwhile_lie_outside_the_ranges(home: Home, many_ranges: None) -> None:
    """The ranges end at the largest seq in the caller's snapshot: the verdict counts exactly
    the records that snapshot holds, however many are appended while the workers run."""
    with AuditLog.open(home) as log, AuditLog.open(home) as writer:
        first = True

        def progress(_done: int) -> None:
            nonlocal first
            if first:
                first = False
                writer.append_many([_payload(i) for i in range(50)], recorded_at=T0)

        result = log.verify(workers=WORKERS, progress=progress)
    assert result.ok and result.records_checked == N


def test_the_ranges_join_in_order_whatever_order_they_finish() -> None:
    """core: the join is a pure function of the outcomes in seq order."""
    from rensei_routing.core.audit.chain import link_rows

    rows = link_rows([b"{}"] * 10, seq=0, prev_hash=GENESIS_HASH, recorded_at=T0)
    parts = [check_range(rows[a:b], {}, parsed_below=0) for a, b in ((0, 3), (3, 3), (3, 10))]
    joined = join(iter(parts), {}, checkpoints=0, parsed_below=0, start_hash=GENESIS_HASH)
    assert joined.ok and joined.records_checked == 10 and joined.head_hash == rows[-1][4]
    swapped = join(
        iter([parts[2], parts[0]]), {}, checkpoints=0, parsed_below=0, start_hash=GENESIS_HASH
    )
    assert (swapped.first_broken_seq, swapped.reason) == (0, "seq-gap")


def test_cli_audit_verify_workers(home: Home, many_ranges: None) -> None:
    """``rensei audit verify --workers N``: the same verdict line and exit code at any N; a
    count below 1 is a usage error (exit 2, one line, nothing verified)."""
    from click.testing import CliRunner

    from rensei_routing.cli import cli

    runner = CliRunner()
    args = ["audit", "verify", "--home", str(home.path)]
    ok = runner.invoke(cli, [*args, "--workers", "2"], catch_exceptions=False)
    assert ok.exit_code == 0 and ok.stdout.startswith(f"intact: {N} records")
    bad = runner.invoke(cli, [*args, "--workers", "0"], catch_exceptions=False)
    assert bad.exit_code == 2 and "Traceback" not in bad.output and bad.stdout == ""
    _tamper(home, "dup_key", 31)
    one = runner.invoke(cli, [*args, "--workers", "1"], catch_exceptions=False)
    two = runner.invoke(cli, [*args, "--workers", "2"], catch_exceptions=False)
    assert one.exit_code == two.exit_code == 1
    assert one.stdout == two.stdout and one.stdout.startswith("broken at seq 31: unparseable")


@pytest.mark.parametrize("kind", ["none", "dup_key", "rehash"])
def test_the_parent_checks_ranges_beside_its_one_worker(
    home: Home, many_ranges: None, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Two processes check ranges, the parent and one worker process: the parent checks ranges
    while the worker starts (here no worker message is read until the parent has checked three)
    and goes on checking after it, and the verdict is still the one walk's (the break at seq
    130 lies in a range the parent or the worker checked)."""
    if kind != "none":
        _tamper(home, kind, 130)
    checked: list[int] = []
    three = threading.Event()
    real_check, real_read = parallel._Local.check, parallel._Pool._read
    started: list[list[str]] = []
    real_popen = parallel.subprocess.Popen

    def popen(args: list[str], **kw: Any) -> Any:
        started.append(args)
        return real_popen(args, **kw)

    def check(self: Any, task: Any, report: Any) -> Any:
        checked.append(task[0])
        if len(checked) >= 3:
            three.set()
        return real_check(self, task, report)

    def read(self: Any, k: int, proc: Any) -> None:
        three.wait(timeout=60)
        real_read(self, k, proc)

    monkeypatch.setattr(parallel.subprocess, "Popen", popen)
    monkeypatch.setattr(parallel._Local, "check", check)
    monkeypatch.setattr(parallel._Pool, "_read", read)
    _assert_same(home, kind)
    assert len(started) == 1  # workers=2: this process and one worker process
    assert len(checked) >= 3 and checked == sorted(checked)
    assert checked[0] == 2  # ranges 0 and 1 were queued for the worker first


def _cost(r: tuple[int, int], below: int, start: int) -> float:
    """A range's cost as ``cut`` counts it: a record parsed strictly (at or above ``below``;
    ``below`` 0: every record, all alike) weighs ``PARSE_WEIGHT``."""
    weight = parallel.PARSE_WEIGHT if below > 0 else 1.0
    at = below if below > 0 else start
    return max(0, min(r[1], at) - r[0]) + weight * max(0, r[1] - max(r[0], at))


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(0, 10**6),
    length=st.integers(0, 2 * 10**6),
    processes=st.integers(1, 16),
    below=st.integers(0, 3 * 10**6),
    smallest=st.integers(1, 5_000),
)
def test_the_cut_tiles_the_log_large_ranges_first(
    start: int, length: int, processes: int, below: int, smallest: int
) -> None:
    """``cut``: consecutive ranges covering exactly ``[start, end)``, none empty, each no
    costlier than the one before (to rounding) and none but the last below the smallest."""
    end = start + length
    ranges = parallel.cut(start, end, processes, below, smallest=smallest)
    if length == 0:
        assert ranges == []
        return
    assert ranges[0][0] == start and ranges[-1][1] == end
    assert all(a < b for a, b in ranges)
    assert all(x[1] == y[0] for x, y in itertools.pairwise(ranges))
    costs = [_cost(r, below, start) for r in ranges]
    assert all(x + parallel.PARSE_WEIGHT + 1 >= y for x, y in itertools.pairwise(costs))
    assert all(c + 1 >= smallest for c in costs[:-1])


def test_the_strictly_parsed_tail_is_cut_finer() -> None:
    """At 1,000,000 records on 2 cores with the default path's last 10,000 parsed: few large
    ranges first, and the parsed tail in ranges of fewer records than the smallest."""
    tail = parallel.cut(0, 1_000_000, 2, 990_000)
    assert len(tail) < 64 and tail[0][1] - tail[0][0] > 100_000
    parsed = [b - a for a, b in tail if a >= 990_000]
    assert parsed and max(parsed) < parallel.MIN_RANGE_RECORDS
    assert all(b - a >= parallel.MIN_RANGE_RECORDS for a, b in tail[:-1] if b <= 990_000)
