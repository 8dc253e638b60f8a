"""The outage rehearsal of document 000, automated, with real processes: a real `rensei serve`
on loopback, a real `rensei host run` polling it, claims from the command line, and an injected
clock (RENSEI_REHEARSAL_CLOCK_OFFSET_S) to cross DegradedAfter and RefuseAfter. It also reaches
the three invariants the document admits its own rehearsal did not: an admitted session (started
under an admission receipt) continuing uninterrupted through the outage, the host restart,
DegradedAfter and RefuseAfter; a permission-denied claim refusing against the cached snapshot;
and ExpiredError firing past RefuseAfter. At restore, a session on a pool the restored snapshot
revokes learns ``grant-revoked`` on its next heartbeat (and, by its ``finish`` policy, keeps
running until it ends).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ORG: dict[str, Any] = {
    "capacityProfiles": {
        "profiles": [{"id": "general", "pools": ["pool-a"]}, {"id": "batch", "pools": ["pool-b"]}],
        "grants": [{"profile": "general"}, {"profile": "batch"}],
    },
    "poolHostInventory": {
        "pools": [{"id": "pool-a", "status": "active"}, {"id": "pool-b", "status": "active"}],
        "hosts": [{"id": "h1", "pool": "pool-a"}],
    },
}
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _env(offset: float = 0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
    if offset:
        env["RENSEI_REHEARSAL_CLOCK_OFFSET_S"] = str(offset)
    return env


def rensei(*args: str, offset: float = 0, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", *args],
        capture_output=True,
        text=True,
        env=_env(offset),
        timeout=60,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"rensei {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done


@contextmanager
def background(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rensei_routing.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        assert proc.stderr is not None
        proc.stderr.close()


def _serve(control: Path, port: int = 0) -> tuple[subprocess.Popen[str], int, Any]:
    ctx = background("serve", "--home", str(control), "--port", str(port))
    proc = ctx.__enter__()
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert found, line
    return proc, int(found.group(1)), ctx


def _stop(proc: subprocess.Popen[str], ctx: Any, token: str) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0  # graceful shutdown on SIGTERM
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "GET /api/daemon/ruleset-snapshot 200" in log  # the access log names requests...
    assert token not in log  # ...and never the bearer token
    ctx.__exit__(None, None, None)


def _status(host: Path, offset: float = 0) -> dict[str, Any]:
    return json.loads(rensei("host", "status", "--home", str(host), "--json", offset=offset).stdout)


def _wait_for(predicate: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _claim(host: Path, pool: str, offset: float = 0) -> subprocess.CompletedProcess[str]:
    return rensei(
        "host", "claim", "--pool", pool, "--home", str(host), "--json", offset=offset, check=False
    )


def _heartbeat(host: Path, session_id: str, offset: float = 0) -> dict[str, Any]:
    beat = rensei(
        "host", "session", "heartbeat", session_id, "--home", str(host), "--json", offset=offset
    )
    return dict(json.loads(beat.stdout))


def test_outage_degrade_refuse_restore(tmp_path: Path) -> None:
    control, host = tmp_path / "control", tmp_path / "host"
    org_file = tmp_path / "org.json"
    org_file.write_text(json.dumps(ORG))
    rensei("init", "--home", str(control), "--org", "org_a1b2c3")
    rensei("org", "load", str(org_file), "--home", str(control))
    rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(control))
    rensei("snapshot", "compile", "--home", str(control))
    rensei("init", "--home", str(host))
    rensei("host", "trust", str(control / "keys" / "host.pub"), "--home", str(host))
    token = control / "keys" / "serve.token"
    assert token.stat().st_mode & 0o777 == 0o600  # created by init, private
    secret = token.read_text().strip()

    serve, port, serve_ctx = _serve(control)
    endpoint = f"http://127.0.0.1:{port}"
    rensei("host", "sync", "--endpoint", endpoint, "--token-file", str(token), "--home", str(host))
    assert _status(host)["snapshot"]["rulesetRev"] == "org_a1b2c3@1"

    with background("host", "run", "--interval", "0.2", "--jitter", "0", "--home", str(host)):
        # admitted work before the outage: a claim with a receipt (a lease long enough for the
        # rehearsal's clock jumps), and a session running under it
        receipt = tmp_path / "receipt.json"
        admitted = rensei(
            "host",
            "claim",
            "--pool",
            "pool-a",
            "--receipt",
            str(receipt),
            "--lease",
            "7200",
            "--home",
            str(host),
            "--json",
        )
        assert json.loads(admitted.stdout)["receipt"]["rulesetRev"] == "org_a1b2c3@1"
        assert rensei("host", "receipt", "verify", str(receipt), "--home", str(host))
        started = rensei(
            "host", "session", "start", "--receipt", str(receipt), "--home", str(host), "--json"
        )
        session_id = json.loads(started.stdout)["sessionId"]
        assert _claim(host, "pool-b").returncode == 0
        # revoke pool-b before the outage (a claim naming no project is decided by the pool
        # rules alone, so no capacity profile names it any more): served from a background
        # recompile, and the polling host adopts it
        revoked = json.loads(json.dumps(ORG))
        revoked["capacityProfiles"]["profiles"][1]["pools"] = []
        revoked["capacityProfiles"]["grants"] = [{"profile": "general"}]
        org_file.write_text(json.dumps(revoked))
        rensei("org", "load", str(org_file), "--home", str(control))
        _wait_for(lambda: _status(host)["snapshot"]["rulesetRev"] == "org_a1b2c3@2")

        # the outage: the endpoint becomes unreachable; the session keeps running
        _stop(serve, serve_ctx, secret)
        _wait_for(lambda: (_status(host)["lastFetch"] or {}).get("ok") is False)
        assert _status(host)["snapshot"]["rulesetRev"] == "org_a1b2c3@2"
        assert _heartbeat(host, session_id)["action"] == "continue"

    # the host restarts mid-outage and still serves the same revision, from its disk copy; its
    # local HTTP API reports the same status as `host status`
    with background(
        "host",
        "run",
        "--interval",
        "0.2",
        "--jitter",
        "0",
        "--listen",
        "127.0.0.1:0",
        "--home",
        str(host),
    ) as run:
        assert run.stderr is not None
        line = run.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/api/daemon/routing/config", line)
        assert found, line
        time.sleep(0.6)
        url = f"http://127.0.0.1:{found.group(1)}/api/daemon/routing/config"
        with urllib.request.urlopen(url, timeout=10) as response:
            served = json.loads(response.read())
        assert served["snapshot"]["rulesetRev"] == "org_a1b2c3@2"
        assert served["source"]["endpoint"] == endpoint
        status = _status(host)
        assert status["snapshot"]["rulesetRev"] == "org_a1b2c3@2"
        assert status["lastFetch"]["ok"] is False
        assert "cannot fetch" in status["lastFetch"]["detail"]
        # the session survived the host's restart: it lives in the host's store
        assert _heartbeat(host, session_id)["state"] == "open"

    # cross DegradedAfter (5 min): still admitting, flagged; the revoked grant refuses
    degraded = _status(host, offset=400)["snapshot"]
    assert degraded["state"] == "degraded" and degraded["degraded"] is True
    line = rensei("host", "status", "--home", str(host), offset=400).stdout
    assert re.search(r"^Ruleset snapshot: org_a1b2c3@2 \(age 6m\d\ds\) \(degraded\)$", line, re.M)
    admitted = _claim(host, "pool-a", offset=400)
    assert admitted.returncode == 0, admitted.stderr
    record = json.loads(admitted.stdout)
    assert (record["admitted"], record["degraded"], record["rulesetRev"]) == (
        True,
        True,
        "org_a1b2c3@2",
    )
    refused = _claim(host, "pool-b", offset=400)
    assert refused.returncode == 1 and "pool-not-granted" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert _heartbeat(host, session_id, offset=400)["action"] == "continue"

    # cross RefuseAfter (30 min): a loud, typed refusal carrying revision, age and bound
    expired = _claim(host, "pool-a", offset=1900)
    assert expired.returncode == 1
    assert "org_a1b2c3@2" in expired.stderr and "RefuseAfter (30m00s)" in expired.stderr
    assert _status(host, offset=1900)["snapshot"]["state"] == "expired"
    # ...while the admitted session continues: only new claims refuse
    past = _heartbeat(host, session_id, offset=1900)
    assert (past["action"], past["state"], past["grantRevoked"]) == ("continue", "open", False)

    # restore: the control side recompiles (its org now names only pool-b, in the batch
    # profile, so pool-a is revoked), the endpoint comes back, the next poll advances
    serve, _, serve_ctx = _serve(control, port)
    restored = json.loads(json.dumps(ORG))
    restored["capacityProfiles"]["profiles"][0]["pools"] = []
    restored["capacityProfiles"]["grants"] = [{"profile": "batch"}]
    org_file.write_text(json.dumps(restored))
    rensei("org", "load", str(org_file), "--home", str(control))
    with background("host", "run", "--interval", "0.2", "--jitter", "0", "--home", str(host)):
        _wait_for(lambda: _status(host)["snapshot"]["rulesetRev"] == "org_a1b2c3@3")
    assert _status(host)["lastFetch"]["ok"] is True
    _stop(serve, serve_ctx, secret)
    # the session on the revoked pool learns it on its next heartbeat, and by its `finish`
    # policy keeps running until its work ends
    told = _heartbeat(host, session_id)
    assert (told["grantRevoked"], told["revokedRev"], told["action"]) == (
        True,
        "org_a1b2c3@3",
        "continue",
    )
    rensei("host", "session", "end", session_id, "--home", str(host))

    # every claim decision is in the host's audit log with its snapshot fields, and it verifies
    rensei("audit", "verify", "--home", str(host))
    tail = json.loads(rensei("audit", "tail", "-n", "50", "--json", "--home", str(host)).stdout)
    claims = [r["payload"] for r in tail if r["payload"].get("record_type") == "claim-decision"]
    assert [(c["pool_id"], c["admitted"], c["reason"]) for c in claims] == [
        ("pool-a", True, "granted"),
        ("pool-b", True, "granted"),
        ("pool-a", True, "granted"),
        ("pool-b", False, "pool-not-granted"),
        ("pool-a", False, "snapshot-expired"),
    ]
    assert all({"rulesetRev", "snapshotAgeMs", "degraded"} <= set(c) for c in claims)
    assert claims[0]["receipt"]["receiptId"] == json.loads(receipt.read_text())["receiptId"]
    moves = [
        (r["payload"]["from"], r["payload"]["to"], r["payload"]["reason"])
        for r in tail
        if r["payload"].get("record_type") == "session-transition"
    ]
    assert moves == [
        ("none", "open", "started"),
        ("open", "open", "grant-revoked"),
        ("open", "ended", "ended"),
    ]
