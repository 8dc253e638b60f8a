"""Crash safety: a writer killed with SIGKILL at random moments loses no acknowledged append."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

KILLS = 24

_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home

    run = int(sys.argv[2])
    out = sys.stdout
    with AuditLog.open(Home(Path(sys.argv[1]))) as log:
        log.count()
        out.write("ready\\n")
        out.flush()
        n = 0
        while True:
            if n % 3 == 2:  # every third step is a batch of five in one transaction
                batch = [{"run": run, "n": n + k, "pad": "x" * 200} for k in range(5)]
                result = log.append_many(batch, recorded_at="2025-03-01T12:00:00.000000Z")
                for k, seq in enumerate(result.seqs):
                    out.write(f"{seq} {run} {n + k}\\n")
                n += 5
            else:
                rec = log.append({"run": run, "n": n, "pad": "x" * 200},
                                 recorded_at="2025-03-01T12:00:00.000000Z")
                out.write(f"{rec.seq} {run} {n}\\n")
                n += 1
            out.flush()
    """
)


def _acknowledged(output: bytes) -> list[tuple[int, int, int]]:
    lines = output.decode().split("\n")[:-1]  # a line cut by the kill has no newline: ignore it
    return [tuple(map(int, line.split())) for line in lines if line != "ready"]  # type: ignore[misc]


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_acknowledged_append(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    acknowledged: dict[int, tuple[int, int]] = {}
    for run in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(home.path), str(run)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n", child.stderr.read() if child.stderr else b""
        time.sleep(rng.uniform(0.0, 0.12))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, err.decode()
        for seq, r, n in _acknowledged(out):
            assert seq not in acknowledged, f"seq {seq} acknowledged twice (seed {seed})"
            acknowledged[seq] = (r, n)

        with AuditLog.open(home) as log:
            result = log.verify()
            assert result.ok, f"{result} after kill {run} (seed {seed})"
            for seq, (r, n) in acknowledged.items():
                if r == run:
                    payload = log.get(seq).payload
                    assert (payload["run"], payload["n"]) == (r, n), f"seed {seed}"

    assert len(acknowledged) > KILLS, f"children barely ran (seed {seed})"
    with AuditLog.open(home) as log:
        assert log.verify().records_checked >= max(acknowledged) + 1
