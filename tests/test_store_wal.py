"""The WAL checkpoint policy: a long ``verify`` beside a writer lets the WAL grow while it holds
its snapshot, and once both are done the WAL is back under :data:`db.WAL_SIZE_LIMIT`, even with
another connection still open (so the last close does not simply delete it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rensei_routing.store import db
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

T = "2025-03-01T12:00:00.000000Z"

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home
    home, stop = Path(sys.argv[1]), Path(sys.argv[2])
    n = 0
    with AuditLog.open(Home(home)) as log:
        print("ready", flush=True)
        while not stop.exists():
            log.append({"n": n, "pad": "x" * 300}, recorded_at="2025-03-01T12:00:00.000000Z")
            n += 1
        for _ in range(2 * 1000):  # a reader-free stretch: checkpoints can reset the WAL again
            log.append({"n": n, "pad": "x" * 300}, recorded_at="2025-03-01T12:00:00.000000Z")
            n += 1
    print(n)
    """
)


@pytest.mark.slow
def test_a_long_verify_beside_a_writer_leaves_a_bounded_wal(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init()
    wal = Path(f"{home.db_path}-wal")
    with AuditLog.open(home) as log:
        log.append_many(({"seed": i} for i in range(30_000)), recorded_at=T)
    bystander = db.connect(home.db_path)  # e.g. a long-running process: the WAL file stays
    stop = tmp_path / "stop"
    peak = 0

    def slowly(checked: int) -> None:
        # every 10,000 records: hold the verify's read snapshot until the writer has grown the
        # WAL past the bound (however loaded the machine), at most 60 s
        nonlocal peak
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            peak = max(peak, wal.stat().st_size)
            if peak > 2 * db.WAL_SIZE_LIMIT:
                break
            time.sleep(0.05)

    try:
        with subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(home.path), str(stop)],
            stdout=subprocess.PIPE,
            text=True,
        ) as writer:
            assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
            with AuditLog.open(home) as log:
                result = log.verify(progress=slowly)
            stop.touch()
            appended = int(writer.communicate(timeout=120)[0])
            assert writer.returncode == 0
        assert result.ok and result.records_checked >= 30_000
        final = wal.stat().st_size
        print(f"appends {appended}, WAL peak {peak} bytes, after {final} bytes")
        assert peak > db.WAL_SIZE_LIMIT  # the verify really held the WAL back
        assert final <= db.WAL_SIZE_LIMIT
    finally:
        db.close_quietly(bystander)
    with AuditLog.open(home) as log:
        assert log.verify().ok
    assert os.path.exists(home.db_path)
