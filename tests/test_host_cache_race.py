"""Concurrent syncs into one host cache, from real processes (issue 19 #2): however the accepts
of several revisions interleave (``host sync --from`` commands, ``cache.accept`` and the
``host run`` poll step in racing worker processes), the cache ends holding the newest revision
offered, and an older revision is never held after a newer one was adopted."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal
from rensei_routing.errors import SnapshotError
from rensei_routing.host.cache import HostCache, HostConfig

pytestmark = pytest.mark.slow

KEY = signing.PrivateKey(bytes(range(32)))
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
RENSEI = (sys.executable, "-m", "rensei_routing.cli")


def signed(revision: int) -> RulesetSnapshot:
    """Revision ``revision`` of org_a, sealed with the project's own envelope and key."""
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=(NOW + timedelta(seconds=revision)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections={
            "poolHostInventory": {
                "pools": [{"id": f"pool-{i}", "status": "active"} for i in range(revision)],
                "hosts": [],
            }
        },
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
    )


def _write_revisions(folder: Path, top: int) -> dict[int, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for rev in range(1, top + 1):
        out[rev] = folder / f"r{rev}.json"
        out[rev].write_bytes(signed(rev).to_bytes())
    return out


def _fresh_cache(directory: Path, r1: Path) -> HostCache:
    cache = HostCache(directory)
    cache.trust(KEY.public_key)
    assert cache.accept(r1.read_bytes(), now=NOW, source="setup").adopted
    return cache


def _worker(tasks: Any, barrier: Any, results: Any) -> None:
    """Race one offer per round: wait at the barrier with the others, then accept."""
    from rensei_routing.errors import SnapshotError
    from rensei_routing.host.poll import poll_once

    while (task := tasks.get()) is not None:
        directory, source, via_poll = task
        cache = HostCache(Path(directory))
        barrier.wait(30)
        try:
            if via_poll:  # what `host run` does on each poll
                line = poll_once(cache, HostConfig(source_file=source), now=NOW)
                outcome = line.split(":")[0]
            else:
                data = Path(source).read_bytes()
                outcome = "adopted" if cache.accept(data, now=NOW, source=source).adopted else "x"
        except SnapshotError as e:
            outcome = type(e).__name__
        results.put((source, outcome))


def test_racing_worker_processes_never_roll_the_cache_back(tmp_path: Path) -> None:
    workers, rounds = 4, 40
    files = _write_revisions(tmp_path / "snaps", 1 + workers)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    queues = [ctx.Queue() for _ in range(workers)]
    procs = [ctx.Process(target=_worker, args=(q, barrier, results)) for q in queues]
    for p in procs:
        p.start()
    try:
        for n in range(rounds):
            cache = _fresh_cache(tmp_path / f"round{n}", files[1])
            # each worker offers one of r2..r5, the assignment rotated every round
            offers = [files[2 + (i + n) % workers] for i in range(workers)]
            for i, (q, offer) in enumerate(zip(queues, offers, strict=True)):
                q.put((str(cache.directory), str(offer), (i + n) % 2 == 0))
            outcomes = dict(results.get(timeout=60) for _ in range(workers))
            held = cache.load()
            assert held is not None
            adopted = [int(Path(s).stem[1:]) for s, o in outcomes.items() if o == "adopted"]
            assert max(adopted) == 1 + workers, outcomes  # the newest offer was adopted ...
            assert held.revision == 1 + workers, (n, outcomes)  # ... and is what is held
            assert held.to_bytes() == files[1 + workers].read_bytes()
    finally:
        for q in queues:
            q.put(None)
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def test_racing_host_sync_commands_end_on_the_newest_revision(tmp_path: Path) -> None:
    files = _write_revisions(tmp_path / "snaps", 4)
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
    for n in range(6):
        home = tmp_path / f"home{n}"
        _fresh_cache(home / "host", files[1])
        order = [files[2], files[3], files[4]]
        order = order[n % 3 :] + order[: n % 3]
        procs = [
            subprocess.Popen(
                [*RENSEI, "host", "sync", "--from", str(f), "--home", str(home)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for f in order
        ]
        said = {}
        for f, p in zip(order, procs, strict=True):
            out, err = p.communicate(timeout=120)
            said[f.stem] = (p.returncode, out.strip() or err.strip())
            assert "Traceback" not in err
        held = HostCache(home / "host").load()
        assert held is not None and held.revision == 4, said
        assert said["r4"][0] == 0 and said["r4"][1].startswith("adopted"), said
        for name in ("r2", "r3"):  # adopted before r4, or refused as a rollback: never after
            code, line = said[name]
            assert (code == 0 and line.startswith("adopted")) or "older than" in line, said


_HOLD_THE_LOCK = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_held_lock_makes_accept_wait_then_refuse_and_a_killed_holder_frees_it(
    tmp_path: Path,
) -> None:
    files = _write_revisions(tmp_path / "snaps", 2)
    cache = _fresh_cache(tmp_path / "host", files[1])
    before = cache.snapshot_path.read_bytes()
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK, str(cache.directory / "lock")],
        stdout=subprocess.PIPE,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        waiting = HostCache(cache.directory, lock_wait_s=0.2)
        with pytest.raises(SnapshotError, match="lock"):
            waiting.accept(files[2].read_bytes(), now=NOW, source="second")
        assert cache.snapshot_path.read_bytes() == before
        last = cache.last_fetch()
        assert last is not None and last["ok"] is False and "lock" in last["detail"]
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    assert waiting.accept(files[2].read_bytes(), now=NOW, source="second").adopted
    assert cache.load() == signed(2)
