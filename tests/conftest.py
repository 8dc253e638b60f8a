"""Shared fixtures: every test runs with its home and config pointed at ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner


def pytest_configure(config: pytest.Config) -> None:
    import os

    os.environ["RENSEI_ROUTING_LOAD_PLUGINS"] = ""


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RENSEI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
