"""``rensei audit export --since SEQ FILE.jsonl`` and ``rensei audit verify --file``: an archive
that verifies offline exactly like the database (payload hash, record hash, links, checkpoints),
continues across exports, and names the first record an edit broke."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.audit.archive import MAX_LINE_BYTES
from rensei_routing.signing import generate
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

STAMP = "2026-01-01T00:00:00.000000Z"


def _home(tmp_path: Path, runner: CliRunner, n: int) -> Home:
    assert runner.invoke(cli, ["init"]).exit_code == 0
    home = Home(tmp_path / "home")
    _append(home, 0, n)
    return home


def _append(home: Home, start: int, stop: int) -> None:
    with AuditLog.open(home) as log:
        log.append_many(
            ({"n": i, "text": "línea \u2028 ☃", "x": 1.5e300} for i in range(start, stop)),
            recorded_at=STAMP,
        )


def _verify(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    done = runner.invoke(cli, ["audit", "verify", *args])
    return done.exit_code, done.stdout, done.stderr


def test_export_verifies_offline_and_continues(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner, 5)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    done = runner.invoke(cli, ["audit", "export", str(a)])
    assert done.exit_code == 0 and done.stdout == ""
    assert "seqs 0..4" in done.stderr and "next export: --since 5" in done.stderr
    _append(home, 5, 9)
    assert runner.invoke(cli, ["audit", "export", "--since", "5", str(b)]).exit_code == 0
    lines = [json.loads(x) for x in a.read_text("utf-8").split("\n")[:-1]]
    with AuditLog.open(home) as log:
        assert [x["payload"] for x in lines] == [r.payload for r in log.records(stop=5)]
        head = log.verify().head_hash
    code, out, _ = _verify(runner, "--file", str(a), "--file", str(b), "--home", "/nonexistent")
    assert code == 0 and f"intact: 9 records, head {head}" in out
    code, out, err = _verify(runner, "--file", str(b))
    assert code == 0 and "starts at seq 5" in err
    code, out, _ = _verify(runner, "--file", str(b), "--file", str(a))  # out of order
    assert code == 1 and "seq-gap" in out


@pytest.mark.parametrize(
    ("edit", "reason", "seq"),
    [
        (
            lambda ls: ls.__setitem__(2, ls[2].replace(b'"n":2', b'"n":7')),
            "payload-hash-mismatch",
            2,
        ),
        (lambda ls: ls.pop(3), "seq-gap", 3),
        (lambda ls: ls.__setitem__(1, b"\xff\xfe not utf-8"), "unparseable-record", 1),
        (lambda ls: ls.__setitem__(2, ls[2][:-5]), "unparseable-record", 2),
        (
            lambda ls: ls.__setitem__(0, ls[0].replace(b'"seq":0', b'"seq":0,"seq":0')),
            "unparseable-record",
            0,
        ),
        (
            lambda ls: ls.__setitem__(1, ls[1].replace(b"2026-01-01", b"2026-01-02")),
            "record-hash-mismatch",
            1,
        ),
    ],
    ids=["payload", "dropped", "not-utf8", "cut", "duplicate-key", "redated"],
)
def test_an_edited_export_names_the_first_broken_record(
    tmp_path: Path, runner: CliRunner, edit: object, reason: str, seq: int
) -> None:
    _home(tmp_path, runner, 5)
    a = tmp_path / "a.jsonl"
    assert runner.invoke(cli, ["audit", "export", str(a)]).exit_code == 0
    lines = a.read_bytes().split(b"\n")[:-1]
    edit(lines)  # type: ignore[operator]
    a.write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = _verify(runner, "--file", str(a))
    assert code == 1, out
    assert f"broken at seq {seq}: {reason}" in out and "Traceback" not in err


def test_export_is_held_to_checkpoints_with_a_trusted_key(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(tmp_path, runner, 6)
    cp = tmp_path / "cp.txt"
    assert runner.invoke(cli, ["audit", "checkpoint", "-o", str(cp)]).exit_code == 0
    a = tmp_path / "a.jsonl"
    assert runner.invoke(cli, ["audit", "export", str(a)]).exit_code == 0
    key = str(home.public_key_path)
    code, out, _ = _verify(runner, "--file", str(a), "--checkpoint", str(cp), "--trust", key)
    assert code == 0 and "1 checkpoint(s) checked" in out
    other = tmp_path / "other.pub"
    other.write_text(generate().public_key.to_text() + "\n")
    code, out, _ = _verify(runner, "--file", str(a), "--checkpoint", str(cp), "--trust", str(other))
    assert code == 1 and "checkpoint-signature-invalid" in out
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(a.read_bytes().splitlines(keepends=True)[:4]))
    code, out, _ = _verify(runner, "--file", str(short), "--checkpoint", str(cp), "--trust", key)
    assert code == 1 and "truncated-below-checkpoint" in out
    code, _, err = _verify(runner, "--file", str(a), "--checkpoint", str(cp))
    assert code == 2 and "--trust" in err
    code, _, err = _verify(runner, "--file", str(tmp_path / "missing.jsonl"))
    assert code == 3 and "could not verify" in err


def test_export_refuses_a_broken_chain_and_writes_nothing(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(tmp_path, runner, 5)
    conn = apsw.Connection(str(home.db_path))
    conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 2", (b'{"n":99}',))
    conn.close()
    a = tmp_path / "a.jsonl"
    done = runner.invoke(cli, ["audit", "export", str(a)])
    assert done.exit_code == 1 and "nothing exported" in done.stderr
    assert not a.exists() and list(tmp_path.glob(".a.jsonl*")) == []


def test_since_past_the_end_and_targets_in_the_home(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner, 2)
    done = runner.invoke(cli, ["audit", "export", "--since", "3", str(tmp_path / "a.jsonl")])
    assert done.exit_code == 1 and "past the end of the log (2 records)" in done.stderr
    done = runner.invoke(cli, ["audit", "export", str(home.keys_dir / "x.jsonl")])
    assert done.exit_code == 1 and "part of the home" in done.stderr
    empty = tmp_path / "empty.jsonl"
    assert runner.invoke(cli, ["audit", "export", "--since", "2", str(empty)]).exit_code == 0
    assert empty.read_bytes() == b""


def _longest_line(path: Path) -> int:
    return max(len(line) for line in path.read_bytes().split(b"\n"))


def test_a_line_is_read_to_a_bound(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 #18: an export line is read to at most MAX_LINE_BYTES; a longer one is refused
    (exit 3, one line) without reading the rest of it."""
    _home(tmp_path, runner, 3)
    export = tmp_path / "a.jsonl"
    assert runner.invoke(cli, ["audit", "export", str(export)]).exit_code == 0
    longest = _longest_line(export)
    monkeypatch.setattr("rensei_routing.cli.audit.MAX_LINE_BYTES", longest)
    code, out, _ = _verify(runner, "--file", str(export))
    assert code == 0 and "intact: 3 records" in out  # a line of exactly the bound reads
    monkeypatch.setattr("rensei_routing.cli.audit.MAX_LINE_BYTES", longest - 1)
    code, out, err = _verify(runner, "--file", str(export))
    assert code == 3 and out == ""
    assert f"line 1 is longer than {longest - 1:,} bytes" in err and err.count("\n") == 1


def _verify_limited(path: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``rensei audit verify --file PATH`` in a process whose address space is capped at 1 GiB
    (memory that grows with the line dies there) and under a timeout."""
    limit = 1024 * 1024 * 1024
    return subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", "audit", "verify", "--file", path],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )


def test_an_over_long_line_in_a_file_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    _home(tmp_path, runner, 3)
    export = tmp_path / "a.jsonl"
    assert runner.invoke(cli, ["audit", "export", str(export)]).exit_code == 0
    with open(export, "ab") as f:  # a bounded file: one line a byte over the bound, then more
        f.write(b"x" * (MAX_LINE_BYTES + 1) + b"\n" + export.read_bytes())
    done = _verify_limited(str(export), tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert f"line 4 is longer than {MAX_LINE_BYTES:,} bytes" in done.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_refused_with_memory_bounded(tmp_path: Path) -> None:
    done = _verify_limited("/dev/zero", tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "/dev/zero: line 1 is longer than" in done.stderr
