"""One rule for every command that writes an output (``backup DEST``, ``audit checkpoint -o``,
``audit export``, ``snapshot export``, ``host claim --receipt``): its directory must exist. A
missing one is refused before any work, with one line naming it (exit 1), and nothing is
created or stored; with the directory present each writes its output."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"

OUTPUTS = {
    "backup": ["backup", "{out}"],
    "audit-checkpoint": ["audit", "checkpoint", "-o", "{out}"],
    "audit-export": ["audit", "export", "{out}"],
    "snapshot-export": ["snapshot", "export", "{out}"],
    "host-claim-receipt": ["host", "claim", "--pool", "gpu-a", "--receipt", "{out}"],
}


def _ok(runner: CliRunner, *args: str) -> None:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "home"
    _ok(runner, "--home", str(path), "init", "--org", "acme")
    _ok(runner, "--home", str(path), "org", "load", str(EXAMPLES / "org.json"))
    _ok(runner, "--home", str(path), "policy", "save", str(EXAMPLES / "policies.json"))
    _ok(runner, "--home", str(path), "explain", "--record", str(EXAMPLES / "context.json"))
    _ok(runner, "--home", str(path), "snapshot", "compile")
    return path


def _state(home: Path) -> tuple[int, int]:
    with AuditLog.open(Home(home)) as log:
        return log.count(), len(log.checkpoints())


@pytest.mark.parametrize("args", list(OUTPUTS.values()), ids=list(OUTPUTS))
def test_a_missing_output_directory_is_refused_and_nothing_created(
    tmp_path: Path, runner: CliRunner, home: Path, args: list[str]
) -> None:
    missing = tmp_path / "no-such-dir" / "deeper"
    out = missing / "out"
    before = _state(home)
    result = runner.invoke(cli, ["--home", str(home), *(a.format(out=out) for a in args)])
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"Error: cannot write {out}: its directory {missing} does not exist (no command "
        "creates the directory of an output: create it first)\n"
    )
    assert not (tmp_path / "no-such-dir").exists()
    assert _state(home) == before


@pytest.mark.parametrize(
    "args", [a for k, a in OUTPUTS.items() if k != "host-claim-receipt"], ids=list(OUTPUTS)[:-1]
)
def test_with_the_directory_present_the_output_is_written(
    tmp_path: Path, runner: CliRunner, home: Path, args: list[str]
) -> None:
    (tmp_path / "outputs").mkdir()
    out = tmp_path / "outputs" / "out"
    _ok(runner, "--home", str(home), *(a.format(out=out) for a in args))
    assert out.exists()


def test_the_rule_is_documented() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "commands.md").read_text()
    assert "no command creates the directory of an output" in " ".join(text.split())
