"""A damaged ``host/snapshot.json`` (issue 19 #13): it is set aside (kept for inspection), the
next valid sync is adopted, the rollback floor survives it, and ``host status`` says what
happened. Then a stateful property over the cache: random sequences of syncs from files (by
``accept`` and by the ``host run`` poll step), restarts and damage; the held revision never
decreases and is always a verified snapshot."""

from __future__ import annotations

import http.server
import json
import shutil
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal
from rensei_routing.errors import DamagedCacheError, RollbackError, SnapshotError
from rensei_routing.host.cache import HostCache, HostConfig
from rensei_routing.host.poll import poll_once
from rensei_routing.host.status import host_status_data, snapshot_line

KEY = signing.PrivateKey(bytes(range(32)))
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def signed(revision: int, *, reseal: int = 0, variant: int = 0) -> RulesetSnapshot:
    """org_a@``revision`` sealed with the project's envelope; ``reseal`` minutes later gives a
    heartbeat re-seal (same content), ``variant`` other content (an equivocation)."""
    pools = [{"id": f"pool-{i}", "status": "active"} for i in range(revision + variant * 100)]
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=(NOW - timedelta(hours=2, minutes=-(revision * 10 + reseal))).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        ),
        sections={"poolHostInventory": {"pools": pools, "hosts": []}},
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
    )


def _damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    if kind == "flipped-byte":
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :])
    elif kind == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif kind == "garbage":
        path.write_bytes(b"\x00\xffnot a snapshot")
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        raise AssertionError(kind)


DAMAGE = ("flipped-byte", "truncated", "garbage", "empty")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "hosthome"
    HostCache(home / "host").trust(KEY.public_key)
    done = _sync(home, signed(5), tmp_path)
    assert done.exit_code == 0 and done.output.startswith("adopted: org_a@5"), done.output
    return home


def _sync(home: Path, snap: RulesetSnapshot, tmp_path: Path) -> Any:
    source = tmp_path / f"{snap.ruleset_rev}-{snap.content_hash[:8]}.json"
    source.write_bytes(snap.to_bytes())
    return CliRunner().invoke(cli, ["host", "sync", "--from", str(source), "--home", str(home)])


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_copy_is_set_aside_and_the_next_valid_sync_adopted(
    home: Path, tmp_path: Path, kind: str
) -> None:
    cache = HostCache(home / "host")
    _damage(cache.snapshot_path, kind)
    damaged = cache.snapshot_path.read_bytes()
    with pytest.raises(DamagedCacheError):
        cache.load()
    status = CliRunner().invoke(cli, ["host", "status", "--home", str(home)])
    assert "none cached" not in status.output
    assert "damaged" in status.output and "refusing to decide from it" in status.output

    done = _sync(home, signed(6), tmp_path)
    assert done.exit_code == 0, done.output
    assert done.output.startswith("adopted: org_a@6")
    assert cache.load() == signed(6)
    aside = list(cache.directory.glob("snapshot.json.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged  # kept, byte for byte
    status = CliRunner().invoke(cli, ["host", "status", "--home", str(home)])
    assert "Ruleset snapshot: org_a@6" in status.output
    assert f"Set aside: {aside[0].name} at " in status.output
    shown = CliRunner().invoke(cli, ["host", "status", "--json", "--home", str(home)])
    doc = json.loads(shown.output)
    assert doc["setAside"][-1]["file"] == aside[0].name and doc["setAside"][-1]["present"]
    assert doc["lastAdopted"]["rulesetRev"] == "org_a@6"


def test_a_damaged_copy_does_not_lower_the_rollback_floor(home: Path, tmp_path: Path) -> None:
    cache = HostCache(home / "host")
    _damage(cache.snapshot_path, "truncated")
    older = _sync(home, signed(4), tmp_path)
    assert older.exit_code != 0 and "older than the last adopted org_a@5" in older.output
    assert "Traceback" not in older.output
    assert not cache.snapshot_path.exists()  # set aside; nothing older took its place
    equivocation = _sync(home, signed(5, variant=1), tmp_path)
    assert equivocation.exit_code != 0 and "equivocation" in equivocation.output
    status = CliRunner().invoke(cli, ["host", "status", "--home", str(home)]).output
    assert "Ruleset snapshot: none cached (last adopted org_a@5; a damaged copy was set aside" in (
        status
    )
    with pytest.raises(RollbackError):
        cache.accept(signed(3).to_bytes(), now=NOW, source="t")
    # the very revision it held comes back (even an older seal of it), then newer ones
    assert cache.accept(signed(5).to_bytes(), now=NOW, source="t").adopted
    assert cache.load() == signed(5)
    assert cache.accept(signed(7).to_bytes(), now=NOW, source="t").adopted


def test_a_damaged_copy_is_replaced_from_an_endpoint(home: Path, tmp_path: Path) -> None:
    """Over HTTP the damaged copy's ETag is not sent, so the full body comes and is adopted."""
    body = signed(6).to_bytes()
    seen: list[str | None] = []

    class Peer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("If-None-Match"))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        token = tmp_path / "token"
        token.write_text("t0ken\n")
        _damage(HostCache(home / "host").snapshot_path, "flipped-byte")
        done = CliRunner().invoke(
            cli,
            [
                *("host", "sync", "--endpoint", f"http://127.0.0.1:{server.server_port}"),
                *("--token-file", str(token), "--home", str(home)),
            ],
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.exit_code == 0 and done.output.startswith("adopted: org_a@6"), done.output
    assert seen == [None]
    assert len(list((home / "host").glob("snapshot.json.damaged-*"))) == 1


def test_a_second_damage_gets_its_own_name(home: Path) -> None:
    cache = HostCache(home / "host")
    for rev in (6, 7):
        _damage(cache.snapshot_path, "garbage")
        assert cache.accept(signed(rev).to_bytes(), now=NOW, source="t").adopted
    assert len(list(cache.directory.glob("snapshot.json.damaged-*"))) == 2
    assert [e["present"] for e in cache.set_aside()] == [True, True]


def test_an_io_error_is_not_damage(home: Path) -> None:
    """An unreadable copy (here: a directory where the file should be) is not set aside."""
    cache = HostCache(home / "host")
    cache.snapshot_path.unlink()
    cache.snapshot_path.mkdir()
    with pytest.raises(SnapshotError) as e:
        cache.accept(signed(6).to_bytes(), now=NOW, source="t")
    assert not isinstance(e.value, DamagedCacheError)
    assert cache.snapshot_path.is_dir() and not list(cache.directory.glob("*.damaged-*"))


# -- the stateful property --------------------------------------------------------------------

#: Every offer the machine can make: revisions 1..6, re-seals of each, and an equivocation.
OFFERS: list[RulesetSnapshot] = [
    signed(rev, reseal=reseal, variant=variant)
    for rev in range(1, 7)
    for reseal, variant in ((0, 0), (3, 0), (0, 1))
]


class CacheMachine(RuleBasedStateMachine):
    """The model: the last adopted (revision, hash, compiledAt) and whether ``snapshot.json``
    is present, damaged or set aside."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="rensei-cache-machine-"))
        for i, snap in enumerate(OFFERS):
            (self.root / f"offer{i}.json").write_bytes(snap.to_bytes())
        self.cache = HostCache(self.root / "host")
        self.cache.trust(KEY.public_key)
        self.floor: RulesetSnapshot | None = None  # the last adopted
        self.on_disk: str = "none"  # none | good | damaged
        self.highest_held = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _expected(self, snap: RulesetSnapshot) -> str:
        floor = self.floor
        if floor is None:
            return "adopted"
        if snap.revision < floor.revision:
            return "rollback"
        if snap.revision == floor.revision:
            if snap.content_hash != floor.content_hash:
                return "rollback"
            if self.on_disk != "good" or snap.compiled_at > floor.compiled_at:
                return "adopted"
            return "unchanged"
        return "adopted"

    def _offer(self, i: int, via_poll: bool) -> None:
        snap = OFFERS[i]
        expected = self._expected(snap)
        source = str(self.root / f"offer{i}.json")
        try:
            if via_poll:
                outcome = poll_once(self.cache, HostConfig(source_file=source), now=NOW)
                outcome = outcome.split(":")[0]
            else:
                adopted = self.cache.accept(snap.to_bytes(), now=NOW, source=source).adopted
                outcome = "adopted" if adopted else "unchanged"
        except RollbackError:
            outcome = "rollback"
        if self.on_disk == "damaged":
            self.on_disk = "none"  # set aside, whatever the verdict on the offer
        assert outcome == expected, (snap.ruleset_rev, self.floor)
        if outcome == "adopted":
            self.floor, self.on_disk = snap, "good"

    @rule(i=st.integers(0, len(OFFERS) - 1))
    def accept(self, i: int) -> None:
        self._offer(i, via_poll=False)

    @rule(i=st.integers(0, len(OFFERS) - 1))
    def poll(self, i: int) -> None:
        self._offer(i, via_poll=True)

    @rule()
    def restart(self) -> None:
        self.cache = HostCache(self.root / "host")

    @precondition(lambda self: self.on_disk == "good")
    @rule(kind=st.sampled_from(DAMAGE))
    def damage(self, kind: str) -> None:
        _damage(self.cache.snapshot_path, kind)
        self.on_disk = "damaged"

    @precondition(lambda self: self.on_disk == "good")
    @rule()
    def delete(self) -> None:
        self.cache.snapshot_path.unlink()
        self.on_disk = "none"

    @invariant()
    def held_is_verified_and_never_older(self) -> None:
        try:
            held = self.cache.load()  # re-verified on every load
        except DamagedCacheError:
            assert self.on_disk == "damaged"
            line = snapshot_line(host_status_data(self.cache, now=NOW))
            assert line.startswith("Ruleset snapshot: damaged")
            return
        if held is None:
            assert self.on_disk == "none"
            return
        assert self.on_disk == "good" and held == self.floor
        assert held.revision >= self.highest_held
        self.highest_held = held.revision
        floor = self.cache.last_adopted()
        assert floor is not None and floor["contentHash"] == held.content_hash


CacheMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, derandomize=True
)
test_cache_machine = CacheMachine.TestCase
