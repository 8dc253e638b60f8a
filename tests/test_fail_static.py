"""Fail-static serving and host failover over real HTTP on loopback (issue 23): an endpoint
whose store becomes unreadable keeps serving the snapshot it holds, whole, flagged
``X-Ruleset-Store: unreachable`` (never a 503), and clears the flag once the store reads
again; a host given two replicas fetches from the second when the first is down and records
the failed fetch."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

from rensei_routing.control.server import SnapshotService, make_app
from rensei_routing.core.snapshot.envelope import RulesetSnapshot
from rensei_routing.errors import StoreError
from rensei_routing.host.cache import HostCache, HostConfig
from rensei_routing.host.poll import poll_once

from .test_host_server import AUTH, KEY, T0, TOKEN, _Clock, _get, _serving, _snap


class _Store:
    """A store stand-in for the service's callables that can be made to fail (the real
    stores' failures are ``StoreError``; the PostgreSQL suite kills real connections)."""

    def __init__(self, snap: RulesetSnapshot) -> None:
        self.snap = snap
        self.down = False

    def newer(self, held: RulesetSnapshot) -> RulesetSnapshot | None:
        if self.down:
            raise StoreError("cannot read snapshots: the control database is unreachable")
        return self.snap if self.snap.revision > held.revision else None


def test_an_unreadable_store_keeps_the_held_snapshot_serving_flagged() -> None:
    store = _Store(_snap(1))
    service = SnapshotService(
        latest=lambda: store.snap,
        compile_now=lambda: store.snap,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
        newer=store.newer,
    )
    app = make_app(now=_Clock(), token=TOKEN, service=service)
    with _serving(app) as url:
        status, headers, body = _get(url, AUTH)
        assert (status, headers["X-Ruleset-Store"]) == (200, "ok")
        store.down = True
        for _ in range(3):
            again = _get(url, AUTH)
            assert (again[0], again[2]) == (200, body)
            assert again[1]["X-Ruleset-Store"] == "unreachable"
            assert again[1]["X-Ruleset-Rev"] == "org_a@1"
        store.down = False
        store.snap = _snap(2, T0 + timedelta(seconds=5))
        status, headers, _ = _get(url, AUTH)
        assert (status, headers["X-Ruleset-Store"], headers["X-Ruleset-Rev"]) == (
            200,
            "ok",
            "org_a@2",
        )


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_host_fetches_from_the_next_replica_and_records_the_failed_fetch(
    tmp_path: Path,
) -> None:
    snap = _snap(1)
    service = SnapshotService(
        latest=lambda: snap,
        compile_now=lambda: snap,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    cache = HostCache(tmp_path / "host")
    cache.trust(KEY.public_key)
    dead = _dead_url()
    with _serving(make_app(now=_Clock(), token=TOKEN, service=service)) as live:
        config = HostConfig(endpoint=f"{dead},{live}", token_file=str(token_file))
        line = poll_once(cache, config, now=T0 + timedelta(seconds=1))
        assert line.startswith("adopted: org_a@1")
        assert f"from {live}; failed fetch(es): {dead}: cannot fetch" in line
        again = poll_once(cache, config, now=T0 + timedelta(seconds=2))
        assert again.startswith("not modified: org_a@1") and dead in again
    held = cache.load()
    assert held is not None and held.revision == 1
    last = cache.last_fetch()
    assert last is not None and last["source"] == live and last["ok"]


def test_an_unchanged_snapshot_with_validators_is_not_modified_on_the_next_poll(
    tmp_path: Path,
) -> None:
    """``serve`` tags the bytes it sends, the unsigned ``validators`` list included; the host
    asks with the tag of the bytes it persisted, so an unchanged snapshot answers 304 (before,
    it tagged a re-encoding without the list: never a match, the whole body every poll)."""
    from rensei_routing.core.snapshot.envelope import seal, verify_snapshot
    from rensei_routing.signing import key_lookup

    data = seal(
        org_id="org_a",
        revision=1,
        compiled_at="2026-11-30T09:00:00.000000Z",
        sections={"posteriorSummary": {"arms": []}},
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
        validators=("policy-bundle", "pools"),
    ).to_bytes()
    snap = verify_snapshot(data, lookup=key_lookup([KEY.public_key]), keep_validators=True)
    assert snap.to_bytes() == data  # what serve holds and sends
    service = SnapshotService(
        latest=lambda: snap,
        compile_now=lambda: snap,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    cache = HostCache(tmp_path / "host")
    cache.trust(KEY.public_key)
    with _serving(make_app(now=_Clock(), token=TOKEN, service=service)) as url:
        config = HostConfig(endpoint=url, token_file=str(token_file))
        assert poll_once(cache, config, now=T0 + timedelta(seconds=1)).startswith("adopted")
        again = poll_once(cache, config, now=T0 + timedelta(seconds=2))
    assert again == "not modified: org_a@1"
