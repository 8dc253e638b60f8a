"""``rensei serve`` as a real process on a free loopback port: what it serves after another
process publishes, the serve token's mode, its access log, the clock warning, draining on
SIGTERM, and slow clients (issue 19)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import closing, contextmanager
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.control.listener import Limits, RunningServer
from rensei_routing.store.home import Home

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
SNAPSHOT = "/api/daemon/ruleset-snapshot"


def _env(offset: float = 0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
    if offset:
        env["RENSEI_REHEARSAL_CLOCK_OFFSET_S"] = str(offset)
    return env


def rensei(
    *args: str, offset: float = 0, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", *args],
        capture_output=True,
        text=True,
        env=_env(offset),
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"rensei {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done


class Serve:
    """A running ``rensei serve``; its stderr collected line by line by a reader thread."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        found = self.wait_for(r"serving http://127\.0\.0\.1:(\d+)/")
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:  # bytes: no newline translation hides a raw CR
            with self._changed:
                self.lines.append(raw.decode("utf-8", "replace"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # EOF marker
            self._changed.notify_all()

    def find(self, pattern: str, timeout: float = 30) -> re.Match[str] | None:
        """The first stderr line matching ``pattern``, waiting for it until ``timeout`` or the
        end of stderr; ``None`` when none came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if (found := re.search(pattern, line)) is not None:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.lines and self.lines[-1] == ""):
                    return None
                self._changed.wait(left)

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """The first stderr line matching ``pattern`` (waiting for it)."""
        found = self.find(pattern, timeout)
        if found is None:
            raise AssertionError(f"no line matching {pattern!r} in {self.lines}")
        return found

    def log(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code


@contextmanager
def serving(home: Path, *args: str, offset: float = 0) -> Iterator[Serve]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rensei_routing.cli",
            "serve",
            "--home",
            str(home),
            "--port",
            "0",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(offset),
    )
    try:
        yield Serve(proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        assert proc.stderr is not None
        proc.stderr.close()


def _token(home: Path) -> str:
    return (home / "keys" / "serve.token").read_text("ascii").strip()


def fetch(serve: Serve, token: str, timeout: float = 10) -> tuple[int, Message, bytes]:
    request = urllib.request.Request(
        serve.url + SNAPSHOT, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def _revisions(home: Path) -> list[tuple[int, str]]:
    with closing(Home(home).connect()) as conn:
        rows = conn.execute(
            "SELECT revision, compiled_at FROM ruleset_snapshots ORDER BY revision"
        ).fetchall()
    return [(int(str(r)), str(c)) for r, c in rows]


@pytest.fixture
def control(tmp_path: Path) -> Path:
    home = tmp_path / "control"
    rensei("init", "--home", str(home), "--org", "org_a1b2c3")
    rensei("org", "load", str(EXAMPLES / "org.json"), "--home", str(home))
    rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home))
    rensei("snapshot", "compile", "--home", str(home))
    return home


# -- #6: what another process published is served on the next request ----------------------------


def test_a_request_after_a_cli_compile_gets_the_new_revision(control: Path) -> None:
    with serving(control) as serve:
        token = _token(control)
        status, headers, _ = fetch(serve, token)
        assert (status, headers["X-Ruleset-Rev"]) == (200, "org_a1b2c3@1")
        rensei("snapshot", "compile", "--home", str(control))  # another process publishes rev 2
        stored = _revisions(control)
        status, headers, body = fetch(serve, token)
        assert (status, headers["X-Ruleset-Rev"]) == (200, "org_a1b2c3@2")
        assert json.loads(body)["revision"] == 2
        # and the next request again, from memory; serving published nothing of its own
        assert fetch(serve, token)[1]["X-Ruleset-Rev"] == "org_a1b2c3@2"
        assert serve.terminate() == 0
    assert _revisions(control) == stored


def test_a_request_after_a_data_write_gets_the_recompiled_revision(control: Path) -> None:
    with serving(control) as serve:
        token = _token(control)
        assert fetch(serve, token)[1]["X-Ruleset-Rev"] == "org_a1b2c3@1"
        rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(control))
        # the write is noticed by the next request and recompiled off the request path (document
        # 000: the previous snapshot keeps serving meanwhile); then every request gets rev 2
        deadline = time.monotonic() + 30
        revs = []
        while time.monotonic() < deadline:
            revs.append(fetch(serve, token)[1]["X-Ruleset-Rev"])
            if revs[-1] == "org_a1b2c3@2":
                break
            time.sleep(0.1)
        assert revs[-1] == "org_a1b2c3@2", revs
        assert set(revs) <= {"org_a1b2c3@1", "org_a1b2c3@2"}
        assert fetch(serve, token)[1]["X-Ruleset-Rev"] == "org_a1b2c3@2"
    assert [r for r, _ in _revisions(control)] == [1, 2]


# -- #19: a serve token others can read ----------------------------------------------------------


def _doctor(home: Path) -> dict[str, tuple[str, str]]:
    done = rensei("doctor", "--json", "--home", str(home), check=False)
    return {c["check"]: (c["status"], c["detail"]) for c in json.loads(done.stdout)["checks"]}


def test_a_serve_token_others_can_read_is_a_doctor_warning_and_refused_by_serve(
    control: Path,
) -> None:
    token = control / "keys" / "serve.token"
    assert _doctor(control)["serve token"][0] == "ok"  # none yet
    with serving(control) as serve:  # creates it, 0600
        assert serve.terminate() == 0
    assert token.stat().st_mode & 0o777 == 0o600
    assert _doctor(control)["serve token"][0] == "ok"
    os.chmod(token, 0o644)
    before = token.read_bytes()
    status, detail = _doctor(control)["serve token"]
    assert status == "warn" and "0644" in detail and "readable by others" in detail
    done = rensei("serve", "--home", str(control), "--port", "0", check=False, timeout=30)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "serve.token is readable by others (mode 0644)" in lines[0], lines
    assert "serving" not in done.stderr
    assert token.read_bytes() == before and token.stat().st_mode & 0o777 == 0o644  # untouched
    os.chmod(token, 0o600)
    assert _doctor(control)["serve token"][0] == "ok"


# -- #12: what a client puts in the path reaches the log escaped ---------------------------------


def _raw_request(serve: Serve, target: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", serve.port), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return reply


def test_control_characters_in_the_path_are_escaped_in_the_log(control: Path) -> None:
    with serving(control) as serve:
        # a raw ESC sequence, and a CR LF percent-encoded (waitress refuses a raw CR in the
        # request line with a 400 before the app sees it) that would forge a log line
        reply = _raw_request(serve, b"/x\x1b[31mred%0d%0aGET%20/forged%20200\\x1b")
        assert reply.startswith(b"HTTP/1.1 404 ")
        found = serve.wait_for(r" 404\n?$")
        assert serve.terminate() == 0
        log = serve.log()
    line = found.string
    assert line.rstrip("\n").endswith("GET /x\\x1b[31mred\\x0d\\x0aGET /forged 200\\\\x1b 404")
    assert "\x1b" not in log and "\r" not in log
    assert not any(entry.startswith("GET /forged") for entry in log.splitlines())


# -- #4 (serve's part): a stored snapshot compiled ahead of serve's clock -------------------------


def test_serve_warns_when_the_latest_snapshot_is_ahead_of_its_clock(control: Path) -> None:
    stored = _revisions(control)
    with serving(control, offset=-3600) as serve:  # this clock is an hour behind the compile's
        found = serve.wait_for(r"warning: snapshot org_a1b2c3@1 was compiled at .*ahead")
        ahead = r" (59m\d\ds|1h00m) ahead of this clock \(allowed skew 1m00s\)"
        assert re.search(ahead, found.string)
        status, headers, _ = fetch(serve, _token(control))
        assert (status, headers["X-Ruleset-Rev"]) == (200, "org_a1b2c3@1")  # still served
        assert serve.terminate() == 0
    assert _revisions(control) == stored  # nothing re-sealed or compiled at the wrong time


def test_serve_warns_when_another_clock_publishes_ahead_of_it(control: Path) -> None:
    with serving(control) as serve:
        token = _token(control)
        assert fetch(serve, token)[1]["X-Ruleset-Rev"] == "org_a1b2c3@1"
        assert "ahead of this clock" not in serve.log()
        rensei("snapshot", "compile", "--home", str(control), offset=86400)  # a day ahead
        stored = _revisions(control)
        assert fetch(serve, token)[1]["X-Ruleset-Rev"] == "org_a1b2c3@2"
        found = serve.wait_for(r"snapshot org_a1b2c3@2 was compiled at .*ahead of this clock")
        assert "rensei_routing.http" in found.string
        assert serve.terminate() == 0
    assert _revisions(control) == stored


# -- #11: SIGTERM drains the responses in flight --------------------------------------------------


def _big_control(tmp_path: Path, policies: int) -> Path:
    home = tmp_path / "big"
    rensei("init", "--home", str(home), "--org", "org_a1b2c3")
    rensei("org", "load", str(EXAMPLES / "org.json"), "--home", str(home))
    doc = {
        "policies": [
            {
                "id": f"p{i:05d}",
                "description": f"policy {i} " + "d" * 1500,
                "priority": i % 90,
                "match": {"repo_ids": [f"acme/r{i}"]},
                "action": {"account_pool": ["anthropic-primary"]},
            }
            for i in range(policies)
        ]
    }
    source = tmp_path / "policies.json"
    source.write_text(json.dumps(doc))
    rensei("policy", "save", str(source), "--home", str(home))
    rensei("snapshot", "compile", "--home", str(home))
    return home


def _read_head(sock: socket.socket) -> tuple[dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), lines[0]
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return headers, rest


def test_sigterm_lets_a_slow_reader_receive_the_whole_snapshot(tmp_path: Path) -> None:
    control = _big_control(tmp_path, 7000)
    expected = (tmp_path / "expected.json").resolve()
    rensei("snapshot", "export", str(expected), "--home", str(control))
    body_expected = expected.read_bytes()
    assert len(body_expected) > 10_000_000  # far beyond what the kernel's buffers hold
    with serving(control) as serve:
        token = _token(control)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # a small window: slow
        sock.settimeout(30)
        with sock:
            sock.connect(("127.0.0.1", serve.port))
            request = f"GET {SNAPSHOT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
            sock.sendall(request.encode("ascii"))
            headers, body = _read_head(sock)
            length = int(headers["content-length"])
            while len(body) < 1_000_000:  # the first megabyte, then SIGTERM mid-body
                body += sock.recv(65536)
            serve.proc.send_signal(signal.SIGTERM)
            draining = serve.find(r"stopped accepting; draining 1 response\(s\)")
            if draining is not None:
                with pytest.raises(ConnectionRefusedError):  # no new connection is accepted
                    socket.create_connection(("127.0.0.1", serve.port), timeout=5).close()
            while len(body) < length:  # a slow reader: small reads, a pause every 64 KiB
                chunk = sock.recv(16384)
                if not chunk:
                    break
                body += chunk
                if len(body) % 65536 < 16384:
                    time.sleep(0.001)
        assert len(body) == length == len(body_expected)  # unfixed: cut at a few megabytes
        assert body == body_expected
        assert draining is not None
        assert serve.proc.wait(60) == 0
        serve.wait_for(r"^stopped")


def _app(body: bytes) -> Any:
    def app(environ: dict[str, Any], start: Any) -> list[bytes]:
        start("200 OK", [("Content-Length", str(len(body)))])
        return [body]

    return app


def test_a_drain_closes_idle_and_half_sent_requests_and_is_bounded() -> None:
    server = RunningServer(_app(b"x" * 32_000_000), host="127.0.0.1", port=0)
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    half = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    half.sendall(b"GET / HTTP/1.1\r\nHo")  # a request still arriving
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.settimeout(10)
    stuck.connect(("127.0.0.1", server.port))
    stuck.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # a reader that never reads
    assert stuck.recv(10) == b"HTTP/1.1 2"
    server.stop(drain_s=1.0)  # the reader never reads: the deadline ends the drain
    assert not server.alive
    with idle, half, stuck:
        assert idle.recv(10) == b"" and half.recv(10) == b""  # closed, nothing sent
        received = 10
        while chunk := stuck.recv(1 << 20):
            received += len(chunk)
        assert received < 32_000_000  # cut at the deadline


# -- #7: slow clients cannot hold every connection ------------------------------------------------


class Flood:
    """``count`` unauthenticated clients on loopback, each trickling one byte of a request
    header that never ends every ``period`` seconds, reconnecting whenever the server closes
    it (a persistent attacker). One thread, non-blocking sockets, stopped on exit."""

    def __init__(self, port: int, count: int, period: float = 0.2) -> None:
        self.port, self.count, self.period = port, count, period
        self.reconnects = 0
        self.bytes_sent = 0
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        return s

    def _run(self) -> None:
        line = b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 100_000
        self._socks = [self._connect() for _ in range(self.count)]
        offsets = [0] * self.count
        self._ready.set()
        while not self._stop.wait(self.period):
            for i, s in enumerate(self._socks):
                try:
                    s.recv(4096)  # an answer (431, 408) or EOF means the server closed it
                    closed = True
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if not closed:
                    try:
                        s.send(line[offsets[i] % len(line) : offsets[i] % len(line) + 1])
                        offsets[i] += 1
                        self.bytes_sent += 1
                        continue
                    except OSError:
                        pass
                s.close()
                self.reconnects += 1
                offsets[i] = 0
                try:
                    self._socks[i] = self._connect()
                except OSError:
                    self._socks[i] = socket.socket()  # retried next round

    def __enter__(self) -> Flood:
        self._thread.start()
        assert self._ready.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for s in self._socks:
            s.close()


def test_a_host_keeps_syncing_while_110_slow_clients_trickle(control: Path, tmp_path: Path) -> None:
    host = tmp_path / "host"
    rensei("init", "--home", str(host))
    rensei("host", "trust", str(control / "keys" / "host.pub"), "--home", str(host))
    token_file = control / "keys" / "serve.token"
    with serving(control) as serve, Flood(serve.port, 110) as flood:
        while flood.bytes_sent < 110 * 3:  # every slow client has started its request
            time.sleep(0.05)
        for revision in (1, 2, 3):
            done = rensei(
                "host", "sync", "--endpoint", serve.url, "--token-file", str(token_file),
                "--home", str(host), check=False, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr  # unfixed: timed out behind the flood
            assert f"org_a1b2c3@{revision}" in done.stdout + done.stderr
            rensei("snapshot", "compile", "--home", str(control))
        assert flood.bytes_sent > 110 * 3
    status = json.loads(rensei("host", "status", "--home", str(host), "--json").stdout)
    assert status["snapshot"]["rulesetRev"] == "org_a1b2c3@3"


def _fetch_once(port: int, token: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        r.read()
        return int(r.status)


def test_at_its_connection_limit_the_server_sheds_the_oldest_slow_client() -> None:
    server = RunningServer(
        _app(b"ok"), host="127.0.0.1", port=0, limits=Limits(connection_limit=30)
    )
    try:
        with Flood(server.port, 60, period=0.05) as flood:
            while flood.bytes_sent < 60 * 2:
                time.sleep(0.05)
            assert [_fetch_once(server.port, "t") for _ in range(5)] == [200] * 5
            assert flood.reconnects > 0  # slow clients were shed to make room
    finally:
        server.stop()


def _closed_by_server(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (EOF or reset on a non-blocking read)."""
    s.setblocking(False)
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def test_shedding_picks_the_oldest_connection_not_the_latest_first_byte() -> None:
    """The oldest waiting connection is shed first, by when it connected: a slow client that
    connected early and sent its first byte late is older than a client that connected later
    and has not yet been read (the order a loaded CI machine produced, shedding a host's fresh
    connection instead of the slow client)."""
    server = RunningServer(_app(b"ok"), host="127.0.0.1", port=0, limits=Limits(connection_limit=6))
    socks: list[socket.socket] = []
    try:

        def connect() -> socket.socket:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            socks.append(s)
            time.sleep(0.3)  # accepted by the loop before the next one
            return s

        slow = connect()  # connects first ...
        fresh = connect()  # ... the host connects after it ...
        slow.sendall(b"G")  # ... and the slow client's first byte comes later still
        time.sleep(0.3)
        for _ in range(8):  # more connections until the server is at its limit and sheds
            connect()
            if _closed_by_server(slow) or _closed_by_server(fresh):
                break
        assert _closed_by_server(slow), "the oldest slow client was not shed"
        assert not _closed_by_server(fresh), "the newer connection was shed before the oldest"
        fresh.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        fresh.settimeout(10)
        assert fresh.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_a_request_must_arrive_within_the_deadline() -> None:
    server = RunningServer(
        _app(b"ok"), host="127.0.0.1", port=0, limits=Limits(request_timeout_s=1.0)
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            header = b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 1000
            closed = False
            for byte in header:  # one byte every 50 ms: bounded at 50 s, closed after ~1 s
                try:
                    s.send(bytes([byte]))
                except OSError:
                    closed = True
                    break
                s.settimeout(0.05)
                try:
                    if s.recv(4096) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
            assert closed
        assert _fetch_once(server.port, "t") == 200  # the server itself is fine
    finally:
        server.stop()


def test_serve_warns_when_its_clock_is_set_back_under_a_served_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from datetime import UTC, datetime, timedelta

    from rensei_routing import signing
    from rensei_routing.control.server import SnapshotService
    from rensei_routing.core.snapshot.envelope import seal

    key = signing.PrivateKey(bytes(range(32)))
    t0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    snap = seal(
        org_id="org_a",
        revision=3,
        compiled_at=t0.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections={"posteriorSummary": {"arms": [{"arm": "a", "alpha": 1, "beta": 1}]}},
        signing_key_id=key.public_key.key_id,
        sign=key.sign,
    )
    clock = [t0 + timedelta(seconds=30)]
    service = SnapshotService(
        latest=lambda: snap,
        compile_now=lambda: snap,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
        clock=lambda: clock[0],
        clock_check_s=0,
    )
    with caplog.at_level("WARNING", logger="rensei_routing.http"):
        assert service.current().snapshot is snap
        assert "ahead of this clock" not in caplog.text
        clock[0] = t0 - timedelta(hours=24)  # the clock, 24 h ahead when it compiled, is fixed
        assert service.current().snapshot is snap  # still served (hosts decide)...
    assert "snapshot org_a@3 was compiled at 2026-11-30T09:00:00.000000Z, 24h00m ahead" in (
        caplog.text
    )  # ...and said
