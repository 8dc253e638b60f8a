"""What a request may make the console do (issue 29: M2, I1, L1), over real HTTP on 127.0.0.1
through the console's waitress listener: on loopback only loopback ``Host`` names are answered
(DNS rebinding gets 421 and no record); a GET from another origin starts no background work;
the token is taken only as a bearer token and the redirect that sets its cookie stays on this
console; a query value that overflows a date or a count is a 400 naming it, never a 500."""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest

from rensei_routing.console.app import make_app
from rensei_routing.console.context import Console
from rensei_routing.console.state import Doctor, Verifier, WhatIfJob, WhatIfJobs
from rensei_routing.control.listener import Limits, RunningServer
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .shadow_support import home_with_policies, registry, spawn

TOKEN = "t0k3n-for-the-console-test-0123456789abcdef"


class CountingJobs(WhatIfJobs):
    """The real what-if jobs, counting every job a request asked for."""

    def __init__(self, home: Home) -> None:
        super().__init__(home, lambda: dt.datetime.now(dt.UTC), DEFAULT_VOCABULARY)
        self.asked = 0

    def get(self, *args: Any, **kwargs: Any) -> WhatIfJob:
        self.asked += 1
        return super().get(*args, **kwargs)


def _home(tmp_path: Path) -> Home:
    home = home_with_policies(tmp_path)
    conn = home.connect(write=True)  # revision 2, so /whatif?revision=1 compares two revisions
    try:
        PolicyStore(conn).save((), saved_at="2026-01-02T00:00:00.000000Z")
    finally:
        conn.close()
    with ShadowRecorder(home, registry(), clock=lambda: "2026-03-01T10:00:00.000000Z") as rec:
        rec.record_many([Spawn.from_dict(spawn())] * 3)
    return home


def _digest(home: Home) -> dict[str, str]:
    return {
        str(p.relative_to(home.path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.path.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


@contextmanager
def serving(
    home: Home, *, token: str | None = None, fleet_url: str | None = None
) -> Iterator[tuple[int, Console]]:
    """The console's real app on 127.0.0.1 (any free port), as ``rensei ui`` serves it."""
    now = lambda: dt.datetime.now(dt.UTC)  # noqa: E731
    console = Console(
        home=home,
        clock=now,
        whatif_dir=None,
        verifier=Verifier(home, now),
        doctor=Doctor(home, now),
        whatif=CountingJobs(home),
        fleet_url=fleet_url,
    )
    server = RunningServer(
        make_app(console, token=token), host="127.0.0.1", port=0, limits=Limits(threads=2)
    )
    try:
        yield server.port, console
    finally:
        server.stop()


def request(
    port: int, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One GET with exactly these headers (``Host`` too, when given)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_loopback_answers_only_to_loopback_host_names(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = _digest(home)
    with serving(home) as (port, _):
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            status, _, body = request(port, "/audit", {"Host": host})
            assert status == 200, host
            assert b"seq 2</a>" in body
        for host in (
            f"rebind.attacker.example:{port}",  # what a DNS-rebinding page sends
            "evil",
            f"127.0.0.1.attacker.example:{port}",
            f"localhost.attacker.example:{port}",
            f"127.0.0.1:{port + 1}",  # another port
            "127.0.0.1",
            "",
        ):
            for path in ("/audit", "/", "/decision/0", "/static/console.css"):
                status, _, body = request(port, path, {"Host": host})
                assert status == 421, (host, path)
                assert b"seq 0" not in body and b"acme" not in body
                assert b"Misdirected" in body
    assert _digest(home) == before


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://attacker.example"},
        {"Origin": "null"},
        {"Referer": "https://attacker.example/page.html"},
    ],
    ids=["sec-fetch-cross-site", "sec-fetch-same-site", "origin", "origin-null", "referer"],
)
def test_a_get_from_another_origin_starts_no_work(tmp_path: Path, headers: dict[str, str]) -> None:
    home = _home(tmp_path)
    with serving(home) as (port, console):
        jobs = console.whatif
        assert isinstance(jobs, CountingJobs)
        status, _, body = request(port, "/whatif?revision=1", headers)
        assert status == 200
        assert b'id="elsewhere"' in body and b"started no work" in body
        assert b'href="/whatif?revision=1"' in body  # a link to start it from the console
        assert jobs.asked == 0
        # the same request from the console itself (or typed in the address bar) starts it
        own = {"Sec-Fetch-Site": "same-origin", "Origin": f"http://127.0.0.1:{port}"}
        for same in (own, {"Sec-Fetch-Site": "none"}, {}):
            status, _, body = request(port, "/whatif?revision=1", same)
            assert status == 200 and b'id="elsewhere"' not in body
        assert jobs.asked == 3
        # pages that start nothing answer another origin as usual
        status, _, body = request(port, "/audit", headers)
        assert status == 200 and b"seq 2</a>" in body


def test_the_token_is_taken_only_as_a_bearer_token(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with serving(home, token=TOKEN) as (port, _):
        assert request(port, "/audit")[0] == 401
        assert request(port, "/audit", {"Authorization": TOKEN})[0] == 401
        assert request(port, "/audit", {"Authorization": f"Basic {TOKEN}"})[0] == 401
        assert request(port, "/audit", {"Authorization": f"Bearer{TOKEN}"})[0] == 401
        assert request(port, "/audit", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert request(port, "/audit", {"Authorization": f"bearer {TOKEN}"})[0] == 200
        assert request(port, "/audit", {"Cookie": f"rensei_ui_token={TOKEN}"})[0] == 200


@pytest.mark.parametrize(
    "path",
    [
        "/%5Cevil.example/",
        "//evil.example/",
        "/%5C%5Cevil.example/x",
        "/%2F%2Fevil.example/",
        "/shadow%0d%0aSet-Cookie:%20x=1",
        "/shadow",
    ],
)
def test_the_token_redirect_stays_on_this_console(tmp_path: Path, path: str) -> None:
    home = _home(tmp_path)
    with serving(home, token=TOKEN) as (port, _):
        status, headers, _ = request(port, f"{path}?token={TOKEN}")
        assert status == 303
        location = headers["Location"]
        assert location.startswith("/") and not location.startswith("//")
        assert "\\" not in location and "\r" not in location and "\n" not in location
        base = f"http://127.0.0.1:{port}{path}"
        assert urlsplit(urljoin(base, location)).netloc == f"127.0.0.1:{port}"
        assert "Set-Cookie" in headers and "x=1" not in headers["Set-Cookie"]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/shadow?since=999999d", "since"),
        ("/divergences?since=999999d", "since"),
        ("/shadow?since=0001-01-01T00:00:00%2B01:00", "since"),
        ("/divergences?since=9999-12-31T23:59:59-01:00", "since"),
        ("/shadow?since=9999-12-31T23:59:59Z", "since"),
        ("/divergences?since=0001-01-01", "since"),
    ],
)
def test_an_overflowing_since_is_a_400_naming_it(tmp_path: Path, path: str, name: str) -> None:
    home = _home(tmp_path)
    with serving(home) as (port, _):
        status, _, body = request(port, path)
        assert status == 400, body[:300]
        assert f'<p id="error">{name}: '.encode() in body
        assert request(port, "/shadow?since=7d")[0] == 200  # in range still reads


def test_an_overflowing_stale_is_a_400_naming_it(tmp_path: Path, pg_url: str) -> None:
    home = _home(tmp_path)
    with serving(home, fleet_url=pg_url) as (port, _):
        status, _, body = request(port, "/fleet?stale=999999999999999999")
        assert status == 400, body[:300]
        assert b'<p id="error">stale: ' in body
