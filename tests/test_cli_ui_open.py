"""``rensei ui --open``: on a machine where no web browser can be opened (no display, none on
PATH) it says so on stderr and names the URL to open; where one can, the browser gets the URL
and nothing is said. A real ``rensei ui`` process each time."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli

from .console_support import running_ui


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    assert CliRunner().invoke(cli, ["init", "--org", "acme", "--home", str(home)]).exit_code == 0
    return home


def _env(path: str, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "PATH")
    }
    return {**env, "PATH": path, **extra}


def test_open_on_a_headless_machine_says_so_and_prints_the_url(tmp_path: Path) -> None:
    log = tmp_path / "ui.log"
    # only the interpreter's own directory on PATH: no xdg-open, lynx, w3m, ...
    env = _env(str(Path(sys.executable).parent))
    with running_ui(_home(tmp_path), log, "--open", env=env) as base:
        for _ in range(100):
            if "warning:" in log.read_text():
                break
            time.sleep(0.1)
    text = log.read_text()
    assert f"warning: no web browser could be opened here: open {base}/ yourself" in text, text


def test_open_hands_the_url_to_a_browser_and_says_nothing_more(tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    browser = tmp_path / "bin" / "fake-browser"
    browser.parent.mkdir()
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    log = tmp_path / "ui.log"
    env = _env(f"{browser.parent}{os.pathsep}{Path(sys.executable).parent}", BROWSER=str(browser))
    with running_ui(_home(tmp_path), log, "--open", env=env) as base:
        for _ in range(100):
            if opened.exists() and opened.read_text().strip():
                break
            time.sleep(0.1)
        assert opened.read_text().strip() == f"{base}/"
    assert "warning" not in log.read_text()
