"""A directory where a file is expected: one exit code, 2 (a usage error naming the parameter),
from every command, whether the argument is a plain path or a document that may also be ``-``
or inline JSON (``explain CONTEXT``, ``org load FILE``, ``authorize --context``); nothing is
written."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

COMMANDS = {
    "explain": ["explain", "{dir}"],
    "explain-batch": ["explain-batch", "{dir}"],
    "org-load": ["org", "load", "{dir}"],
    "authorize-context": [
        "authorize",
        "--principal",
        'Project::"acme"',
        "--action",
        "claim",
        "--resource",
        'Pool::"gpu"',
        "--context",
        "{dir}",
    ],
    "policy-validate": ["policy", "validate", "{dir}"],
    "policy-save": ["policy", "save", "{dir}"],
    "policy-whatif": ["policy", "whatif", "{dir}"],
    "shadow-record": ["shadow", "record", "{dir}"],
    "host-trust": ["host", "trust", "{dir}"],
    "host-sync-from": ["host", "sync", "--from", "{dir}"],
    "audit-verify-checkpoint": ["audit", "verify", "--checkpoint", "{dir}"],
    "audit-checkpoint-output": ["audit", "checkpoint", "-o", "{dir}"],
    "audit-export": ["audit", "export", "{dir}"],
    "snapshot-export": ["snapshot", "export", "{dir}"],
    "snapshot-verify": ["snapshot", "verify", "{dir}", "--trust", "{dir}"],
    "explain-policies": ["explain", "{{}}", "--policies", "{dir}"],
    "audit-import": ["audit", "import", "{dir}"],
    "policy-import": ["policy", "import", "{dir}"],
    "host-sync-token-file": [
        "host",
        "sync",
        "--endpoint",
        "http://127.0.0.1:9",
        "--token-file",
        "{dir}",
    ],
    "host-claim-receipt": ["host", "claim", "--pool", "p", "--receipt", "{dir}"],
    "host-receipt-verify": ["host", "receipt", "verify", "{dir}"],
    "host-session-start": ["host", "session", "start", "--receipt", "{dir}"],
    "restore-checkpoint": ["restore", "{dir}", "--checkpoint", "{dir}"],
    "backup-onto-a-file": ["backup", "{file}"],
}


@pytest.mark.parametrize("args", list(COMMANDS.values()), ids=list(COMMANDS))
def test_a_directory_for_a_file_exits_2_from_every_command(
    tmp_path: Path, runner: CliRunner, args: list[str]
) -> None:
    home = tmp_path / "home"
    assert runner.invoke(cli, ["--home", str(home), "init"]).exit_code == 0
    folder = tmp_path / "a-folder"
    folder.mkdir()
    before = sorted(p.name for p in home.rglob("*"))
    with AuditLog.open(Home(home)) as log:
        records = log.verify().records_checked
    a_file = tmp_path / "a-file"
    a_file.write_text("{}")
    given = [a.format(dir=folder, file=a_file) for a in args]
    result = runner.invoke(cli, ["--home", str(home), *given])
    assert result.exit_code == 2, result.output
    assert "is a directory" in result.output or "is a file" in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in home.rglob("*")) == before
    assert list(folder.iterdir()) == []
    with AuditLog.open(Home(home)) as log:
        assert log.verify().records_checked == records


def test_inline_json_and_stdin_are_not_taken_for_directories(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").mkdir()  # a directory named like stdin does not shadow stdin
    result = runner.invoke(cli, ["explain", "-"], input='{"repo": "acme/widgets"}')
    assert result.exit_code == 0, result.output
    assert runner.invoke(cli, ["explain", '{"repo": "acme/widgets"}']).exit_code == 0


def test_the_rule_is_documented() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    assert "a directory where a file is expected" in text.lower()
