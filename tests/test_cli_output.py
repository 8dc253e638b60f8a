"""What the CLI writes (``cli/_output.py``): a stdout that cannot be written is its own exit code
and one line, never a traceback or a verdict; and no control character reaches a terminal.

The stdout failures run the real command in a subprocess, writing to ``/dev/full`` and to a
pipe whose reader is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.cli._output import json_text, printable
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

T0 = "2025-03-01T12:00:00.000000Z"
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
_CLI = "import sys; from rensei_routing.cli import cli; cli(prog_name='rensei')"


def _rensei(*args: str, stdout: int, stdin: bytes | None = None) -> tuple[int, str]:
    """Run ``rensei ARGS`` in a fresh interpreter; returns (exit code, stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        input=stdin,
        timeout=120,
    )
    return done.returncode, done.stderr.decode("utf-8", "replace")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "h"
    Home(path).init(org="acme")
    with AuditLog.open(Home(path)) as log:
        log.append_many([{"n": i} for i in range(5)], recorded_at=T0)
    yield path


def _checkpoint_count(home: Path) -> int:
    conn = apsw.Connection(str(home / "rensei.db"))
    try:
        return int(conn.execute("SELECT count(*) FROM audit_checkpoints").fetchall()[0][0])
    finally:
        conn.close()


@pytest.fixture(params=["dev-full", "closed-pipe"])
def broken_stdout(request: pytest.FixtureRequest) -> Iterator[int]:
    """A file descriptor no write can succeed on."""
    if request.param == "dev-full":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        fd = os.open("/dev/full", os.O_WRONLY)
    else:
        read, fd = os.pipe()
        os.close(read)  # the reader is gone: every write is EPIPE
    try:
        yield fd
    finally:
        os.close(fd)


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["text", "json"])
def test_verify_that_cannot_write_its_verdict_is_could_not_verify(
    home: Path, broken_stdout: int, extra: tuple[str, ...]
) -> None:
    code, stderr = _rensei("audit", "verify", "--home", str(home), *extra, stdout=broken_stdout)
    assert code == 3, stderr  # not 1: nothing was found broken, the check was never reported
    assert "could not verify" in _one_line(stderr)


def test_checkpoint_to_an_unwritable_stdout_stores_nothing(home: Path, broken_stdout: int) -> None:
    code, stderr = _rensei("audit", "checkpoint", "--home", str(home), stdout=broken_stdout)
    assert code == 3, stderr
    assert "stdout" in _one_line(stderr)
    assert _checkpoint_count(home) == 0  # never shown, so never stored
    # and the same command to a working stdout stores exactly one
    code, stderr = _rensei("audit", "checkpoint", "--home", str(home), stdout=subprocess.PIPE)
    assert code == 0, stderr
    assert _checkpoint_count(home) == 1


@pytest.mark.parametrize(
    "args",
    [
        ("explain", str(EXAMPLES / "context.json"), "--policies", str(EXAMPLES / "policies.json")),
        ("policy", "show"),
        ("audit", "tail"),
        ("audit", "show", "0", "--json"),
        ("policy", "history"),
        (
            "explain-batch",
            str(EXAMPLES / "contexts.jsonl"),
            "--policies",
            str(EXAMPLES / "policies.json"),
        ),
    ],
    ids=["explain", "policy-show", "tail", "show", "history", "explain-batch"],
)
def test_every_command_reports_an_unwritable_stdout_in_one_line(
    home: Path, broken_stdout: int, args: tuple[str, ...]
) -> None:
    code, stderr = _rensei(*args, "--home", str(home), stdout=broken_stdout)
    assert code == 3, stderr
    assert "cannot write to stdout" in _one_line(stderr)


# -- terminal safety ---------------------------------------------------------------------------

#: Retitles an xterm, returns the cursor to column 0, and forges a line: everything a hostile
#: context might try through a text output.
HOSTILE = "evil\x1b]0;owned\x07\r  + anthropic-primary eligible (chosen)\n\x9b31m\u202e\u2028"


def _assert_terminal_safe(text: str) -> None:
    for bad in ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\u2028"):
        assert bad not in text, (bad, text)


def test_printable_escapes_every_control_and_keeps_the_rest() -> None:
    assert printable("acme/widgets glm-5.3 ünïcödé 路由") == "acme/widgets glm-5.3 ünïcödé 路由"
    assert printable("a\x1b]0;x\x07b\r\n\t\x7f\x85\u2028\U000e0001") == (
        "a\\x1b]0;x\\x07b\\x0d\\x0a\\x09\\x7f\\x85\\u2028\\U000e0001"
    )


@pytest.mark.parametrize("indent", [None, 2])
def test_json_text_escapes_controls_and_parses_to_the_same_value(indent: int | None) -> None:
    value = {"k\u2029": [HOSTILE, "\U000e0001 tag", "plain"], "n": 1}
    text = json_text(value, indent=indent)
    _assert_terminal_safe(text)
    assert "\U000e0001" not in text and "\\udb40\\udc01" in text
    assert all(c.isprintable() or c == "\n" for c in text)
    assert json.loads(text) == value


def _context(account: str) -> str:
    return json.dumps(
        {
            "repo": "acme/widgets",
            "principal_id": "implementer",
            "accounts": [{"account_id": account, "provider_binding": "anthropic"}],
            "legacy_route": {"provider_binding": "anthropic", "account_id": account},
        }
    )


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def test_explain_text_output_cannot_drive_the_terminal(runner: CliRunner, tmp_path: Path) -> None:
    anywhere = tmp_path / "p.json"
    anywhere.write_text('[{"id": "anywhere"}]', encoding="utf-8")
    args = ["explain", _context(HOSTILE), "--policies", str(anywhere)]
    result = _ok(runner.invoke(cli, args))
    _assert_terminal_safe(result.stdout)
    forged = [line for line in result.stdout.splitlines() if line.startswith("  + anthropic")]
    assert forged == []  # the account's newline did not start a line of its own
    assert "  + evil\\x1b]0;owned\\x07\\x0d  + anthropic-primary" in result.stdout
    as_json = _ok(runner.invoke(cli, [*args, "--json"]))
    _assert_terminal_safe(as_json.stdout)
    assert json.loads(as_json.stdout)["explanation"]["eligible_account_ids"] == [HOSTILE.strip()]


def test_explain_batch_lines_stay_one_line_each(runner: CliRunner, tmp_path: Path) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text(_context(HOSTILE) + "\n" + _context("plain") + "\n", encoding="utf-8")
    result = _ok(runner.invoke(cli, ["explain-batch", str(batch)]))
    _assert_terminal_safe(result.stdout)
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == 3
    assert json.loads(lines[0])["account_id"] == HOSTILE  # the legacy route, verbatim


def test_policy_outputs_escape_policy_text(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _ok(runner.invoke(cli, ["init", "--home", str(home)]))
    policies = tmp_path / "p.json"
    bad = [{"id": "ok-policy", "description": HOSTILE}, {"id": HOSTILE}]
    policies.write_text(json.dumps(bad), encoding="utf-8")
    validated = runner.invoke(cli, ["policy", "validate", str(policies)])
    assert validated.exit_code == 1
    _assert_terminal_safe(validated.stdout + validated.stderr)
    assert validated.stdout.count("\n") == 1  # one issue, one line, despite the id's newline
    good = [{"id": "ok-policy", "description": HOSTILE}]
    policies.write_text(json.dumps(good), encoding="utf-8")
    _ok(runner.invoke(cli, ["policy", "save", str(policies), "--home", str(home)]))
    for args in (["policy", "show"], ["policy", "show", "--json"], ["policy", "history"]):
        shown = _ok(runner.invoke(cli, [*args, "--home", str(home)]))
        _assert_terminal_safe(shown.stdout + shown.stderr)


def test_audit_show_and_tail_escape_stored_text(runner: CliRunner, home: Path) -> None:
    with AuditLog.open(Home(home)) as log:
        log.append({"who": HOSTILE, HOSTILE: 1}, recorded_at=T0)
    for args in (["audit", "show", "5"], ["audit", "tail"], ["audit", "tail", "--json"]):
        shown = _ok(runner.invoke(cli, [*args, "--home", str(home)]))
        _assert_terminal_safe(shown.stdout + shown.stderr)
    row = runner.invoke(cli, ["audit", "tail", "-n", "1", "--home", str(home)]).stdout
    assert row.count("\n") == 2  # the header and one line: a payload never forges a line


def test_a_damaged_stored_timestamp_is_escaped_too(runner: CliRunner, home: Path) -> None:
    conn = apsw.Connection(str(home / "rensei.db"))
    with conn:
        conn.execute("UPDATE audit_records SET recorded_at = ? WHERE seq = 1", (HOSTILE,))
    conn.close()
    for args in (["audit", "show", "1"], ["audit", "tail"], ["audit", "verify"]):
        shown = runner.invoke(cli, [*args, "--home", str(home)])
        assert "Traceback" not in shown.output
        _assert_terminal_safe(shown.stdout + shown.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ["explain", '{"\\u001b]0;owned\\u0007": 1}'],
        ["explain", '{"repo": 5, "principal_id": "\\r\\u009b"}'],
        ["audit", "show", HOSTILE],
        ["policy", HOSTILE],
        [HOSTILE],
        ["--" + HOSTILE],
        ["explain", str(Path("/nonexistent") / HOSTILE)],
    ],
    ids=[
        "field-name",
        "value",
        "bad-seq",
        "unknown-command",
        "root-command",
        "root-option",
        "path",
    ],
)
def test_error_messages_that_echo_input_are_escaped(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(cli, args)
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    _assert_terminal_safe(result.stderr)
    assert result.stderr.count("Error:") == 1


@pytest.mark.parametrize(
    ("typed", "suggested"), [("quickstrat", "quickstart"), ("polcy", "policy"), ("shdow", "shadow")]
)
def test_a_mistyped_command_suggests_the_closest(typed: str, suggested: str) -> None:
    result = CliRunner().invoke(cli, ["--no-plugins", typed])
    assert result.exit_code == 2
    assert f"No such command '{typed}'. Did you mean: {suggested}?" in result.stderr


def test_a_command_like_nothing_suggests_nothing() -> None:
    result = CliRunner().invoke(cli, ["--no-plugins", "zzzz"])
    assert result.exit_code == 2 and "Did you mean" not in result.stderr
