"""``rensei backup`` / ``rensei restore``: an online copy through SQLite's backup API while another
process keeps appending, verified; restore refuses a live home without --force, refuses a copy
that does not verify or match its manifest, and never leaves a half-written home."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.ops.backup import MANIFEST
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
STAMP = "2026-01-01T00:00:00.000000Z"

_WRITER = textwrap.dedent(
    """
    import sys
    from rensei_routing.store.audit import AuditLog
    from rensei_routing.store.home import Home
    with AuditLog.open(Home(sys.argv[1])) as log:
        n = 0
        while True:
            log.append({"writer": n, "pad": "x" * 200}, recorded_at="2026-01-01T00:00:01.000000Z")
            n += 1
            if n == 1:
                print("appending", flush=True)
    """
)


def _home(tmp_path: Path, runner: CliRunner, records: int = 0) -> Home:
    home = Home(tmp_path / "home")
    assert runner.invoke(cli, ["init"]).exit_code == 0
    assert runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json")]).exit_code == 0
    assert runner.invoke(cli, ["org", "load", str(EXAMPLES / "org.json")]).exit_code == 0
    assert runner.invoke(cli, ["snapshot", "compile"]).exit_code == 0
    with AuditLog.open(home) as log:
        for start in range(0, records, 5_000):
            log.append_many(
                ({"n": i, "pad": "y" * 300} for i in range(start, min(records, start + 5_000))),
                recorded_at=STAMP,
            )
        if records:
            log.checkpoint()
    return home


def _tree_digest(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _rensei(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""}
    code = "from rensei_routing.cli import cli; cli()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.slow
def test_backup_while_another_process_appends(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner, records=30_000)
    dest = tmp_path / "backup"
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(home.path)], stdout=subprocess.PIPE
    ) as writer:
        try:
            assert writer.stdout is not None and writer.stdout.readline() == b"appending\n"
            with AuditLog.open(home) as log:
                before = log.count()
            done = _rensei("--home", str(home.path), "backup", str(dest), "--json")
            with AuditLog.open(home) as log:
                after = log.count()
        finally:
            writer.kill()
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    with AuditLog.open(Home(dest)) as copy:
        result = copy.verify()
        copied = copy.count()
        copy_checkpoints = copy.checkpoints()
    assert result, result.detail
    # the manual checkpoint and the automatic ones ([audit] checkpoint_every) all came along
    assert result.checkpoints_checked == len(copy_checkpoints) >= 4
    assert before <= copied <= after and after > before  # the writer ran throughout
    assert manifest["records"] == copied and manifest["head_hash"] == result.head_hash
    assert json.loads((dest / MANIFEST).read_text())["records"] == copied
    assert manifest["snapshot"] == "local@1" and len(manifest["policy_revisions"]) == 1
    assert (dest / "keys" / "host.key").stat().st_mode & 0o777 == 0o600
    assert not (dest / "rensei.db-wal").exists()  # one self-contained file
    # and it restores as a working home
    restored = runner.invoke(cli, ["restore", str(dest), "--home", str(tmp_path / "again")])
    assert restored.exit_code == 0, restored.output
    with AuditLog.open(Home(tmp_path / "again")) as log:
        assert log.count() == copied and log.verify()


def test_backup_refuses_an_existing_destination(tmp_path: Path, runner: CliRunner) -> None:
    _home(tmp_path, runner)
    (tmp_path / "taken").mkdir()
    done = runner.invoke(cli, ["backup", str(tmp_path / "taken")])
    assert done.exit_code == 1 and "it exists" in done.stderr
    assert list((tmp_path / "taken").iterdir()) == []


def test_restore_refuses_a_live_home_without_force(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner, records=10)
    assert runner.invoke(cli, ["backup", str(tmp_path / "b")]).exit_code == 0
    with AuditLog.open(home) as log:
        log.append({"after": "backup"}, recorded_at=STAMP)
    before = _tree_digest(home.path)
    done = runner.invoke(cli, ["restore", str(tmp_path / "b")])
    assert done.exit_code == 1
    assert "live rensei home" in done.stderr and "--force" in done.stderr
    assert _tree_digest(home.path) == before
    forced = runner.invoke(cli, ["restore", str(tmp_path / "b"), "--force"])
    assert forced.exit_code == 0, forced.output
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("home.replaced-")]
    assert len(aside) == 1 and _tree_digest(aside[0]) == before
    with AuditLog.open(home) as log:
        assert log.count() == 11 and log.verify()  # the policy save's record, then 10
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


@pytest.mark.parametrize("damage", ["payload", "manifest"], ids=["tampered-record", "manifest"])
def test_restore_refuses_a_copy_that_does_not_verify(
    tmp_path: Path, runner: CliRunner, damage: str
) -> None:
    _home(tmp_path, runner, records=10)
    backup = tmp_path / "b"
    assert runner.invoke(cli, ["backup", str(backup)]).exit_code == 0
    if damage == "payload":
        conn = apsw.Connection(str(backup / "rensei.db"))
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 4", (b'{"n":999}',))
        conn.close()
        expected = "does not match its manifest: rensei.db is sha256:"
    else:
        doc = json.loads((backup / MANIFEST).read_text())
        doc["records"] = 9
        (backup / MANIFEST).write_text(json.dumps(doc))
        expected = "manifest signature does not verify"
    target = tmp_path / "restored"
    done = runner.invoke(cli, ["restore", str(backup), "--home", str(target)])
    assert done.exit_code == 1
    assert expected in done.stderr and "Traceback" not in done.output
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner)
    done = runner.invoke(cli, ["restore", str(home.path), "--home", str(tmp_path / "x")])
    assert done.exit_code == 1 and "is not a rensei backup" in done.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("inside", ["keys/bk", "host/bk", "bk"])
def test_backup_inside_the_home_is_one_line(tmp_path: Path, runner: CliRunner, inside: str) -> None:
    home = _home(tmp_path, runner, records=3)
    (home.path / "host").mkdir(exist_ok=True)
    Home(home.path).info()  # a reader's -wal/-shm, as the backup's own read leaves them
    before = _tree_digest(home.path)
    names = sorted(p.name for p in home.path.rglob("*"))
    done = runner.invoke(cli, ["backup", str(home.path / inside)])
    assert done.exit_code == 1, done.output
    assert "inside the home" in done.stderr and done.stderr.count("\n") == 1
    assert "Traceback" not in done.output
    assert _tree_digest(home.path) == before
    assert sorted(p.name for p in home.path.rglob("*")) == names  # no staging left behind


def test_restore_inside_the_backup_is_one_line(tmp_path: Path, runner: CliRunner) -> None:
    _home(tmp_path, runner, records=3)
    backup = tmp_path / "b"
    assert runner.invoke(cli, ["backup", str(backup)]).exit_code == 0
    before = _tree_digest(backup)
    done = runner.invoke(cli, ["restore", str(backup), "--home", str(backup / "keys" / "x")])
    assert done.exit_code == 1, done.output
    assert "inside the backup" in done.stderr and done.stderr.count("\n") == 1
    assert _tree_digest(backup) == before
    assert not [p for p in backup.rglob("*") if ".partial-" in p.name]
