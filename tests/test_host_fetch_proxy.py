"""Fetching from a loopback endpoint never goes through a proxy from the environment (a proxy
cannot reach this machine's loopback: the quickstart and a local `serve` would fail), while a
remote endpoint still honours it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from rensei_routing.control.server import serve_in_thread
from rensei_routing.host.fetch import _is_loopback, fetch_snapshot

DEAD = "http://127.0.0.1:9"


def _app(environ: dict[str, Any], start: Any) -> Iterable[bytes]:
    start("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


def test_loopback_bypasses_environment_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, DEAD)
    monkeypatch.setenv("no_proxy", "")
    server = serve_in_thread(_app, host="127.0.0.1", port=0)
    try:
        result = fetch_snapshot(f"http://127.0.0.1:{server.port}", token="t")
    finally:
        server.stop()
    assert result.status == 200 and result.body == b"{}"


def test_a_remote_endpoint_uses_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def proxy(environ: dict[str, Any], start: Any) -> Iterable[bytes]:
        seen.append(environ.get("HTTP_HOST", ""))
        return _app(environ, start)

    server = serve_in_thread(proxy, host="127.0.0.1", port=0)
    try:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
        monkeypatch.setenv("no_proxy", "")
        result = fetch_snapshot("http://snapshots.example.invalid", token="t", timeout_s=5)
    finally:
        server.stop()
    assert result.body == b"{}" and seen == ["snapshots.example.invalid"]


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8787", True),
        ("http://127.8.9.10/", True),
        ("http://[::1]:8787", True),
        ("http://localhost:1", True),
        ("http://10.0.0.1:8787", False),
        ("https://control.example.com", False),
    ],
)
def test_is_loopback(url: str, loopback: bool) -> None:
    assert _is_loopback(url) is loopback
