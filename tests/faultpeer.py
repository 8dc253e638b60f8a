"""A fault-injecting HTTP peer for the host's fetch: a tiny socket server of our own on
127.0.0.1 that answers each request with the next scripted response, well-formed or not (a bad
status line, a 70 KB header, more than 100 headers, truncated or malformed chunked bodies, a
reset, a slow body, a redirect, ...). Real sockets, no mocks; every wait is bounded."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Final

#: Every malformed or hostile kind of response the peer can give (``good`` is a valid one).
FAULTS: Final = (
    "bad-status-line",
    "garbage-status-line",
    "huge-header",
    "many-headers",
    "truncated-chunked",
    "bad-chunk-size",
    "truncated-length",
    "truncated-error-body",
    "reset",
    "close-without-answer",
    "slow-body",
    "redirect",
    "no-content",
)


class FaultPeer:
    """Serves ``script`` in order, one response per connection, then ``then`` forever.
    ``good`` is the body of a ``good`` answer."""

    def __init__(self, script: Iterable[str], *, good: bytes = b"", then: str = "good") -> None:
        self.script = list(script)
        self.then = then
        self.good = good
        self.served: list[str] = []
        self.headers: list[bytes] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FaultPeer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._sock.close()

    def wait_served(self, n: int, timeout: float = 60.0) -> bool:
        """Whether ``n`` responses were given within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.served) >= n, timeout)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                request = self._read_request(conn)
                kind = self.script.pop(0) if self.script else self.then
                try:
                    if request is not None:
                        self._answer(conn, kind)
                except OSError:
                    pass  # the client went away (the deadline cut it): that is the point
                with self._changed:
                    self.headers.append(request or b"")
                    self.served.append(kind)
                    self._changed.notify_all()

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def _trickle(self, conn: socket.socket, data: bytes, pause: float) -> None:
        for i in range(len(data)):
            if self._stop.wait(pause):
                return
            conn.sendall(data[i : i + 1])

    def _answer(self, conn: socket.socket, kind: str) -> None:
        send: Callable[[bytes], None] = conn.sendall
        if kind == "good":
            send(_head(200, [("Content-Length", str(len(self.good)))]) + self.good)
        elif kind == "bad-status-line":
            send(b"HTTQ/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        elif kind == "garbage-status-line":
            send(b"\x00\x1b[31m\xff nonsense\r\n\r\n")
        elif kind == "huge-header":
            send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\nContent-Length: 2\r\n\r\n{}")
        elif kind == "many-headers":
            many = [(f"X-H{i}", "v") for i in range(150)]
            send(_head(200, [*many, ("Content-Length", "2")]) + b"{}")
        elif kind == "truncated-chunked":
            send(_head(200, [("Transfer-Encoding", "chunked")]) + b"1000\r\n" + b"x" * 100)
        elif kind == "bad-chunk-size":
            send(_head(200, [("Transfer-Encoding", "chunked")]) + b"zz\r\nxx\r\n0\r\n\r\n")
        elif kind == "truncated-length":
            send(_head(200, [("Content-Length", "5000")]) + b'{"orgId":')
        elif kind == "truncated-error-body":
            send(_head(500, [("Content-Length", "5000")]) + b"internal")
        elif kind == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif kind == "close-without-answer":
            pass
        elif kind == "slow-body":  # slow, but each byte within the client's per-read timeout
            body = b"not a snapshot, slowly"
            send(_head(200, [("Content-Length", str(len(body)))]))
            self._trickle(conn, body, 0.02)
        elif kind == "slow-forever":  # a byte every 0.1 s for up to 15 s: only a deadline helps
            send(_head(200, [("Content-Length", "1000000")]))
            self._trickle(conn, b"x" * 150, 0.1)
        elif kind == "slow-headers":
            self._trickle(conn, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"s" * 150, 0.1)
        elif kind == "redirect":
            send(_head(302, [("Location", f"{self.url}/elsewhere"), ("Content-Length", "0")]))
        elif kind == "no-content":
            send(_head(204, []))
        else:
            raise AssertionError(f"unknown fault {kind!r}")


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers] + ["", ""]
    return "\r\n".join(lines).encode("latin-1")
