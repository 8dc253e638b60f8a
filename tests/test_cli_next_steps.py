"""Doing things in the wrong order gets guidance (issue 22, edge 15): a command run before what
it needs says on stderr what to run next (``note: ...; next: `rensei ...```), with its result
(if any) on stdout as before, and writes nothing: no home appears where there was none."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
CANDIDATE = EXAMPLES / "hydraflow" / "candidate-policies.json"


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(
    ("initialised", "argv", "code", "stdout", "nexts"),
    [
        (False, ["host", "status"], 0, "", ["rensei host trust KEY", "rensei host sync --from"]),
        (True, ["host", "status"], 0, "", ["rensei host trust KEY", "rensei host sync --from"]),
        (
            True,
            ["policy", "whatif", str(CANDIDATE)],
            0,
            "no recorded contexts\n",
            ["rensei explain CONTEXT --record", "rensei shadow record SPAWNS.jsonl"],
        ),
        (True, ["shadow", "report"], 0, "no shadow records\n", ["rensei shadow record"]),
        (True, ["policy", "history"], 0, "no revisions saved yet\n", ["rensei policy save FILE"]),
        (True, ["audit", "tail"], 0, "", ["rensei explain CONTEXT --record"]),
        (False, ["explain", "{}"], 0, None, ["rensei init --home", "rensei policy save FILE"]),
        (True, ["snapshot", "show"], 1, "", ["rensei snapshot compile"]),
    ],
    ids=[
        "status-no-home",
        "status-no-source",
        "whatif-nothing-recorded",
        "shadow-report-nothing-recorded",
        "policy-history-empty",
        "audit-tail-empty",
        "explain-no-home",
        "snapshot-show-none-compiled",
    ],
)
def test_a_command_run_too_early_says_what_to_run_next(
    tmp_path: Path,
    initialised: bool,
    argv: list[str],
    code: int,
    stdout: str | None,
    nexts: list[str],
) -> None:
    home = tmp_path / "home"
    if initialised:
        assert _run("init", "--home", str(home)).exit_code == 0
    before = _files(tmp_path)
    done = _run(*argv, "--home", str(home))
    assert done.exit_code == code, done.output
    if stdout is not None:
        assert done.stdout == stdout
    for command in nexts:
        assert f"`{command}" in done.stderr, done.stderr
    assert "Traceback" not in done.output
    assert _files(tmp_path) == before  # nothing written, no home made


def test_compiling_an_empty_home_says_what_to_load(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    assert _run("init", "--home", home).exit_code == 0
    done = _run("snapshot", "compile", "--home", home)
    assert done.exit_code == 0 and done.stdout == ""
    assert "so the snapshot routes nothing; next: `rensei policy save FILE`" in done.stderr
    assert "grants no pool (every claim is refused); next: `rensei org load FILE`" in done.stderr
    assert _run("policy", "save", str(EXAMPLES / "policies.json"), "--home", home).exit_code == 0
    assert _run("org", "load", str(EXAMPLES / "org.json"), "--home", home).exit_code == 0
    again = _run("snapshot", "compile", "--home", home)
    assert again.exit_code == 0 and "next:" not in again.stderr
