"""Fetching a snapshot over HTTP: bearer token, ``If-None-Match``, timeouts and a body limit.

Adapter: stdlib ``urllib`` only; decides nothing (the cache verifies what this returns).
"""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Final

from ..core.snapshot.envelope import MAX_SNAPSHOT_BYTES
from ..errors import FetchError

__all__ = ["FetchResult", "fetch_snapshot"]

SNAPSHOT_PATH: Final = "/api/daemon/ruleset-snapshot"
_CHUNK: Final = 256 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult:
    """``body`` is ``None`` on ``304 Not Modified``."""

    status: int
    body: bytes | None
    headers: dict[str, str]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a snapshot source that redirects is refused, not followed


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
    max_bytes: int = MAX_SNAPSHOT_BYTES,
) -> FetchResult:
    """GET the snapshot at ``endpoint`` (a base URL or the full path). Proxies from the
    environment (``https_proxy``, ``no_proxy``) apply, except to a loopback address.

    Raises:
        FetchError: unreachable, timed out, a non-200/304 status (its body's first line is
            quoted), a redirect, or a body over ``max_bytes``.
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
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if _is_loopback(url):
        handlers.append(urllib.request.ProxyHandler({}))  # a proxy cannot reach our loopback
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout_s) as response:
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
            return FetchResult(status=response.status, body=b"".join(chunks), headers=headers)
    except urllib.error.HTTPError as e:
        if e.code == 304:
            return FetchResult(
                status=304, body=None, headers={k.lower(): v for k, v in e.headers.items()}
            )
        detail = e.read(512).decode("utf-8", "replace").strip().splitlines()
        raise FetchError(f"{url} answered {e.code}" + (f": {detail[0]}" if detail else "")) from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot fetch {url}: {reason}") from e
