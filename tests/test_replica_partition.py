"""A replica partitioned from the database never shadows the healthy one (issue 29, H1, the
review's ``replica_partition.sh``): two real ``rensei serve`` replicas on one real PostgreSQL,
replica A reaching it through a TCP proxy of ours (``tests/tcpproxy.py``) that is then cut. A
keeps serving revision 1 flagged ``X-Ruleset-Store: unreachable`` (fail-static); a revocation
written through B is revision 2. A host polling "A then B" (a real ``host run`` process) adopts
B's revision 2, a claim on the revoked grant is refused, and with the host already holding
revision 2, ``host sync --endpoint A --endpoint B`` succeeds from B instead of exiting 1 on A's
older copy. Every wait is a bounded poll."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from rensei_routing.host.cache import host_cache

from .tcpproxy import TcpProxy
from .test_serve import EXAMPLES, SNAPSHOT, _env, rensei, serving

pytestmark = pytest.mark.slow


def _headers(url: str, token: str) -> dict[str, str]:
    request = urllib.request.Request(url + SNAPSHOT, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
        return dict(response.headers)


def _until(check: Callable[[], bool], what: str, ceiling_s: float = 60.0) -> None:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {ceiling_s}s waiting for {what}")


def _held(home: Path) -> tuple[int, int]:
    """The host's cached revision and its rollback floor, read from disk."""
    cache = host_cache(home)
    snap = cache.load()
    floor = cache.last_adopted()
    assert snap is not None and floor is not None
    return snap.revision, int(floor["revision"])


def _claim(home: Path) -> subprocess.CompletedProcess[str]:
    return rensei(
        "host", "claim", "--pool", "local-a", "--project", "acme-web", "--home", str(home),
        check=False,
    )  # fmt: skip


def test_a_replica_cut_off_from_the_database_does_not_shadow_the_healthy_one(
    tmp_path: Path, pg_url: str
) -> None:
    target = int(pg_url.rsplit(":", 1)[1].split("/", 1)[0])
    with ExitStack() as stack:
        proxy = stack.enter_context(TcpProxy(target))
        url_b = pg_url
        url_a = pg_url.replace(f":{target}/", f":{proxy.port}/")
        a_home, b_home, host = tmp_path / "a", tmp_path / "b", tmp_path / "host"
        rensei("init", "--org", "acme", "--home", str(a_home), "--store", url_a)
        b_home.mkdir()
        subprocess.run(["cp", "-rp", str(a_home / "keys"), str(b_home / "keys")], check=True)
        rensei("init", "--org", "acme", "--home", str(b_home), "--store", url_b)
        rensei("org", "load", str(EXAMPLES / "org.json"), "--home", str(b_home))
        rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(b_home))
        args = ("--reseal-after", "3", "--watch-interval", "0.2")
        a = stack.enter_context(serving(a_home, *args))
        b = stack.enter_context(serving(b_home, *args))
        token_file = a_home / "keys" / "serve.token"
        token = token_file.read_text().strip()
        for replica in (a, b):
            _until(lambda r=replica: _headers(r.url, token)["X-Ruleset-Rev"] == "acme@1", "@1")
        assert proxy.connections > 0  # A really reaches the database through the proxy

        rensei("init", "--org", "acme", "--home", str(host))
        rensei("host", "trust", "--from-home", str(a_home), "--home", str(host))
        sync = (
            *("host", "sync", "--endpoint", a.url, "--endpoint", b.url),
            *("--token-file", str(token_file), "--home", str(host)),
        )
        rensei(*sync)
        assert _held(host) == (1, 1)
        assert _claim(host).returncode == 0  # the grant admits before the revocation

        proxy.cut()  # A is partitioned from the database, alive, serving what it holds
        _until(lambda: _headers(a.url, token)["X-Ruleset-Store"] == "unreachable", "A flagged")
        org = json.loads((EXAMPLES / "org.json").read_text())
        grants = org["capacityProfiles"]["grants"]
        org["capacityProfiles"]["grants"] = [g for g in grants if g["id"] != "general.all"]
        revoked = tmp_path / "org-revoked.json"
        revoked.write_text(json.dumps(org))
        rensei("org", "load", str(revoked), "--home", str(b_home))
        _until(lambda: _headers(b.url, token)["X-Ruleset-Rev"] == "acme@2", "B serving @2")
        seen_a = _headers(a.url, token)
        assert (seen_a["X-Ruleset-Rev"], seen_a["X-Ruleset-Store"]) == ("acme@1", "unreachable")

        log_path = tmp_path / "host-run.log"
        with log_path.open("wb") as log:
            run = subprocess.Popen(
                [sys.executable, "-m", "rensei_routing.cli", "host", "run", "--interval",
                 "0.5", "--jitter", "0", "--home", str(host)],
                stdout=subprocess.DEVNULL, stderr=log, env=_env(),
            )  # fmt: skip
            try:
                _until(lambda: _held(host)[0] == 2, "the host adopting B's revision 2")
            finally:
                run.send_signal(signal.SIGTERM)
                run.wait(30)
        text = log_path.read_text()
        assert "adopted: acme@2" in text and f"from {b.url}" in text, text
        assert f"not adopted: {a.url}: acme@1" in text and "its store unreachable" in text
        assert "Traceback" not in text
        assert _held(host) == (2, 2)
        status = json.loads(rensei("host", "status", "--json", "--home", str(host)).stdout)
        assert status["snapshot"]["rulesetRev"] == "acme@2"
        assert (status["lastFetch"]["source"], status["lastFetch"]["ok"]) == (b.url, True)
        refused = _claim(host)
        assert refused.returncode == 1 and "pool-not-granted" in refused.stderr, refused.stderr

        # part 2: the host holds @2; A (first) still serves @1. The sync succeeds from B and
        # names A's older copy; nothing on disk moves back.
        again = rensei(*sync)
        assert f"from {b.url}" in again.stderr and f"{a.url}: acme@1" in again.stderr
        assert "older than acme@2" in again.stderr
        assert _held(host) == (2, 2)
        assert _claim(host).returncode == 1
