"""The host's fetch against a fault-injecting HTTP peer of our own (issue 19 #3,
``tests/faultpeer.py``): every malformed response kind, resets, slow bodies and headers,
redirects, against ``fetch_snapshot``, ``host sync --endpoint`` and a real ``host run``
process. Each is a recorded failed fetch (a one-line error, never a traceback), the last
known-good copy is kept byte for byte, and the poller keeps polling until the peer serves a good
snapshot, which it then adopts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rensei_routing import signing
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal
from rensei_routing.errors import FetchError
from rensei_routing.host.cache import HostCache
from rensei_routing.host.fetch import fetch_snapshot

from .faultpeer import FAULTS, FaultPeer

KEY = signing.PrivateKey(bytes(range(32)))
RENSEI = (sys.executable, "-m", "rensei_routing.cli")


def signed(revision: int) -> RulesetSnapshot:
    """org_a@``revision``, compiled a minute ago (the host's clock is the real one here)."""
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=(datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections={"poolHostInventory": {"pools": [{"id": "pool-a", "status": "active"}]}},
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
    )


def rensei(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
    return subprocess.run([*RENSEI, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A host home holding org_a@1, synced from a file; a token file beside it."""
    home = tmp_path / "hosthome"
    HostCache(home / "host").trust(KEY.public_key)
    first = tmp_path / "r1.json"
    first.write_bytes(signed(1).to_bytes())
    assert rensei("host", "sync", "--from", str(first), "--home", str(home)).returncode == 0
    (tmp_path / "token").write_text("t0ken\n")
    return home


def _sync_endpoint(home: Path, url: str) -> subprocess.CompletedProcess[str]:
    token = str(home.parent / "token")
    return rensei("host", "sync", "--endpoint", url, "--token-file", token, "--home", str(home))


#: Faults the fetch itself sees (a slow but complete body arrives, and fails verification).
FETCH_FAULTS = [k for k in FAULTS if k != "slow-body"]


@pytest.mark.parametrize("kind", FETCH_FAULTS)
def test_fetch_snapshot_turns_every_fault_into_a_fetch_error(kind: str) -> None:
    with FaultPeer([kind]) as peer, pytest.raises(FetchError) as e:
        fetch_snapshot(peer.url, token="t", timeout_s=5)
    message = str(e.value)
    assert message.isprintable() and len(message) < 400, message


def test_a_slow_complete_body_arrives_whole() -> None:
    with FaultPeer(["slow-body"]) as peer:
        assert fetch_snapshot(peer.url, token="t", timeout_s=5).body == b"not a snapshot, slowly"


@pytest.mark.parametrize("kind", ["slow-forever", "slow-headers"])
def test_a_peer_trickling_bytes_is_cut_at_the_deadline(kind: str) -> None:
    with FaultPeer([kind]) as peer, pytest.raises(FetchError, match=r"longer than 0\.5s"):
        fetch_snapshot(peer.url, token="t", timeout_s=5, deadline_s=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", FAULTS)
def test_host_sync_endpoint_fault_is_one_line_and_keeps_the_copy(home: Path, kind: str) -> None:
    cache = HostCache(home / "host")
    before = cache.snapshot_path.read_bytes()
    with FaultPeer([kind]) as peer:
        done = _sync_endpoint(home, peer.url)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
    assert cache.snapshot_path.read_bytes() == before
    last = cache.last_fetch()
    assert last is not None and last["ok"] is False and last["source"] == peer.url


@pytest.mark.slow
def test_host_run_keeps_polling_through_every_fault_then_adopts(home: Path) -> None:
    cache = HostCache(home / "host")
    before = cache.snapshot_path.read_bytes()
    script = list(FAULTS) * 2
    good = signed(2)
    with FaultPeer(script, good=good.to_bytes()) as peer:
        # remember the endpoint (the first fault is served to this sync), then run the poller
        assert _sync_endpoint(home, peer.url).returncode == 1
        assert cache.snapshot_path.read_bytes() == before
        env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
        proc = subprocess.Popen(
            [*RENSEI, "host", "run", "--interval", "0.05", "--jitter", "0", "--home", str(home)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert peer.wait_served(len(script) + 3), peer.served  # every fault, then good ones
            assert proc.poll() is None  # still running, still polling
            assert peer.served[-1] == "good" and cache.load() == good
            status = json.loads(rensei("host", "status", "--json", "--home", str(home)).stdout)
            assert status["snapshot"]["rulesetRev"] == "org_a@2"
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert err.count("poll failed, keeping the last known-good snapshot") >= len(script) - 1
    assert "adopted: org_a@2" in err
