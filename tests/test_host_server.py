"""The snapshot endpoint over real HTTP on loopback (waitress in a thread): bearer token,
headers, ETag/304, compile on the fly, 503 naming a failing validator, and the previous
snapshot serving while a slow recompile runs."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.message import Message
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.control.server import SnapshotService, make_app, serve_in_thread
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal, verify_snapshot
from rensei_routing.core.snapshot.validators import ValidatorResult
from rensei_routing.errors import FetchError, SnapshotValidationError
from rensei_routing.host.fetch import fetch_snapshot

KEY = signing.PrivateKey(bytes(range(32)))
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TOKEN = "s3cret-token"


def _snap(revision: int, compiled: datetime = T0) -> RulesetSnapshot:
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=compiled.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections={"posteriorSummary": {"arms": [{"arm": "a", "alpha": revision, "beta": 1}]}},
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
    )


@contextmanager
def _serving(app: Any) -> Iterator[str]:
    server = serve_in_thread(app, host="127.0.0.1", port=0, threads=4)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


class _Clock:
    def __init__(self) -> None:
        self.now = T0 + timedelta(seconds=42)

    def __call__(self) -> datetime:
        return self.now


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    request = urllib.request.Request(url + "/api/daemon/ruleset-snapshot", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def _service(
    latest: Callable[[], RulesetSnapshot | None],
    compile_now: Callable[[], RulesetSnapshot],
    refresh: Callable[[RulesetSnapshot], RulesetSnapshot | None] = lambda held: None,
) -> SnapshotService:
    return SnapshotService(
        latest=latest, compile_now=compile_now, needs_refresh=lambda held: True, refresh=refresh
    )


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_headers_token_and_etag() -> None:
    clock = _Clock()
    app = make_app(now=clock, token=TOKEN, service=_service(lambda: _snap(3), lambda: _snap(4)))
    with _serving(app) as url:
        assert _get(url)[0] == 401
        assert _get(url, {"Authorization": "Bearer wrong"})[0] == 401
        assert _get(url, {"Authorization": TOKEN})[0] == 401
        status, headers, body = _get(url, AUTH)
        assert status == 200
        snap = verify_snapshot(body, lookup=signing.key_lookup([KEY.public_key]))
        assert snap.ruleset_rev == "org_a@3" == headers["X-Ruleset-Rev"]
        assert headers["Age"] == "42" and headers["X-Ruleset-Degraded"] == "false"
        assert headers["X-Ruleset-Compiled-At"] == snap.compiled_at
        etag = headers["ETag"]
        assert _get(url, {**AUTH, "If-None-Match": etag})[0] == 304
        assert _get(url, {**AUTH, "If-None-Match": '"other"'})[0] == 200
        clock.now = T0 + timedelta(minutes=6)
        assert _get(url, AUTH)[1]["X-Ruleset-Degraded"] == "true"
        # the fetcher: 304 with the held etag, typed errors otherwise
        held_etag = etag.strip('"')
        assert fetch_snapshot(url, token=TOKEN, etag=held_etag).status == 304
        assert fetch_snapshot(url, token=TOKEN).body == body
        with pytest.raises(FetchError, match="401"):
            fetch_snapshot(url, token="nope")
        with pytest.raises(FetchError, match="over"):
            fetch_snapshot(url, token=TOKEN, max_bytes=100)


def test_never_compiled_org_is_compiled_on_the_fly() -> None:
    compiled: list[int] = []

    def compile_now() -> RulesetSnapshot:
        compiled.append(1)
        return _snap(1)

    app = make_app(now=_Clock(), token=TOKEN, service=_service(lambda: None, compile_now))
    with _serving(app) as url:
        status, headers, _ = _get(url, AUTH)
        assert (status, headers["X-Ruleset-Rev"], compiled) == (200, "org_a@1", [1])


def test_failing_validator_is_a_503_naming_it() -> None:
    def compile_now() -> RulesetSnapshot:
        raise SnapshotValidationError(
            [
                ValidatorResult(
                    name="profile-pools-exist",
                    plugin="built-in",
                    problems=("profile 'g' names 'x'",),
                )
            ]
        )

    app = make_app(now=_Clock(), token=TOKEN, service=_service(lambda: None, compile_now))
    with _serving(app) as url:
        status, _, body = _get(url, AUTH)
    assert status == 503 and b"profile-pools-exist" in body


def test_slow_recompile_keeps_serving_the_previous_snapshot() -> None:
    release = threading.Event()
    started = threading.Event()

    def refresh(held: RulesetSnapshot) -> RulesetSnapshot | None:
        if held.revision >= 8:
            return None
        started.set()
        release.wait(20)
        return _snap(8, T0 + timedelta(seconds=30))

    service = _service(lambda: _snap(7), lambda: _snap(7), refresh)
    app = make_app(now=_Clock(), token=TOKEN, service=service)
    with _serving(app) as url:
        revs = []
        assert _get(url, AUTH)[1]["X-Ruleset-Rev"] == "org_a@7"
        assert started.wait(10)
        for _ in range(20):  # every request during the recompile: the old revision, no error
            status, headers, _ = _get(url, AUTH)
            assert status == 200
            revs.append(headers["X-Ruleset-Rev"])
        assert set(revs) == {"org_a@7"}
        release.set()
        service.wait_idle(10)
        assert _get(url, AUTH)[1]["X-Ruleset-Rev"] == "org_a@8"


def test_failed_background_refresh_keeps_serving() -> None:
    def refresh(held: RulesetSnapshot) -> RulesetSnapshot | None:
        raise SnapshotValidationError([ValidatorResult(name="v", plugin="p", problems=("bad",))])

    service = _service(lambda: _snap(2), lambda: _snap(2), refresh)
    app = make_app(now=_Clock(), token=TOKEN, service=service)
    with _serving(app) as url:
        assert _get(url, AUTH)[0] == 200
        service.wait_idle(10)
        status, headers, _ = _get(url, AUTH)
        assert (status, headers["X-Ruleset-Rev"]) == (200, "org_a@2")
        assert service.last_error is not None and "v: bad" in service.last_error


def test_unknown_route_and_method() -> None:
    app = make_app(now=_Clock(), host_status=lambda: {"ok": True})
    with _serving(app) as url:
        with urllib.request.urlopen(url + "/api/daemon/routing/config", timeout=5) as r:
            assert r.status == 200 and b'"ok": true' in r.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/api/daemon/ruleset-snapshot", timeout=5)
        assert e.value.code == 404  # no snapshot service on a host-status server
        e.value.close()
        req = urllib.request.Request(url + "/api/daemon/routing/config", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as e2:
            urllib.request.urlopen(req, timeout=5)
        assert e2.value.code == 405
        e2.value.close()
        time.sleep(0)


def test_stop_ends_the_server_even_when_the_wake_up_pipe_fails() -> None:
    import errno

    server = serve_in_thread(
        make_app(now=_Clock(), host_status=lambda: {}), host="127.0.0.1", port=0
    )

    def broken() -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    server._server.trigger._physical_pull = broken  # the wake-up write fails
    server.stop(timeout=10)
    assert not server._thread.is_alive()
    with pytest.raises(FetchError):
        fetch_snapshot(f"http://127.0.0.1:{server.port}", token="t", timeout_s=2)


def test_stopping_while_a_worker_finishes_a_response_leaves_it_a_usable_wake_up_pipe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker that has sent its response wakes the loop one last time; here ``stop(drain_s=0)``
    runs between its check that the connection is open and that wake-up (held there until the
    loop has ended, as a loaded machine can). The wake-up pipe must still be open: it was closed
    with the loop's connections, and waitress logged "Exception when servicing" with a
    traceback (and a closed descriptor may already be another file's). The pipe is closed by
    ``stop`` once the worker is done."""
    import os

    from rensei_routing.control.listener import serve_in_thread as serve_app

    answered = threading.Event()
    pulling = threading.Event()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response("200 OK", [("Content-Length", "2")])
        answered.set()
        return [b"ok"]

    server = serve_app(app, host="127.0.0.1", port=0)
    trigger = server._server.trigger
    pipe = list(trigger._fds)
    pull = server._server.pull_trigger

    def late_pull(*args: Any) -> None:
        if answered.is_set() and threading.current_thread().name.startswith("waitress"):
            pulling.set()
            server._thread.join(10)  # the loop has ended (and closed what it closes)
        pull(*args)

    server._server.pull_trigger = late_pull
    caplog.set_level("INFO", logger="waitress")
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10) as response:
        assert response.read() == b"ok"
    assert pulling.wait(10)
    server.stop(drain_s=0, timeout=10)
    assert not server._thread.is_alive()
    assert not [r for r in caplog.records if "Exception when servicing" in r.getMessage()]
    assert trigger._closed  # closed by stop, after the worker
    for fd in pipe:
        with pytest.raises(OSError):
            os.fstat(fd)
