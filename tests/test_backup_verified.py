"""``rensei restore`` verifies everything it restores (issue 19 #15): the manifest is signed with
the home's host key and names the digest of the database file and of every other file (keys,
``host/trusted/``, ``host/config.json``, ``config.toml``) with its mode; ``restore --checkpoint
FILE`` holds the chain to a checkpoint kept off the host. Every attack is refused with one line,
and nothing is restored or replaced."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.ops.backup import MANIFEST, BackupManifest
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
STAMP = "2026-01-01T00:00:00.000000Z"


def _tree(path: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(path)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def backup(tmp_path: Path, runner: CliRunner) -> Path:
    """A backup of a home with 20 records, a checkpoint at 10 kept off the host (``cp10``), a
    stored one at 20, a snapshot, the host cache with a trusted key, and config.toml."""
    home = Home(tmp_path / "home")
    for args in (
        ["init"],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["snapshot", "compile"],
        ["snapshot", "export", str(tmp_path / "snap.json")],
        ["host", "trust", str(home.public_key_path)],
        ["host", "sync", "--from", str(tmp_path / "snap.json")],
    ):
        done = runner.invoke(cli, args)
        assert done.exit_code == 0, (args, done.output)
    home.config_path.write_text("[store]\nbusy_timeout = 30\n")
    with AuditLog.open(home) as log:
        log.append_many(({"n": i} for i in range(10)), recorded_at=STAMP)
    assert runner.invoke(cli, ["audit", "checkpoint", "-o", str(tmp_path / "cp10")]).exit_code == 0
    with AuditLog.open(home) as log:
        log.append_many(({"n": i} for i in range(10, 20)), recorded_at=STAMP)
        log.checkpoint()
    dest = tmp_path / "b"
    done = runner.invoke(cli, ["backup", str(dest)])
    assert done.exit_code == 0, done.output
    assert (dest / "host" / "config.json").is_file() and (dest / "host" / "trusted").is_dir()
    return dest


def _restore(runner: CliRunner, backup: Path, target: Path, *extra: str) -> str:
    """Restore that must be refused: the one-line reason."""
    done = runner.invoke(cli, ["restore", str(backup), "--home", str(target), *extra])
    assert done.exit_code == 1, done.output
    assert "Traceback" not in done.output and done.stderr.count("\n") == 1, done.stderr
    assert not target.exists()
    assert not [p for p in target.parent.iterdir() if ".partial-" in p.name]
    return done.stderr


def _resign(backup: Path, edit: Callable[[dict[str, object]], None]) -> None:
    """Rewrite the manifest with ``edit`` and sign it again with the backup's own key (what a
    holder of the backup, who holds its private key, can do)."""
    doc = json.loads((backup / MANIFEST).read_text())
    edit(doc)
    manifest = BackupManifest.from_dict(doc)
    key = signing.load_private_key(backup / "keys" / "host.key")
    doc["signature"] = "ed25519:" + base64.b64encode(key.sign(manifest.signed_bytes())).decode()
    (backup / MANIFEST).write_text(json.dumps(doc))


def test_a_good_backup_restores_verified(backup: Path, tmp_path: Path, runner: CliRunner) -> None:
    target = tmp_path / "restored"
    done = runner.invoke(
        cli, ["restore", str(backup), "--home", str(target), "--checkpoint", str(tmp_path / "cp10")]
    )
    assert done.exit_code == 0, done.output
    assert "verified: 21 audit records" in done.stderr  # 20 and the policy save's record
    assert _tree(target / "host") == _tree(backup / "host")
    assert (target / "config.toml").read_text() == (backup / "config.toml").read_text()


@pytest.mark.parametrize(
    ("attack", "expected"),
    [
        ("plant-trusted-key", "holds host/trusted/"),
        ("rewrite-host-config", "host/config.json differs"),
        ("rewrite-config-toml", "config.toml differs"),
        ("add-config-toml-elsewhere", "holds host/config.toml"),
        ("drop-serve-token", "lacks keys/serve.token"),
        ("private-key-mode", "keys/host.key differs"),
    ],
)
def test_every_file_restored_is_covered(
    backup: Path, tmp_path: Path, runner: CliRunner, attack: str, expected: str
) -> None:
    if attack == "plant-trusted-key":
        evil = signing.generate().public_key
        signing.save_public_key(evil, backup / "host" / "trusted" / f"{evil.key_id}.pub")
    elif attack == "rewrite-host-config":
        path = backup / "host" / "config.json"
        doc = json.loads(path.read_text())
        doc["endpoint"] = "http://attacker.example:8080"
        path.write_text(json.dumps(doc))
    elif attack == "rewrite-config-toml":
        (backup / "config.toml").write_text("[store]\nbusy_timeout = 0\n")
    elif attack == "add-config-toml-elsewhere":
        (backup / "host" / "config.toml").write_text("")
    elif attack == "drop-serve-token":
        token = backup / "keys" / "serve.token"
        if not token.exists():
            pytest.skip("no serve token in this backup")
        token.unlink()
    else:
        os.chmod(backup / "keys" / "host.key", 0o644)
    before = _tree(backup)
    assert expected in _restore(runner, backup, tmp_path / "restored")
    assert _tree(backup) == before


def _cut_tail(backup: Path) -> None:
    """Delete the last 10 records and every stored checkpoint: the chain that is left verifies."""
    conn = apsw.Connection(str(backup / "rensei.db"))
    conn.execute("DELETE FROM audit_records WHERE seq >= 10; DELETE FROM audit_checkpoints")
    conn.close()


def _describe_cut(doc: dict[str, object], backup: Path) -> None:
    """The manifest fields a careful attacker rewrites to match the cut database."""
    with AuditLog.open(Home(backup)) as log:
        result = log.verify()
    doc.update(records=result.records_checked, head_hash=result.head_hash, checkpoints=0)
    doc["database"] = "sha256:" + hashlib.sha256((backup / "rensei.db").read_bytes()).hexdigest()


def test_a_cut_backup_with_a_rewritten_manifest_is_refused(
    backup: Path, tmp_path: Path, runner: CliRunner
) -> None:
    _cut_tail(backup)
    doc = json.loads((backup / MANIFEST).read_text())
    _describe_cut(doc, backup)  # rewritten, not signed again (the attack of the issue)
    (backup / MANIFEST).write_text(json.dumps(doc))
    assert "manifest signature does not verify" in _restore(runner, backup, tmp_path / "r")


def test_a_cut_backup_signed_again_is_caught_by_an_off_host_checkpoint(
    backup: Path, tmp_path: Path, runner: CliRunner
) -> None:
    _cut_tail(backup)
    # the holder of the backup holds its key: cut it to 5 records, below the checkpoint at 10
    conn = apsw.Connection(str(backup / "rensei.db"))
    conn.execute("DELETE FROM audit_records WHERE seq >= 5")
    conn.close()
    _resign(backup, lambda doc: _describe_cut(doc, backup))
    err = _restore(runner, backup, tmp_path / "r", "--checkpoint", str(tmp_path / "cp10"))
    assert "truncated-below-checkpoint" in err, err


def test_a_swapped_host_key_is_caught_by_an_off_host_checkpoint(
    backup: Path, tmp_path: Path, runner: CliRunner
) -> None:
    new = signing.generate()
    (backup / "keys" / "host.key").unlink()
    signing.save_private_key(new, backup / "keys" / "host.key")
    (backup / "keys" / "host.pub").unlink()
    signing.save_public_key(new.public_key, backup / "keys" / "host.pub")
    conn = apsw.Connection(str(backup / "rensei.db"))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'host_key_id'", (new.public_key.key_id,))
    conn.execute("DELETE FROM audit_checkpoints; DELETE FROM ruleset_snapshots")
    conn.close()

    def describe(doc: dict[str, object]) -> None:
        doc.update(key_id=new.public_key.key_id, checkpoints=0, snapshot=None)
        db = (backup / "rensei.db").read_bytes()
        doc["database"] = "sha256:" + hashlib.sha256(db).hexdigest()
        doc["files"] = [
            {"path": p, "sha256": "sha256:" + h, "mode": m & 0o7777}
            for p, (h, m) in _tree(backup).items()
            if p not in (MANIFEST, "rensei.db")
        ]

    _resign(backup, describe)
    err = _restore(runner, backup, tmp_path / "r", "--checkpoint", str(tmp_path / "cp10"))
    assert "checkpoint-signature-invalid" in err, err


def test_an_unsigned_or_old_manifest_is_refused(
    backup: Path, tmp_path: Path, runner: CliRunner
) -> None:
    doc = json.loads((backup / MANIFEST).read_text())
    del doc["signature"]
    (backup / MANIFEST).write_text(json.dumps(doc))
    assert "is not signed" in _restore(runner, backup, tmp_path / "r")
    doc["format"] = 1
    (backup / MANIFEST).write_text(json.dumps(doc))
    assert "format 1 (unsigned" in _restore(runner, backup, tmp_path / "r")


def test_a_refused_restore_leaves_the_live_home_as_it_was(
    backup: Path, tmp_path: Path, runner: CliRunner
) -> None:
    (backup / "config.toml").write_text("[store]\nbusy_timeout = 0\n")
    home = tmp_path / "home"
    Home(home).info()
    before = _tree(home)
    done = runner.invoke(cli, ["restore", str(backup), "--force"])
    assert done.exit_code == 1 and "config.toml differs" in done.stderr
    assert _tree(home) == before
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name or ".partial-" in p.name]
