"""The version a user sees is the release: ``rensei --version`` prints setup.cfg's version, and
CHANGELOG.md's newest release is that version (so a release cannot ship without its entry)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def _setup_cfg_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    return parser["metadata"]["version"]


def test_the_release_is_0_2_0() -> None:
    assert _setup_cfg_version() == "0.2.0"


def test_rensei_version_prints_the_installed_release() -> None:
    """Needs the package installed from this checkout (``pip install -e .`` again after a version
    change: the installed metadata is what ``--version`` reads)."""
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"rensei, version {_setup_cfg_version()}\n"


def test_the_changelog_names_the_release_first_and_every_release_once() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text, flags=re.M)
    assert releases[0] == _setup_cfg_version()
    assert releases == sorted(set(releases), key=lambda v: tuple(map(int, v.split("."))))[::-1]
    assert "0.1.0" in releases
    for section in ("### Upgrading from 0.1.0", "### Deprecated", "removed in 0.3.0"):
        assert section in text, section
