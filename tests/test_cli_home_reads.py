"""A command reads its home's metadata (org, key id) once, whichever helpers and services it goes
through (docs/architecture.md): counted at the one function that reads the ``meta`` table."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store import home as home_module

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "h"
    for args in (
        ["init", "--org", "acme"],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["snapshot", "compile"],
    ):
        result = runner.invoke(cli, ["--home", str(path), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli,
        ["--home", str(path), "host", "trust", str(path / "keys" / "host.pub")],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return path


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = home_module._read_meta

    def counting(conn: object) -> dict[str, str]:
        calls.append(1)
        return real(conn)  # type: ignore[arg-type]

    monkeypatch.setattr(home_module, "_read_meta", counting)
    return calls


@pytest.mark.parametrize(
    "args",
    [
        ["snapshot", "compile"],
        ["snapshot", "history"],
        ["explain", "--record", str(EXAMPLES / "context.json")],
        ["host", "claim", "--pool", "gpu-a"],
        ["audit", "verify"],
        ["audit", "checkpoint"],
        ["policy", "show"],
        ["doctor"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_command_reads_its_homes_metadata_once(
    home: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    calls = _reads(monkeypatch)
    result = runner.invoke(cli, ["--home", str(home), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert len(calls) == 1, f"{' '.join(args)} read the home's metadata {len(calls)} times"


def test_the_count_sees_every_read(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Home objects for one path read twice: the count is not vacuous."""
    calls = _reads(monkeypatch)
    home_module.Home(home).info()
    home_module.Home(home).info()
    assert len(calls) == 2
