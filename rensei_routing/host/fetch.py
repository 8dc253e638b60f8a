"""Fetching a snapshot over HTTP: bearer token, ``If-None-Match``, timeouts (per socket
operation, and a deadline for the whole fetch), a body limit; any malformed response (a bad
status line, an oversized header, too many headers, a truncated chunked body, a reset) is a
:class:`~rensei_routing.errors.FetchError`, never an ``http.client`` exception.

Adapter: stdlib ``urllib`` only; decides nothing (the cache verifies what this returns).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Final

from ..core.snapshot.envelope import MAX_SNAPSHOT_BYTES
from ..errors import FetchError

__all__ = ["FetchResult", "fetch_snapshot"]

SNAPSHOT_PATH: Final = "/api/daemon/ruleset-snapshot"
_CHUNK: Final = 256 * 1024
#: The longest a whole fetch may take (a peer trickling bytes resets no clock).
DEFAULT_DEADLINE_S: Final = 60.0
_QUOTED: Final = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult:
    """``body`` is ``None`` on ``304 Not Modified``."""

    status: int
    body: bytes | None
    headers: dict[str, str]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a snapshot source that redirects is refused, not followed


class _Sockets:
    """The sockets one fetch opened, so its deadline can cut them (a socket shut down wakes the
    read blocked on it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.expired = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.append(sock)
            if self.expired:
                self._cut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._open:
                self._cut(sock)

    @staticmethod
    def _cut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _watched(http_class: type[http.client.HTTPConnection], sockets: _Sockets) -> Any:
    class Watched(http_class):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            super().connect()
            sockets.add(self.sock)

    return Watched


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, sockets: _Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self._sockets), req, **kwargs)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, sockets: _Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self._sockets), req, **kwargs)


def _quote(e: BaseException) -> str:
    """The exception on one printable line (what the peer sent may hold any byte)."""
    text = f"{type(e).__name__}: {e}"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fetch_snapshot(
    endpoint: str,
    *,
    token: str,
    etag: str | None = None,
    timeout_s: float = 10.0,
    deadline_s: float = DEFAULT_DEADLINE_S,
    max_bytes: int = MAX_SNAPSHOT_BYTES,
) -> FetchResult:
    """GET the snapshot at ``endpoint`` (a base URL or the full path). Proxies from the
    environment (``https_proxy``, ``no_proxy``) apply, except to a loopback address.
    ``timeout_s`` bounds each socket operation, ``deadline_s`` the whole fetch.

    Raises:
        FetchError: unreachable, timed out, past the deadline, a non-200/304 status (its
            body's first line is quoted), a redirect, a body over ``max_bytes``, or a malformed
            response (status line, headers, chunked framing, a connection cut mid-body).
    """
    url = (
        endpoint
        if endpoint.rstrip("/").endswith(SNAPSHOT_PATH)
        else (endpoint.rstrip("/") + SNAPSHOT_PATH)
    )
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"endpoint {endpoint!r} is not an http(s) URL")
    request = urllib.request.Request(url, method="GET")
    request.add_header("Authorization", f"Bearer {token}")
    if etag is not None:
        request.add_header("If-None-Match", f'"{etag}"')
    sockets = _Sockets()
    handlers: list[urllib.request.BaseHandler] = [
        _NoRedirect(),
        _WatchedHTTP(sockets),
        _WatchedHTTPS(sockets),
    ]
    if _is_loopback(url):
        handlers.append(urllib.request.ProxyHandler({}))  # a proxy cannot reach our loopback
    opener = urllib.request.build_opener(*handlers)
    watchdog = threading.Timer(deadline_s, sockets.expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        result = _get(opener, request, url, timeout_s=timeout_s, max_bytes=max_bytes)
    except FetchError as e:
        if sockets.expired:
            raise FetchError(f"fetching {url} took longer than {deadline_s:g}s") from e
        raise
    finally:
        watchdog.cancel()
    if sockets.expired:  # cut at the deadline: what arrived may look complete and is not
        raise FetchError(f"fetching {url} took longer than {deadline_s:g}s")
    return result


def _get(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
) -> FetchResult:
    """Raises: FetchError."""
    try:
        with opener.open(request, timeout=timeout_s) as response:
            if response.status != 200:
                raise FetchError(f"{url} answered {response.status}, not 200")
            headers = {k.lower(): v for k, v in response.headers.items()}
            declared = headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise FetchError(f"snapshot body of {declared} bytes is over {max_bytes}")
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise FetchError(f"snapshot body is over {max_bytes} bytes")
                chunks.append(chunk)
            if declared is not None and declared.isdigit() and total != int(declared):
                raise FetchError(f"{url} sent {total} of the {declared} bytes it announced")
            return FetchResult(status=response.status, body=b"".join(chunks), headers=headers)
    except urllib.error.HTTPError as e:
        try:
            if e.code == 304:
                return FetchResult(
                    status=304, body=None, headers={k.lower(): v for k, v in e.headers.items()}
                )
            detail = e.read(512).decode("utf-8", "replace").strip().splitlines()
        except (http.client.HTTPException, OSError, ValueError):
            detail = []
        finally:
            e.close()
        quoted = f": {detail[0][:_QUOTED]}" if detail else ""
        raise FetchError(f"{url} answered {e.code}{quoted}") from e
    except http.client.HTTPException as e:
        raise FetchError(f"malformed response from {url}: {_quote(e)}") from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, http.client.HTTPException):
            raise FetchError(f"malformed response from {url}: {_quote(reason)}") from e
        raise FetchError(f"cannot fetch {url}: {reason}") from e
