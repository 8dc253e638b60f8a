"""The budget posture's local cap, counted in a real SQLite file: processes racing for a cap of
K admit exactly K, and the counter still fails closed whatever the cap says."""

from __future__ import annotations

import subprocess
import sys
from contextlib import closing
from pathlib import Path

from rensei_routing.store.budget import LocalCaps
from rensei_routing.store.db import connect

_RACER = r"""
import sys
from contextlib import closing
from pathlib import Path
from rensei_routing.store.budget import LocalCaps
from rensei_routing.store.db import connect
def down():
    raise ConnectionError("live-delivery signal unreachable")
with closing(connect(Path(sys.argv[1]), write=True)) as conn:
    caps = LocalCaps(conn)
    got = [caps.admit("proj", read_counter=lambda: 0, limit=100, read_live_signal=down,
                      local_cap=int(sys.argv[2])).admitted for _ in range(10)]
print(sum(got))
"""


def test_racing_processes_admit_exactly_the_cap(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with closing(connect(db, write=True)):
        pass
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(db), "7"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    admitted = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        admitted += int(out)
    assert admitted == 7
    with closing(connect(db)) as conn:
        assert LocalCaps(conn).inflight("proj") == 7


def test_counter_fails_closed_and_release_frees_the_cap(tmp_path: Path) -> None:
    def down() -> bool:
        raise TimeoutError

    with closing(connect(tmp_path / "c.db", write=True)) as conn:
        caps = LocalCaps(conn)

        def broken_counter() -> int:
            raise OSError("counter store down")

        res = caps.admit(
            "p", read_counter=broken_counter, limit=9, read_live_signal=down, local_cap=5
        )
        assert (res.admitted, res.reason) == (False, "counter-unavailable")
        assert caps.inflight("p") == 0  # nothing counted for a refused launch
        assert (
            caps.admit(
                "p", read_counter=lambda: 1, limit=9, read_live_signal=down, local_cap=1
            ).reason
            == "local-cap"
        )
        refused = caps.admit(
            "p", read_counter=lambda: 1, limit=9, read_live_signal=down, local_cap=1
        )
        assert (refused.admitted, refused.reason) == (False, "local-cap-reached")
        # a healthy signal does not touch the local count
        assert (
            caps.admit(
                "p", read_counter=lambda: 1, limit=9, read_live_signal=lambda: True, local_cap=1
            ).reason
            == "within-limit"
        )
        assert caps.inflight("p") == 1
        caps.release("p")
        caps.release("p")  # never below zero
        assert caps.inflight("p") == 0
