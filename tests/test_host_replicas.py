"""A host polling several replicas (issue 29, H1) over real HTTP on loopback: every endpoint is
asked and the host ends each poll holding the newest verified copy any of them offered. A
replica cut off from its store (``X-Ruleset-Store: unreachable``), one answering ``304`` or one
serving a revision the cache refuses as older never shadows a replica with a newer copy; an
``unreachable`` copy is held only when no ``ok`` endpoint offered one at least as new; a poll in
which no endpoint offered anything the host can hold fails and changes nothing.

The replicas are the real :class:`SnapshotService` behind the real WSGI app and waitress; a
replica "cut off from its store" is one whose store failure was recorded the way its watcher
records it (``store_failed``). The same scenario with real ``serve`` processes, a real
PostgreSQL and a killed TCP proxy is ``tests/test_replica_partition.py``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.control.server import SnapshotService, make_app
from rensei_routing.core.snapshot.envelope import RulesetSnapshot
from rensei_routing.errors import SnapshotError
from rensei_routing.host.cache import HostCache, HostConfig, host_cache
from rensei_routing.host.poll import poll_once

from .test_host_server import KEY, T0, TOKEN, _Clock, _get, _serving, _snap


class _Replica:
    """One replica: serves ``snap``; ``cut_off()`` records its store as unreachable."""

    def __init__(self, snap: RulesetSnapshot) -> None:
        self.snap = snap
        self.service = SnapshotService(
            latest=lambda: self.snap,
            compile_now=lambda: self.snap,
            needs_refresh=lambda held: False,
            refresh=lambda held: None,
            newer=self._newer,
        )

    def _newer(self, held: RulesetSnapshot) -> RulesetSnapshot | None:
        return self.snap if self.snap.to_bytes() != held.to_bytes() else None

    def cut_off(self) -> None:
        self.service.store_failed("watch", "the control database is unreachable")


@contextmanager
def _replicas(*snaps: RulesetSnapshot) -> Iterator[list[tuple[_Replica, str]]]:
    with ExitStack() as stack:
        out = []
        for snap in snaps:
            replica = _Replica(snap)
            app = make_app(now=_Clock(), token=TOKEN, service=replica.service)
            out.append((replica, stack.enter_context(_serving(app))))
        yield out


def _host(tmp_path: Path) -> tuple[HostCache, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    cache = host_cache(tmp_path / "home")
    cache.trust(KEY.public_key)
    return cache, str(token_file)


def _state(cache: HostCache) -> tuple[bytes, bytes]:
    """What the host holds on disk: the snapshot and the rollback floor, byte for byte."""
    return cache.snapshot_path.read_bytes(), (cache.directory / "held.json").read_bytes()


def _held_revision(cache: HostCache) -> int:
    held = cache.load()
    assert held is not None
    floor = cache.last_adopted()
    assert floor is not None and floor["revision"] == held.revision
    return held.revision


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


AT = T0 + timedelta(seconds=30)


def test_a_replica_cut_off_from_its_store_does_not_shadow_a_newer_one(tmp_path: Path) -> None:
    """The review's part 1: A (first) is partitioned from the database and keeps serving
    revision 1 flagged; B has the revocation, revision 2. The host adopts B's."""
    cache, token = _host(tmp_path)
    with _replicas(_snap(1), _snap(2, T0 + timedelta(seconds=5))) as [(a, a_url), (_, b_url)]:
        poll_once(cache, HostConfig(endpoint=a_url, token_file=token), now=AT)
        assert _held_revision(cache) == 1
        a.cut_off()
        assert _get(a_url, {"Authorization": f"Bearer {TOKEN}"})[1]["X-Ruleset-Store"] == (
            "unreachable"
        )
        config = HostConfig(endpoint=f"{a_url},{b_url}", token_file=token)
        line = poll_once(cache, config, now=AT)
        compiled = _snap(2, T0 + timedelta(seconds=5)).compiled_at
        assert line.startswith(f"adopted: org_a@2 (compiled {compiled}) from {b_url}")
        assert f"not adopted: {a_url}: org_a@1" in line and "its store unreachable" in line
        assert _held_revision(cache) == 2
        last = cache.last_fetch()
        assert last is not None and (last["source"], last["ok"]) == (b_url, True)
        assert last["detail"].startswith("adopted org_a@2")
        # the next poll: A still partitioned, B answers 304; nothing changes, the poll succeeds
        before = _state(cache)
        again = poll_once(cache, config, now=AT + timedelta(seconds=2))
        assert again.startswith(f"not modified: org_a@2 from {b_url}")
        assert _state(cache) == before


def test_a_not_modified_answer_goes_on_to_the_next_endpoint(tmp_path: Path) -> None:
    """A answers 304 (it serves what the host holds, store ok): B's newer revision is still
    asked for and adopted."""
    cache, token = _host(tmp_path)
    with _replicas(_snap(1), _snap(2, T0 + timedelta(seconds=5))) as [(_, a_url), (_, b_url)]:
        poll_once(cache, HostConfig(endpoint=a_url, token_file=token), now=AT)
        line = poll_once(cache, HostConfig(endpoint=f"{a_url},{b_url}", token_file=token), now=AT)
        assert line.startswith("adopted: org_a@2") and f"from {b_url}" in line
        assert _held_revision(cache) == 2


def test_an_older_revision_first_is_passed_over_and_the_poll_succeeds(tmp_path: Path) -> None:
    """The review's part 2: the host already holds revision 2 (from B); A, first, serves
    revision 1. The poll (and ``host sync --endpoint A --endpoint B``) succeeds from B, the
    refusal of A's copy is named, and nothing on disk moves back."""
    cache, token = _host(tmp_path)
    with _replicas(_snap(1), _snap(2, T0 + timedelta(seconds=5))) as [(a, a_url), (_, b_url)]:
        a.cut_off()
        poll_once(cache, HostConfig(endpoint=b_url, token_file=token), now=AT)
        before = _state(cache)
        config = HostConfig(endpoint=f"{a_url},{b_url}", token_file=token)
        line = poll_once(cache, config, now=AT)
        assert line.startswith(f"not modified: org_a@2 from {b_url}")
        assert f"{a_url}: org_a@1" in line and "older than org_a@2" in line
        assert _state(cache) == before
        from rensei_routing.cli import cli

        home = cache.directory.parent
        done = CliRunner().invoke(
            cli,
            [
                *("host", "sync", "--endpoint", a_url, "--endpoint", b_url),
                *("--token-file", token, "--home", str(home)),
            ],
        )
        assert done.exit_code == 0, done.output
        assert f"from {b_url}" in done.output and "older than org_a@2" in done.output
        assert _state(cache) == before
        status = CliRunner().invoke(cli, ["host", "status", "--json", "--home", str(home)])
        last = json.loads(status.output)["lastFetch"]
        assert (last["source"], last["ok"]) == (b_url, True)


def test_an_unreachable_copy_is_held_only_when_no_ok_endpoint_offers_one_as_new(
    tmp_path: Path,
) -> None:
    """The flag breaks ties, never hides a newer verified copy: A (cut off) with revision 3
    wins over B (ok) with revision 2; the same copy from both is taken from B."""
    cache, token = _host(tmp_path)
    newer = _snap(3, T0 + timedelta(seconds=9))
    with _replicas(newer, _snap(2, T0 + timedelta(seconds=5))) as [(a, a_url), (_, b_url)]:
        a.cut_off()
        config = HostConfig(endpoint=f"{a_url},{b_url}", token_file=token)
        line = poll_once(cache, config, now=AT)
        assert line.startswith(f"adopted: org_a@3 (compiled {newer.compiled_at}) from {a_url}")
        assert "(its store unreachable" in line and f"{b_url}: org_a@2" in line
        assert _held_revision(cache) == 3
    cache2, token2 = _host(tmp_path / "second")
    with _replicas(newer, newer) as [(a, a_url), (_, c_url)]:
        a.cut_off()
        config = HostConfig(endpoint=f"{a_url},{c_url}", token_file=token2)
        line = poll_once(cache2, config, now=AT)
        assert line.startswith(f"adopted: org_a@3 (compiled {newer.compiled_at}) from {c_url}")
        assert "unreachable" not in line
        last = cache2.last_fetch()
        assert last is not None and last["source"] == c_url


def test_a_later_seal_of_the_held_revision_is_taken_from_whichever_endpoint_has_it(
    tmp_path: Path,
) -> None:
    """A, cut off, cannot re-seal: it serves revision 2 sealed at +5 s; B re-sealed it at
    +65 s. The host takes B's seal (its age restarts), naming A's as an earlier seal."""
    cache, token = _host(tmp_path)
    first, resealed = _snap(2, T0 + timedelta(seconds=5)), _snap(2, T0 + timedelta(seconds=65))
    with _replicas(first, resealed) as [(a, a_url), (_, b_url)]:
        poll_once(cache, HostConfig(endpoint=a_url, token_file=token), now=AT)
        a.cut_off()
        config = HostConfig(endpoint=f"{a_url},{b_url}", token_file=token)
        line = poll_once(cache, config, now=AT + timedelta(seconds=60))
        assert line.startswith(f"adopted: org_a@2 (compiled {resealed.compiled_at}) from {b_url}")
        assert "an earlier seal of org_a@2" in line
        held = cache.load()
        assert held is not None and held.compiled_at == resealed.compiled_at


def test_a_poll_no_endpoint_can_satisfy_fails_and_keeps_the_held_copy(tmp_path: Path) -> None:
    """A serves an older revision, B is down: the poll fails naming both, the held copy and
    the rollback floor are untouched, and the failed fetch is recorded."""
    cache, token = _host(tmp_path)
    dead = _dead_url()
    with _replicas(_snap(1), _snap(2, T0 + timedelta(seconds=5))) as [(_, a_url), (_, b_url)]:
        poll_once(cache, HostConfig(endpoint=b_url, token_file=token), now=AT)
        before = _state(cache)
        config = HostConfig(endpoint=f"{a_url},{dead}", token_file=token)
        with pytest.raises(SnapshotError, match="no endpoint offered") as caught:
            poll_once(cache, config, now=AT)
    assert f"{a_url}: refusing org_a@1: older than" in str(caught.value)
    assert f"{dead}: cannot fetch" in str(caught.value)
    assert _state(cache) == before
    last = cache.last_fetch()
    assert last is not None and last["ok"] is False and a_url in last["source"]
