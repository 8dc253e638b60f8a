"""Every home is created 0700, whoever creates it (``init``, ``host trust``, ``host sync``
after a trust, ``restore``), whatever the umask; ``init`` into an existing directory its group
or others may enter tightens it to 0700 and says so; a host-only home (trust + sync, never
``init``) passes ``doctor``, which checks only what applies to it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _control(tmp_path: Path, runner: CliRunner) -> tuple[Path, Path]:
    """A control home with a compiled snapshot, and that snapshot exported to a file."""
    ctl = tmp_path / "control"
    _ok(runner, "--home", str(ctl), "init", "--org", "acme")
    _ok(runner, "--home", str(ctl), "org", "load", str(EXAMPLES / "org.json"))
    _ok(runner, "--home", str(ctl), "policy", "save", str(EXAMPLES / "policies.json"))
    _ok(runner, "--home", str(ctl), "snapshot", "compile")
    exported = tmp_path / "snapshot.json"
    _ok(runner, "--home", str(ctl), "snapshot", "export", str(exported))
    return ctl, exported


@pytest.mark.usefixtures("umask_022")
def test_a_host_only_home_is_0700_and_passes_doctor(tmp_path: Path, runner: CliRunner) -> None:
    ctl, exported = _control(tmp_path, runner)
    host = tmp_path / "host-only"
    _ok(runner, "--home", str(host), "host", "trust", str(ctl / "keys" / "host.pub"))
    assert _mode(host) == 0o700
    assert _mode(host / "host") == 0o700 and _mode(host / "host" / "trusted") == 0o700
    _ok(runner, "--home", str(host), "host", "sync", "--from", str(exported))
    result = runner.invoke(cli, ["--home", str(host), "doctor", "--json"])
    assert result.exit_code == 0, result.output
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["home"]["status"] == "ok"
    assert checks["store"]["status"] == "ok" and "host-only" in checks["store"]["detail"]
    assert checks["host cache"]["status"] == "ok" and "acme@1" in checks["host cache"]["detail"]
    assert not {"keys", "audit chain", "snapshot", "schema"} & set(checks)
    assert not (host / "rensei.db").exists()  # doctor wrote nothing
    text = runner.invoke(cli, ["--home", str(host), "doctor"])
    assert text.exit_code == 0 and "host-only" in text.stdout


@pytest.mark.usefixtures("umask_022")
def test_sync_alone_creates_no_home_when_it_fails(tmp_path: Path, runner: CliRunner) -> None:
    _, exported = _control(tmp_path, runner)
    host = tmp_path / "synced"
    result = runner.invoke(cli, ["--home", str(host), "host", "sync", "--from", str(exported)])
    assert result.exit_code == 1  # nothing trusted yet: refused, and a failed command leaves
    assert not host.exists()  # no state (issue 29, new user 8): test_cli_no_trace.py


def test_a_directory_that_is_no_home_still_fails_doctor(tmp_path: Path, runner: CliRunner) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli, ["--home", str(empty), "doctor", "--json"])
    assert result.exit_code == 1
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["home"]["status"] == "fail" and "rensei init" in checks["home"]["detail"]


@pytest.mark.usefixtures("umask_022")
def test_every_home_creator_makes_it_0700(tmp_path: Path, runner: CliRunner) -> None:
    made = tmp_path / "made" / "by" / "init"
    _ok(runner, "--home", str(made), "init")
    assert _mode(made) == 0o700 and _mode(made / "keys") == 0o700
    backup = tmp_path / "backups" / "one"
    backup.parent.mkdir()
    _ok(runner, "--home", str(made), "backup", str(backup))
    assert _mode(backup) == 0o700
    restored = tmp_path / "restored"
    _ok(runner, "--home", str(restored), "restore", str(backup))
    assert _mode(restored) == 0o700


@pytest.mark.usefixtures("umask_022")
def test_init_into_an_existing_0755_directory_warns_and_sets_0700(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    result = runner.invoke(cli, ["--home", str(home), "init"])
    assert result.exit_code == 0, result.output
    assert _mode(home) == 0o700
    assert result.stderr.startswith("warning: ") and "mode 0755): set to 0700" in result.stderr
    assert "warning" not in result.stdout
    again = runner.invoke(cli, ["--home", str(home), "init"])  # nothing left to warn about
    assert again.exit_code == 0 and "warning" not in again.stderr
    assert again.stderr.startswith("already initialised: ")
    os.chmod(home, 0o750)  # an initialised home opened up later: tightened the same way
    third = runner.invoke(cli, ["--home", str(home), "init", "--json"])
    assert third.exit_code == 0 and _mode(home) == 0o700
    assert any("set to 0700" in w for w in json.loads(third.stdout)["warnings"])


def test_the_rules_are_documented() -> None:
    root = Path(__file__).resolve().parent.parent
    commands = (root / "docs" / "commands.md").read_text()
    assert "tightens it to 0700" in commands
    operations = (root / "docs" / "operations.md").read_text()
    assert "host-only home" in operations
