"""`rensei ui` over real HTTP: every route is GET (anything else is 405 and writes nothing),
every page answers against a real home while a writer appends beside it and on a read-only
medium, and binding beyond loopback requires the home's serve token."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.control.snapshots import ensure_serve_token
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home

from .conftest import read_only_view
from .console_support import fetch, running_ui
from .shadow_support import home_with_policies, registry, spawn

PAGES = ["/", "/shadow", "/divergences", "/whatif", "/policies", "/audit", "/decision/0"]


def _home(tmp_path: Path) -> Home:
    home = home_with_policies(tmp_path)
    with ShadowRecorder(home, registry(), clock=lambda: "2026-03-01T10:00:00.000000Z") as rec:
        rec.record_many([Spawn.from_dict(spawn()), Spawn.from_dict(spawn(principal_id="planner"))])
    return home


def _digest(home: Home) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.path.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def test_every_page_answers_and_nothing_but_get_is_served(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = _digest(home)
    with running_ui(home.path, tmp_path / "ui.log") as base:
        for path in PAGES:
            status, body = fetch(base + path)
            assert status == 200, (path, body[:300])
            assert b"<!doctype html>" in body
            # air-gapped: nothing is loaded from anywhere but this server, no script at all
            assert not re.search(rb'(src|href|action)="(https?:)?//', body), path
            assert b"<script" not in body, path
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, _ = fetch(base + "/shadow", method=method)
            assert status == 405
        assert fetch(base + "/decision/99")[0] == 404
        assert fetch(base + "/shadow?since=soon")[0] == 400
        assert fetch(base + "/divergences?by=colour")[0] == 400
        css = fetch(base + "/static/console.css")
        assert css[0] == 200 and b"//" not in css[1].replace(b"/*", b"").replace(b"*/", b"")
        assert b"@import" not in css[1] and b"@font-face" not in css[1]
    assert _digest(home) == before  # the console wrote nothing


def test_pages_answer_beside_a_writer(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with running_ui(home.path, tmp_path / "ui.log") as base:
        with ShadowRecorder(home, registry(), clock=lambda: "2026-03-01T11:00:00.000000Z") as rec:
            for _ in range(5):
                rec.record_many([Spawn.from_dict(spawn())] * 20)
                for path in ("/shadow", "/audit"):
                    assert fetch(base + path)[0] == 200
        body = fetch(base + "/shadow")[1]
        assert b"<td class=num>102</td>" in body  # 2 + 5 x 20 spawns


def test_the_console_reads_a_home_on_a_read_only_medium(tmp_path: Path) -> None:
    home = _home(tmp_path)
    copy = tmp_path / "media"
    CliRunner().invoke(cli, ["--home", str(home.path), "backup", str(copy)], catch_exceptions=False)
    with read_only_view(copy) as view, running_ui(view, tmp_path / "ui.log") as base:
        for path in PAGES:
            assert fetch(base + path)[0] == 200, path


def test_beyond_loopback_needs_the_serve_token(tmp_path: Path) -> None:
    home = _home(tmp_path)
    token = ensure_serve_token(home)
    with running_ui(home.path, tmp_path / "ui.log", "--host", "0.0.0.0") as base:
        local = base.replace("0.0.0.0", "127.0.0.1")
        assert fetch(local + "/shadow")[0] == 401
        assert fetch(local + "/shadow", headers={"Authorization": "Bearer nope"})[0] == 401
        ok = fetch(local + "/shadow", headers={"Authorization": f"Bearer {token}"})
        assert ok[0] == 200
        assert fetch(local + "/", headers={"Cookie": f"rensei_ui_token={token}"})[0] == 200


def test_beyond_loopback_without_a_token_file_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path)  # Home.init makes no serve token (`rensei init` does)
    result = CliRunner().invoke(cli, ["--home", str(home.path), "ui", "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "needs the home's serve token" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("bad", ["--port=-1", "--whatif-dir=/nonexistent/dir"])
def test_bad_options_are_usage_errors(tmp_path: Path, bad: str) -> None:
    home = _home(tmp_path)
    result = CliRunner().invoke(cli, ["--home", str(home.path), "ui", bad])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    shutil.rmtree(home.path)
