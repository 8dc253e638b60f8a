"""``GET /api/daemon/routing/config`` on a daemon with no snapshot source (issue 29, divergence
3; document 000: the snapshot line is "absent, not wrong" there): ``host run --listen`` starts
without a source, answers 200 with the snapshot status absent and polls nothing; ``serve``
answers the route too, with its own home's host cache status (what ``host status --json``
says). Real processes, real HTTP on loopback; every wait is bounded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .test_serve import EXAMPLES, _env, rensei, serving

pytestmark = pytest.mark.slow

CONFIG = "/api/daemon/routing/config"


def _config(base: str) -> tuple[int, dict[str, Any]]:
    with urllib.request.urlopen(base + CONFIG, timeout=10) as response:  # no token
        return response.status, json.loads(response.read())


class _HostRun:
    """A ``host run`` process; its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rensei_routing.cli", "host", "run", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_env(),
            text=True,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "nothing to poll" in line:
                self._ready.set()
        self._ready.set()

    def url(self) -> str:
        assert self._ready.wait(60), self.lines
        for line in self.lines:
            if line.startswith("status on "):
                return line.split()[2].removesuffix(CONFIG)
        raise AssertionError(f"no status line in {self.lines}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self._reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


def _files(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def test_host_run_listen_without_a_source_serves_the_status_absent(tmp_path: Path) -> None:
    home = tmp_path / "daemon"
    rensei("init", "--org", "acme", "--home", str(home))
    before = _files(home)
    run = _HostRun("--listen", "127.0.0.1:0", "--home", str(home))
    try:
        status, body = _config(run.url())
        assert status == 200
        assert body["source"] == {"endpoint": None, "file": None, "configured": False}
        assert body["snapshot"] is None and body["lastFetch"] is None
        assert "error" not in body
        assert any("nothing to poll" in line for line in run.lines)
        assert run.proc.poll() is None  # still serving
    finally:
        code = run.stop()
    assert code == 0 and "stopped" in run.lines[-1], run.lines
    assert not any("Traceback" in line or "poll failed" in line for line in run.lines), run.lines
    assert _files(home) == before  # polled nothing, wrote nothing


def test_host_run_without_a_source_or_listen_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "daemon"
    rensei("init", "--org", "acme", "--home", str(home))
    done = rensei("host", "run", "--home", str(home), check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: no snapshot source configured")
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_answers_the_config_route_with_its_home_host_status(tmp_path: Path) -> None:
    """A control home with no host source: 200, snapshot absent. The same home after it synced
    its own export into its host cache (one machine, both sides): the route shows it, exactly
    as ``host status --json`` does."""
    home = tmp_path / "control"
    rensei("init", "--org", "acme", "--home", str(home))
    rensei("org", "load", str(EXAMPLES / "org.json"), "--home", str(home))
    rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home))
    rensei("snapshot", "compile", "--home", str(home))
    with serving(home) as serve:
        status, body = _config(serve.url)
        assert status == 200
        assert body["source"]["configured"] is False and body["snapshot"] is None
    export = tmp_path / "acme.json"
    rensei("snapshot", "export", str(export), "--home", str(home))
    rensei("host", "trust", "--from-home", str(home), "--home", str(home))
    rensei("host", "sync", "--from", str(export), "--home", str(home))
    with serving(home) as serve:
        status, body = _config(serve.url)
        cli = json.loads(rensei("host", "status", "--json", "--home", str(home)).stdout)
    assert status == 200
    assert body["snapshot"]["rulesetRev"] == "acme@1" == cli["snapshot"]["rulesetRev"]
    assert body["source"] == cli["source"] and body["lastAdopted"] == cli["lastAdopted"]
