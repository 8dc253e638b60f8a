"""Starting `rensei ui` as a real process for the console tests: on a free loopback port (the
console prints the address it bound), stopped with SIGTERM (then SIGKILL) in ``finally``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ADDRESS = re.compile(r"console: (http://\S+/)")


@contextmanager
def running_ui(
    home: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """``rensei ui`` on ``home`` (any free port unless ``args`` name one) in ``env`` (default:
    the tests' own); yields its base URL (no trailing slash). Its stderr goes to ``log``."""
    with running_ui_process(home, log, *args, env=env) as (base, _):
        yield base


@contextmanager
def running_ui_process(
    home: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`running_ui`, yielding the process too (to watch its threads)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rensei_routing.cli",
                "--home",
                str(home),
                "ui",
                "--port",
                "0",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
        )
    try:
        base = None
        for _ in range(600):  # up to 60 s for the start-up line
            found = _ADDRESS.search(log.read_text(encoding="utf-8", errors="replace"))
            if found:
                base = found.group(1).rstrip("/")
                break
            if proc.poll() is not None:
                raise AssertionError(f"rensei ui exited {proc.returncode}: {log.read_text()}")
            time.sleep(0.1)
        assert base is not None, f"rensei ui printed no address: {log.read_text()}"
        yield base, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def fetch(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """``(status, body)`` of one request (errors included)."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(predicate: object, what: str, *, tries: int = 300, pause: float = 0.2) -> None:
    """Poll ``predicate()`` until true (bounded: ``tries`` times ``pause`` seconds)."""
    assert callable(predicate)
    for _ in range(tries):
        if predicate():
            return
        time.sleep(pause)
    raise AssertionError(f"timed out waiting for {what}")
