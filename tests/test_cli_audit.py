"""``rensei init`` and ``rensei audit ...`` end to end on real home directories."""

from __future__ import annotations

import io
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import parse_checkpoint
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import Codec
from rensei_routing.store.home import Home

T0 = "2025-03-01T12:00:00.000000Z"


def _run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def _one_clean_error_line(result: Result) -> str:
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "h"
    assert _run(runner, "init", "--home", str(path), "--org", "acme").exit_code == 0
    return path


@pytest.fixture
def filled(home: Path) -> Iterator[Path]:
    with AuditLog.open(Home(home)) as log:
        log.append_many([{"n": i, "who": "ghp_" + "S3cr3t" * 6} for i in range(10)], recorded_at=T0)
    yield home


def _sql(home: Path, statement: str, args: tuple[object, ...] = ()) -> None:
    conn = apsw.Connection(str(home / "rensei.db"))
    try:
        with conn:
            conn.execute(statement, args)
    finally:
        conn.close()


def _query(home: Path, statement: str) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(home / "rensei.db"))
    try:
        return [tuple(r) for r in conn.execute(statement)]
    finally:
        conn.close()


def _checkpoint_rows(home: Path) -> list[tuple[object, ...]]:
    return _query(home, "SELECT * FROM audit_checkpoints ORDER BY id")


# -- init ---------------------------------------------------------------------------------------


def test_init_creates_a_private_key_it_never_prints(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "h"
    first = _run(runner, "init", "--home", str(path))
    assert first.exit_code == 0, first.output
    assert first.stdout == ""  # a confirmation: stderr (docs/commands.md, "Output")
    assert first.stderr.startswith("initialised: rensei home at ")
    assert str(path.resolve()) in first.stderr and "org local" in first.stderr
    key_file = path / "keys" / "host.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_text().strip().split(":", 1)[1]
    key_bytes = key_file.read_bytes()

    again = _run(runner, "init", "--home", str(path), "--json")
    assert again.exit_code == 0
    info = json.loads(again.stdout)
    assert (
        info["created"] is False and info["org"] == "local" and info["home"] == str(path.resolve())
    )
    assert key_file.read_bytes() == key_bytes  # the second run kept the key
    for result in (first, again):
        assert secret not in result.output


def test_init_uses_rensei_home_from_the_environment(runner: CliRunner, tmp_path: Path) -> None:
    result = _run(runner, "init", "--org", "acme")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "rensei.db").is_file()  # conftest points RENSEI_HOME here


def test_init_refuses_another_org_on_an_existing_home(runner: CliRunner, home: Path) -> None:
    result = _run(runner, "init", "--home", str(home), "--org", "globex")
    assert "initialised for org 'acme'" in _one_clean_error_line(result)
    assert _run(runner, "init", "--home", str(home), "--org", "acme").exit_code == 0


def test_init_refuses_a_malformed_org(runner: CliRunner, tmp_path: Path) -> None:
    result = _run(runner, "init", "--home", str(tmp_path / "h"), "--org", "Not An Org")
    assert "org" in _one_clean_error_line(result)


def test_commands_on_an_uninitialised_home_say_to_run_init(
    runner: CliRunner, tmp_path: Path
) -> None:
    for args, code in (
        (["audit", "verify"], 3),  # could not verify: not "broken"
        (["audit", "tail"], 1),
        (["audit", "checkpoint"], 1),
    ):
        result = _run(runner, *args, "--home", str(tmp_path / "nowhere"))
        assert "rensei init" in _one_clean_error_line(result)
        assert result.exit_code == code, args
        assert result.stdout == ""


# -- verify ---------------------------------------------------------------------------------------


def test_verify_intact_exits_0(runner: CliRunner, filled: Path) -> None:
    result = _run(runner, "audit", "verify", "--home", str(filled))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("intact: 10 records, head sha256:")
    as_json = _run(runner, "audit", "verify", "--home", str(filled), "--json")
    assert json.loads(as_json.stdout)["ok"] is True


def test_verify_broken_exits_1_naming_seq_and_reason(runner: CliRunner, filled: Path) -> None:
    _sql(
        filled, "UPDATE audit_records SET recorded_at = '2025-03-01T12:00:09.000000Z' WHERE seq = 6"
    )
    result = _run(runner, "audit", "verify", "--home", str(filled))
    assert result.exit_code == 1
    assert result.stdout.startswith("broken at seq 6: record-hash-mismatch")
    assert "seq 6: record-hash-mismatch" in _one_clean_error_line(result)
    as_json = _run(runner, "audit", "verify", "--home", str(filled), "--json")
    assert as_json.exit_code == 1
    verdict = json.loads(as_json.stdout)
    assert (verdict["ok"], verdict["first_broken_seq"], verdict["reason"]) == (
        False,
        6,
        "record-hash-mismatch",
    )


def test_exported_checkpoint_catches_a_truncated_tail(
    runner: CliRunner, filled: Path, tmp_path: Path
) -> None:
    note = tmp_path / "cp.txt"
    made = _run(runner, "audit", "checkpoint", "--home", str(filled), "-o", str(note))
    assert made.exit_code == 0, made.output
    assert made.stdout == ""  # stdout is data only; the confirmation is on stderr
    assert made.stderr.startswith("checkpoint of 10 records") and str(note) in made.stderr
    assert parse_checkpoint(note.read_text()).size == 10

    _sql(filled, "DELETE FROM audit_records WHERE seq >= 7")
    _sql(filled, "DELETE FROM audit_checkpoints")
    # the tree tells a careless truncation (hashes past the head); a careful one drops it too
    careless = _run(runner, "audit", "verify", "--home", str(filled))
    assert careless.exit_code == 1 and "tree-overrun" in careless.stdout
    _sql(filled, "DELETE FROM audit_tree")
    assert _run(runner, "audit", "verify", "--home", str(filled)).exit_code == 0
    result = _run(runner, "audit", "verify", "--home", str(filled), "--checkpoint", str(note))
    assert result.exit_code == 1
    assert result.stdout.startswith("broken at seq 7: truncated-below-checkpoint")


def test_checkpoint_prints_a_signed_note(runner: CliRunner, filled: Path) -> None:
    result = _run(runner, "audit", "checkpoint", "--home", str(filled))
    assert result.exit_code == 0
    cp = parse_checkpoint(result.stdout)
    assert (cp.origin, cp.size) == ("rensei-routing/acme/audit", 10)


@pytest.mark.parametrize(
    "content",
    [b"", b"rensei-routing/acme/audit\n10\nnot-a-hash\n\n", b"\xff\xfe binary"],
    ids=["empty", "bad-hash", "binary"],
)
def test_malformed_checkpoint_file_is_one_clear_line(
    runner: CliRunner, filled: Path, tmp_path: Path, content: bytes
) -> None:
    note = tmp_path / "bad.txt"
    note.write_bytes(content)
    result = _run(runner, "audit", "verify", "--home", str(filled), "--checkpoint", str(note))
    assert "bad.txt" in _one_clean_error_line(result)
    assert result.exit_code == 3  # could not verify, distinct from 1 = broken
    assert result.stdout == ""


def test_missing_checkpoint_file_is_one_clear_line(
    runner: CliRunner, filled: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "absent.txt"
    result = _run(runner, "audit", "verify", "--home", str(filled), "--checkpoint", str(missing))
    assert "absent.txt" in _one_clean_error_line(result)
    assert result.exit_code == 3 and result.stdout == ""


def test_verify_on_a_database_that_is_not_one_is_could_not_verify(
    runner: CliRunner, home: Path
) -> None:
    (home / "rensei.db").write_bytes(b"not a database at all" * 100)
    result = _run(runner, "audit", "verify", "--home", str(home))
    assert "rensei.db" in _one_clean_error_line(result)
    assert result.exit_code == 3 and result.stdout == ""


def test_verify_help_documents_every_exit_code(runner: CliRunner) -> None:
    text = _run(runner, "audit", "verify", "--help").stdout
    for line in ("0  intact", "1  broken", "2  usage error", "3  could not verify"):
        assert line in text, text


# -- checkpoint -----------------------------------------------------------------------------------


def _record_examples(runner: CliRunner, home: Path) -> None:
    examples = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
    saved = _run(runner, "policy", "save", str(examples / "policies.json"), "--home", str(home))
    assert saved.exit_code == 0, saved.output
    recorded = _run(
        runner, "explain-batch", str(examples / "contexts.jsonl"), "--record", "--home", str(home)
    )
    assert recorded.exit_code == 0, recorded.output


def test_checkpoint_refuses_a_log_broken_below_its_last_checkpoint(
    runner: CliRunner, home: Path
) -> None:
    _record_examples(runner, home)
    assert _run(runner, "audit", "checkpoint", "--home", str(home)).exit_code == 0
    stored = _checkpoint_rows(home)
    ((raw,),) = _query(home, "SELECT payload FROM audit_records WHERE seq = 1")
    conn = apsw.Connection(str(home / "rensei.db"))
    try:  # the canonical bytes, however stored (whoever edits the file can decompress)
        payload = Codec.load(conn).inflate(raw)
    finally:
        conn.close()
    assert isinstance(payload, bytes) and b'"decision_id":"sha256:' in payload
    at = payload.index(b'"decision_id":"sha256:') + len(b'"decision_id":"sha256:')
    edited = payload[:at] + (b"0" if payload[at : at + 1] != b"0" else b"1") + payload[at + 1 :]
    _sql(home, "UPDATE audit_records SET payload = ? WHERE seq = 1", (edited,))

    verified = _run(runner, "audit", "verify", "--home", str(home))
    assert verified.exit_code == 1
    assert verified.stdout.startswith("broken at seq 1: payload-hash-mismatch")
    refused = _run(runner, "audit", "checkpoint", "--home", str(home))
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "seq 1: payload-hash-mismatch" in _one_clean_error_line(refused)
    assert _checkpoint_rows(home) == stored


def test_failed_export_stores_no_checkpoint(
    runner: CliRunner, filled: Path, tmp_path: Path
) -> None:
    target = tmp_path / "nonexistent" / "dir" / "cp.txt"
    result = _run(runner, "audit", "checkpoint", "--home", str(filled), "-o", str(target))
    assert result.exit_code == 1 and result.stdout == ""
    assert str(target) in _one_clean_error_line(result)
    assert _checkpoint_rows(filled) == []
    assert _run(runner, "audit", "verify", "--home", str(filled)).exit_code == 0


# -- show and tail --------------------------------------------------------------------------------


def test_show_and_tail(runner: CliRunner, filled: Path) -> None:
    shown = _run(runner, "audit", "show", "3", "--home", str(filled), "--json")
    assert shown.exit_code == 0
    record = json.loads(shown.stdout)
    assert record["seq"] == 3 and record["payload"]["who"] == "[REDACTED:github-token]"
    text = _run(runner, "audit", "show", "3", "--home", str(filled))
    assert "seq:          3" in text.stdout and "S3cr3t" not in text.stdout

    tail = _run(runner, "audit", "tail", "-n", "3", "--home", str(filled), "--json")
    assert [r["seq"] for r in json.loads(tail.stdout)] == [7, 8, 9]
    lines = _run(runner, "audit", "tail", "--home", str(filled)).stdout.splitlines()
    assert len(lines) == 11 and lines[0].split() == [
        "seq",
        "recorded_at",
        "kind",
        "outcome",
        "policy",
        "route",
    ]
    assert lines[1].split() == ["0", "2025-03-01T12:00:00.000000Z", "record", "-", "-", "-"]


def test_show_missing_and_bad_seq(runner: CliRunner, filled: Path) -> None:
    assert "no audit record with seq 99" in _one_clean_error_line(
        _run(runner, "audit", "show", "99", "--home", str(filled))
    )
    assert _run(runner, "audit", "show", "-1", "--home", str(filled)).exit_code == 2


@pytest.mark.parametrize(
    "args",
    [["show", "99999999999999999999"], ["show", str(2**63)], ["tail", "-n", str(2**63)]],
    ids=["show-huge", "show-2**63", "tail-2**63"],
)
def test_numbers_beyond_sqlite_integers_are_usage_errors(
    runner: CliRunner, filled: Path, args: list[str]
) -> None:
    result = _run(runner, "audit", *args, "--home", str(filled))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "OverflowError" not in result.output
    assert "0<=x<=9223372036854775807" in result.stderr


def test_largest_sqlite_integer_is_accepted(runner: CliRunner, filled: Path) -> None:
    top = str(2**63 - 1)
    shown = _run(runner, "audit", "show", top, "--home", str(filled))
    assert f"no audit record with seq {top}" in _one_clean_error_line(shown)
    assert shown.exit_code == 1
    tail = _run(runner, "audit", "tail", "-n", top, "--home", str(filled))
    assert tail.exit_code == 0 and len(tail.stdout.splitlines()) == 1 + 10


def test_damaged_record_can_be_shown_and_tailed(runner: CliRunner, filled: Path) -> None:
    _sql(filled, "UPDATE audit_records SET payload = x'fffe00' WHERE seq = 2")
    verified = _run(runner, "audit", "verify", "--home", str(filled))
    assert verified.stdout.startswith("broken at seq 2: unparseable-record")
    before = _query(filled, "SELECT * FROM audit_records ORDER BY seq")

    shown = _run(runner, "audit", "show", "2", "--home", str(filled))
    assert shown.exit_code == 0, shown.output
    assert "seq:          2\n" in shown.stdout
    assert "payload:      UNPARSEABLE (not JSON: " in shown.stdout
    assert "payload_hex:  fffe00\n" in shown.stdout
    assert "payload_text: \\xff\\xfe\\x00" in shown.stdout
    assert "record(s) 2" in shown.stderr

    as_json = _run(runner, "audit", "show", "2", "--home", str(filled), "--json")
    assert as_json.exit_code == 0
    record = json.loads(as_json.stdout)
    assert (record["seq"], record["payload"], record["payload_raw_hex"]) == (2, None, "fffe00")
    assert record["payload_error"].startswith("not JSON: ")

    tail = _run(runner, "audit", "tail", "--home", str(filled))
    assert tail.exit_code == 0, tail.output
    lines = tail.stdout.splitlines()[1:]
    assert [line.split()[0] for line in lines] == [str(i) for i in range(10)]
    assert lines[2].split(None, 3)[2:] == ["UNPARSEABLE", lines[2].split(None, 3)[3]]
    assert lines[2].split(None, 3)[3].startswith("not JSON: ")
    assert lines[3].split()[2] == "record"
    tail_json = _run(runner, "audit", "tail", "--home", str(filled), "--json")
    assert tail_json.exit_code == 0
    records = json.loads(tail_json.stdout)
    assert [r["seq"] for r in records] == list(range(10))
    assert [r["seq"] for r in records if "payload_error" in r] == [2]
    assert _query(filled, "SELECT * FROM audit_records ORDER BY seq") == before  # read only


def test_private_key_never_reaches_stdout(runner: CliRunner, filled: Path) -> None:
    secret = (filled / "keys" / "host.key").read_text().strip().split(":", 1)[1]
    outputs = [
        _run(runner, *args, "--home", str(filled)).output
        for args in (
            ["init"],
            ["audit", "verify"],
            ["audit", "checkpoint"],
            ["audit", "tail"],
            ["audit", "show", "0"],
        )
    ]
    assert all(secret not in out for out in outputs)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from rensei_routing.cli._output import progress_bar

    with progress_bar(50_000) as progress:
        assert progress is None  # pytest's stderr is not a terminal
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress_bar(50_000) as progress:
        assert progress is not None
        progress(10_000)
        progress(50_000)
    assert "verifying" in terminal.getvalue()


# -- exports never land in the home -----------------------------------------------------------


def _home_files(home: Path) -> tuple[object, ...]:
    """The home's key files byte for byte, and every stored row (SQLite may fold the WAL in)."""
    keys = {p.name: p.read_bytes() for p in (home / "keys").iterdir()}
    rows = _query(home, "SELECT * FROM audit_records ORDER BY seq")
    meta = _query(home, "SELECT * FROM meta ORDER BY key")
    return keys, rows, meta, _checkpoint_rows(home)


@pytest.mark.parametrize(
    "inside",
    ["rensei.db", "rensei.db-wal", "rensei.db-shm", "keys/host.key", "keys/host.pub", "note.txt"],
)
def test_checkpoint_export_into_the_home_is_refused(
    runner: CliRunner, filled: Path, inside: str
) -> None:
    before = _home_files(filled)
    result = _run(runner, "audit", "checkpoint", "--home", str(filled), "-o", str(filled / inside))
    assert "inside the home" in _one_clean_error_line(result)
    assert result.exit_code == 1 and result.stdout == ""
    assert _home_files(filled) == before  # database, key and all: byte for byte
    assert _checkpoint_rows(filled) == []
    assert _run(runner, "audit", "verify", "--home", str(filled)).exit_code == 0
    assert _run(runner, "init", "--home", str(filled)).exit_code == 0


def test_checkpoint_export_through_a_symlink_into_the_home_is_refused(
    runner: CliRunner, filled: Path, tmp_path: Path
) -> None:
    before = _home_files(filled)
    (tmp_path / "elsewhere").symlink_to(filled / "keys", target_is_directory=True)
    (tmp_path / "db-link").symlink_to(filled / "rensei.db")
    for target in (tmp_path / "elsewhere" / "host.key", tmp_path / "db-link"):
        result = _run(runner, "audit", "checkpoint", "--home", str(filled), "-o", str(target))
        assert "inside the home" in _one_clean_error_line(result)
    assert _home_files(filled) == before and _checkpoint_rows(filled) == []


def test_checkpoint_export_refusal_is_relative_path_proof(
    runner: CliRunner, filled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(filled / "keys")
    before = _home_files(filled)
    result = _run(runner, "audit", "checkpoint", "--home", "..", "-o", "../rensei.db")
    assert "inside the home" in _one_clean_error_line(result)
    assert _home_files(filled) == before


def test_checkpoint_export_next_to_the_home_is_fine(
    runner: CliRunner, filled: Path, tmp_path: Path
) -> None:
    target = tmp_path / "h-notes" / "cp.txt"  # a sibling whose name starts like the home's
    target.parent.mkdir()
    assert (
        _run(runner, "audit", "checkpoint", "--home", str(filled), "-o", str(target)).exit_code == 0
    )
    assert parse_checkpoint(target.read_text()).size == 10
