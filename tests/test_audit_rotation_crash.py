"""Rotation under fire (issue 21): a real process rotating the audit log is SIGKILLed at each
step (the ``RENSEI_TEST_CRASH_AT`` hook of :mod:`rensei_routing.store.audit.rotation`), and so is a
prune; the home then opens and verifies, in the old layout or the new one, with every record
exactly once, no gap and one head. Four real processes appending while rotations run keep one
chain: seqs ``0..N-1``, no gap, no duplicate, every acknowledged append stored once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from rensei_routing.errors import SegmentError
from rensei_routing.store.audit import AuditLog, rotation
from rensei_routing.store.audit.recovery import catalog_of
from rensei_routing.store.audit.segments import segments_dir
from rensei_routing.store.home import Home

T = "2025-03-01T12:00:00.000000Z"

_ROTATE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rensei_routing.store.audit import rotation
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home

    with AuditLog.open(Home(Path(sys.argv[1]))) as log:
        if sys.argv[2] == "rotate":
            rotation.rotate(log)
        else:
            rotation.prune(log, before=int(sys.argv[3]), exported=[Path(sys.argv[4])])
    """
)


def _child(env_step: str | None, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop(rotation.CRASH_ENV, None)
    if env_step is not None:
        env[rotation.CRASH_ENV] = env_step
    return subprocess.run(
        [sys.executable, "-c", _ROTATE, *args], env=env, capture_output=True, timeout=120
    )


def _home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    with AuditLog.open(home) as log:
        log.append_many([{"n": i} for i in range(6)], recorded_at=T)
        assert rotation.rotate(log) is not None  # 0-5 sealed: the crash hits the second one
        log.append_many([{"n": i} for i in range(6, 20)], recorded_at=T)
        log.checkpoint()
    return home


def _check_one_chain(home: Home, n: int) -> list[str]:
    """Open, verify, and show the chain whole: seqs 0..n-1 once each, one head. Returns the
    catalogued segment names."""
    with AuditLog.open(home) as log:
        verdict = log.verify_segments()
        assert verdict.result.ok, verdict.result
        assert verdict.result.records_checked == n
        records = list(log.records())
        assert [r.seq for r in records] == list(range(n))
        assert [r.payload["n"] for r in records] == list(range(n))
        assert log.head() == (n, records[-1].record_hash)  # one head
        catalog = catalog_of(log)
    with closing(home.connect()) as conn:
        low = conn.execute("SELECT min(seq) FROM audit_records").get
    if low is not None:  # the live segment starts right after the last sealed one
        assert low == catalog[-1].last_seq + 1
    return [s.name for s in catalog]


@pytest.mark.parametrize("step", ["locked", "copied", "sealed", "renamed", "committed"])
def test_a_rotation_killed_at_each_step_leaves_the_old_or_the_new_layout(
    tmp_path: Path, step: str
) -> None:
    home = _home(tmp_path)
    killed = _child(step, str(home.path), "rotate")
    assert killed.returncode == -9, killed.stderr.decode()
    names = _check_one_chain(home, 20)
    files = sorted(os.listdir(segments_dir(home.db_path)))
    if step == "committed":
        assert names == ["0-5", "6-19"]  # the new layout
    else:
        assert names == ["0-5"]  # the old layout, and what the rotation left is cleaned up
    assert files == [".lock", *(f"{n}.db" for n in names)]
    with AuditLog.open(home) as log:  # and the log goes on: append, rotate, verify
        log.append({"n": 20}, recorded_at=T)
        assert rotation.rotate(log) is not None
    assert _check_one_chain(home, 21)[-1].endswith("-20")


@pytest.mark.parametrize("step", ["prune-marked", "prune-one"])
def test_a_prune_killed_after_its_commit_ends_pruned(tmp_path: Path, step: str) -> None:
    home = _home(tmp_path)
    with AuditLog.open(home) as log:
        assert rotation.rotate(log) is not None  # 0-5 and 6-19 sealed
        log.append({"n": 20}, recorded_at=T)
        export = tmp_path / "e.jsonl"
        from rensei_routing.core.audit.archive import export_line

        export.write_bytes(b"".join(export_line(r) for r in log.records()))
    killed = _child(step, str(home.path), "prune", "20", str(export))
    assert killed.returncode == -9, killed.stderr.decode()
    with AuditLog.open(home) as log:
        verdict = log.verify_segments()
        assert verdict.result.ok and verdict.first_seq == 20
        assert [s.name for s in verdict.pruned] == ["0-5", "6-19"]
        assert [r.seq for r in log.records()] == [20]
    assert os.listdir(segments_dir(home.db_path)) == [".lock"]


_APPENDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home

    home, who = Home(Path(sys.argv[1])), int(sys.argv[2])
    count, go = int(sys.argv[3]), Path(sys.argv[4])
    for _ in range(6000):  # wait (bounded) for the start line
        if go.exists():
            break
        time.sleep(0.005)
    with AuditLog.open(home) as log:
        n = 0
        while n < count:
            if n % 4 == 3:
                batch = [{"who": who, "n": n + k} for k in range(min(3, count - n))]
                result = log.append_many(batch, recorded_at="2025-03-01T12:00:00.000000Z")
                for k, seq in enumerate(result.seqs):
                    print(seq, who, n + k, flush=True)
                n += len(batch)
            else:
                rec = log.append({"who": who, "n": n}, recorded_at="2025-03-01T12:00:00.000000Z")
                print(rec.seq, who, n, flush=True)
                n += 1
    """
)


def test_four_processes_appending_while_rotations_run_keep_one_chain(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("[audit]\nrotate_at_records = 37\n")  # the writers rotate too
    go = tmp_path / "go"
    per = 120
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, str(home.path), str(w), str(per), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(4)
    ]
    go.touch()
    during = 0
    with AuditLog.open(home) as log:
        for _ in range(10_000):  # bounded: until every writer is done
            running = any(p.poll() is None for p in procs)
            try:
                if rotation.rotate(log) is not None and running:
                    during += 1
            except SegmentError:  # nothing live to seal at that moment
                pass
            if not running:
                break
    acked: list[tuple[int, int, int]] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        acked += [tuple(map(int, line.split())) for line in out.decode().splitlines()]  # type: ignore[misc]
    total = 4 * per
    assert sorted(seq for seq, _, _ in acked) == list(range(total))  # no gap, no duplicate
    with AuditLog.open(home) as log:
        verdict = log.verify_segments()
        assert verdict.result.ok and verdict.result.records_checked == total, verdict.result
        stored = {r.seq: (r.payload["who"], r.payload["n"]) for r in log.records()}
        names = [s.name for s in catalog_of(log)]
    assert sorted(stored) == list(range(total))
    assert all(stored[seq] == (who, n) for seq, who, n in acked)  # each append stored once
    assert during >= 1 and len(names) >= 3  # rotations ran while the writers appended
