"""Every command takes ``--home DIR`` (docs/commands.md says so): the whole click command tree is
walked and every leaf is run with ``--home DIR``. The commands that read no home (their inputs are
files, plugins or a fleet URL) accept it and ignore it: same output, nothing created."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli._root import load_all_builtins

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rensei_routing/examples"

#: The commands that read no home; their --home is accepted and ignored.
IGNORED = (
    "fleet ingest",
    "fleet report",
    "fleet trust",
    "plugins check",
    "plugins list",
    "policy validate",
    "seams list",
    "snapshot verify",
)


def _leaves() -> list[tuple[tuple[str, ...], click.Command]]:
    load_all_builtins()
    found: list[tuple[tuple[str, ...], click.Command]] = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                walk(command, (*path, name))
            else:
                found.append(((*path, name), command))

    walk(cli, ())
    return found


LEAVES = _leaves()


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(p) for p, _ in LEAVES}
    assert len(names) > 50 and set(IGNORED) <= names
    assert {"audit verify", "host receipt verify", "host session start", "explain"} <= names


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=" ".join)
def test_every_command_accepts_home(path: tuple[str, ...], tmp_path: Path) -> None:
    command = dict(LEAVES)[path]
    assert any("--home" in getattr(p, "opts", ()) for p in command.params), path
    # --help after --home: click parses every option first, so an unknown --home exits 2
    done = CliRunner().invoke(cli, [*path, "--home", str(tmp_path / "h"), "--help"])
    assert done.exit_code == 0, done.output
    assert "--home DIRECTORY" in done.output
    if " ".join(path) in IGNORED:
        assert "Accepted and ignored" in done.output
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["policy", "validate", str(EXAMPLES / "policies.json")],
        ["policy", "validate", str(EXAMPLES / "policies.json"), "--json"],
        ["seams", "list", "--json"],
        ["plugins", "list"],
    ],
    ids=["policy-validate", "policy-validate-json", "seams-list", "plugins-list"],
)
def test_an_ignored_home_changes_nothing(argv: list[str], tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    without = CliRunner().invoke(cli, argv)
    given = CliRunner().invoke(cli, [*argv, "--home", str(home)])
    assert given.exit_code == without.exit_code == 0, given.output
    assert given.output == without.output
    assert not home.exists()


def test_snapshot_verify_with_home(tmp_path: Path, runner: CliRunner) -> None:
    control = tmp_path / "c"
    for argv in (
        ["init", "--org", "acme"],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["snapshot", "compile"],
        ["snapshot", "export", str(tmp_path / "s.json")],
    ):
        done = runner.invoke(cli, [*argv, "--home", str(control)])
        assert done.exit_code == 0, done.output
    verify = ["snapshot", "verify", str(tmp_path / "s.json"), "--trust"]
    verify.append(str(control / "keys/host.pub"))
    without = runner.invoke(cli, verify)
    given = runner.invoke(cli, [*verify, "--home", str(tmp_path / "other")])
    assert given.exit_code == without.exit_code == 0, given.output
    assert given.output == without.output and "acme@1" in given.output
    assert not (tmp_path / "other").exists()
