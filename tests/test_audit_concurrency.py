"""Several processes appending to one home's log produce one unbroken chain."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

WORKERS = 4
EACH = 2_500

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home

    home, worker, each, go = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with AuditLog.open(Home(home)) as log:
        log.count()  # connections open before the start line
        while not os.path.exists(go):
            time.sleep(0.005)
        for i in range(each):
            log.append({"worker": worker, "i": i}, recorded_at="2025-03-01T12:00:00.000000Z")
            time.sleep(0.0002)  # let the others take the lock between appends
    """
)


@pytest.mark.slow
def test_four_processes_append_one_unbroken_chain(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(home.path), str(w), str(EACH), str(go)],
            stderr=subprocess.PIPE,
        )
        for w in range(WORKERS)
    ]
    time.sleep(0.5)
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err.decode()

    with AuditLog.open(home) as log:
        result = log.verify()
        assert result.ok, result
        assert result.records_checked == log.count() == WORKERS * EACH
        records = log.tail(WORKERS * EACH)
    assert [r.seq for r in records] == list(range(WORKERS * EACH))  # none repeated or skipped
    seen = [json.loads(r.payload_bytes) for r in records]
    assert len({(p["worker"], p["i"]) for p in seen}) == WORKERS * EACH  # each append once
    for w in range(WORKERS):  # each worker's appends keep its own order
        assert [p["i"] for p in seen if p["worker"] == w] == list(range(EACH))
    switches = sum(a["worker"] != b["worker"] for a, b in itertools.pairwise(seen))
    print(f"writer switches along the chain: {switches}")
    assert switches >= WORKERS - 1
