"""Several ``rensei serve`` processes on one PostgreSQL database (issue 23, part 1): a write
through either replica reaches both (LISTEN/NOTIFY: with the polling fallback set far beyond
the test's ceiling, only a notification can deliver it), the change is compiled once, a lost
connection is survived, and a replica whose database stops keeps serving its last snapshot,
whole and flagged ``X-Ruleset-Store: unreachable`` (fail-static), then recovers.

Real serve processes on loopback, a real cluster; every wait is a bounded poll.
"""

from __future__ import annotations

import shlex
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rensei_routing.core.snapshot.envelope import verify_snapshot
from rensei_routing.ops.pgcluster import Cluster, find_bindir, throwaway_cluster
from rensei_routing.store.home import Home

from .test_serve import EXAMPLES, SNAPSHOT, Serve, rensei, serving

pytestmark = pytest.mark.slow

#: The replicas' polling fallback in the notification tests: far beyond every ceiling below.
NO_POLLING = "60"


def _get(url: str, token: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url + SNAPSHOT, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def _revision(serve: Serve, token: str) -> int:
    return int(_get(serve.url, token)[1]["X-Ruleset-Rev"].rsplit("@", 1)[1])


def _until(check: Any, what: str, ceiling_s: float = 20.0) -> float:
    """Seconds until ``check()`` is true, polled every 10 ms, failing past ``ceiling_s``."""
    start = time.monotonic()
    while time.monotonic() - start < ceiling_s:
        if check():
            return time.monotonic() - start
        time.sleep(0.01)
    raise AssertionError(f"timed out after {ceiling_s}s waiting for {what}")


def make_replicas(tmp_path: Path, url: str, n: int = 2) -> list[Path]:
    """``n`` homes of org acme on ``url`` with the same keys (and so the same serve token)."""
    first = tmp_path / "replica-a"
    rensei("init", "--org", "acme", "--home", str(first), "--store", url)
    homes = [first]
    for i in range(1, n):
        home = tmp_path / f"replica-{chr(ord('a') + i)}"
        home.mkdir()
        subprocess.run(["cp", "-rp", str(first / "keys"), str(home / "keys")], check=True)
        rensei("init", "--org", "acme", "--home", str(home), "--store", url)
        homes.append(home)
    rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(first))
    rensei("org", "load", str(EXAMPLES / "org.json"), "--home", str(first))
    return homes


def token_of(home: Path) -> str:
    return (home / "keys" / "serve.token").read_text().strip()


def _compiles(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM control_events WHERE kind = 'snapshot.compile'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_write_through_either_replica_reaches_both_by_notification(
    tmp_path: Path, pg_url: str
) -> None:
    homes = make_replicas(tmp_path, pg_url)
    token = token_of(homes[0])
    with ExitStack() as stack:
        a, b = (stack.enter_context(serving(h, "--watch-interval", NO_POLLING)) for h in homes)
        for serve in (a, b):
            _until(lambda s=serve: _revision(s, token) == 1, "revision 1")
        assert _compiles(pg_url) == 1  # the first compile happened once, on one replica
        figures = []
        for writer, revision in ((homes[1], 2), (homes[0], 3)):
            rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(writer))
            start = time.monotonic()
            for serve in (a, b):
                _until(lambda s=serve, r=revision: _revision(s, token) == r, f"revision {revision}")
            figures.append(time.monotonic() - start)
        print(f"\nwrite -> both replicas serving it: {', '.join(f'{s:.3f}s' for s in figures)}")
        assert _compiles(pg_url) == 3  # each change compiled once, by one replica
        _status, headers, body = _get(b.url, token)
        assert headers["X-Ruleset-Store"] == "ok"
        lookup = Home(homes[0]).snapshot_lookup()
        assert verify_snapshot(body, lookup=lookup).revision == 3


def test_a_killed_connection_is_survived(tmp_path: Path, pg_url: str) -> None:
    """Every connection of the replicas terminated: each reconnects (its listener too) and the
    next write still reaches both."""
    homes = make_replicas(tmp_path, pg_url)
    token = token_of(homes[0])
    with ExitStack() as stack:
        a, b = (stack.enter_context(serving(h, "--watch-interval", NO_POLLING)) for h in homes)
        for serve in (a, b):
            _until(lambda s=serve: _revision(s, token) == 1, "revision 1")
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'rensei' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None and killed[0] >= 2
        for serve in (a, b):
            serve.wait_for(r"control store unreachable, serving the held snapshot")
            assert _get(serve.url, token)[0] == 200
        rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(homes[0]))
        for serve in (a, b):
            _until(lambda s=serve: _revision(s, token) == 2, "revision 2 after reconnecting")
            _until(lambda s=serve: _get(s.url, token)[1]["X-Ruleset-Store"] == "ok", "ok again")


def _pg_ctl(cluster: Cluster, *args: str) -> None:
    from rensei_routing.ops.pgcluster import _as_server_user

    done = subprocess.run(
        _as_server_user([str(find_bindir() / "pg_ctl"), "-D", str(cluster.datadir), *args]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _restart(cluster: Cluster) -> None:
    """Start a stopped cluster again with the options it last ran with."""
    opts = shlex.split((cluster.datadir / "postmaster.opts").read_text())[1:]
    keep = [o for i, o in enumerate(opts) if o != "-D" and (i == 0 or opts[i - 1] != "-D")]
    log = str(cluster.datadir.parent / "server.log")
    _pg_ctl(cluster, "-l", log, "-o", shlex.join(keep), "-w", "start")


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own, to stop and start."""
    with throwaway_cluster() as cluster:
        yield cluster


def test_a_replica_that_loses_the_database_keeps_serving_flagged(
    tmp_path: Path, own_cluster: Cluster
) -> None:
    homes = make_replicas(tmp_path, own_cluster.url)
    token = token_of(homes[0])
    with ExitStack() as stack:
        a, b = (stack.enter_context(serving(h, "--watch-interval", "0.2")) for h in homes)
        for serve in (a, b):
            _until(lambda s=serve: _revision(s, token) == 1, "revision 1")
        before = {s.url: _get(s.url, token)[2] for s in (a, b)}
        _pg_ctl(own_cluster, "-m", "immediate", "-w", "stop")
        for serve in (a, b):
            _until(
                lambda s=serve: _get(s.url, token)[1]["X-Ruleset-Store"] == "unreachable",
                "the fail-static flag",
            )
            for _ in range(5):  # never an error, never another body
                status, headers, body = _get(serve.url, token)
                assert (status, body) == (200, before[serve.url])
                assert headers["X-Ruleset-Rev"] == "acme@1"
        _restart(own_cluster)
        for serve in (a, b):
            _until(lambda s=serve: _get(s.url, token)[1]["X-Ruleset-Store"] == "ok", "recovery")
        rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(homes[1]))
        for serve in (a, b):
            _until(lambda s=serve: _revision(s, token) == 2, "revision 2 after recovery")


def test_a_replica_started_with_the_database_down_says_it_holds_nothing(
    tmp_path: Path, own_cluster: Cluster
) -> None:
    """Issue 29, I2: a replica whose database is down when it starts holds no snapshot and
    answers 503; its log says exactly that (never "serving the held snapshot"), and once the
    database is back it serves the org's snapshot, unflagged, compiled once."""
    (home,) = make_replicas(tmp_path, own_cluster.url, n=1)
    token = token_of(home)
    _pg_ctl(own_cluster, "-m", "immediate", "-w", "stop")
    with serving(home, "--watch-interval", "0.2") as serve:
        serve.wait_for(r"warning: control store unreachable, holding no snapshot: answering 503")
        for _ in range(2):  # the watcher's retries, each logged
            serve.wait_for(r"control store unreachable, holding no snapshot: answering 503 until")
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(serve.url, token)
        assert refused.value.code == 503
        refused.value.close()
        assert "serving the held snapshot" not in serve.log()
        _restart(own_cluster)
        _until(lambda: _get(serve.url, token)[1]["X-Ruleset-Store"] == "ok", "the database back")
        assert _get(serve.url, token)[1]["X-Ruleset-Rev"] == "acme@1"
        assert "serving the held snapshot" not in serve.log()
    # the first request and the watcher both found the org never compiled once the database
    # was back: the data was compiled once, under the compile lock, not once by each
    assert _compiles(own_cluster.url) == 1
