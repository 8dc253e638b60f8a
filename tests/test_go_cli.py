"""Go checks what our CLI writes: ``rensei audit prove`` and ``rensei audit consistency`` run for
real in a home (records appended by ``rensei explain --record``, checkpoints by ``rensei audit
checkpoint``, a cosignature by another home's ``rensei witness cosign``), and the Go program of
tests/go/tlogverify (Go's own sumdb/note and sumdb/tlog, no code of ours) accepts them and
refuses a tampered copy. The keys Go is given are what ``rensei keys show --vkey`` and
``--witness-vkey`` print."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.audit.note import parse_checkpoint
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .test_go_verifier import _flip_line, tlogverify

__all__ = ["tlogverify"]

CONTEXT = '{"repo":"github.com/a/b","role":"implementer"}'


def _ok(runner: CliRunner, *args: str) -> str:
    r = runner.invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout


def _go(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


class Homes:
    """A log home with ``n`` records and a witness home, and their vkeys as files."""

    def __init__(self, tmp: Path, runner: CliRunner) -> None:
        self.tmp, self.runner = tmp, runner
        self.log, self.wit = tmp / "log", tmp / "wit"
        _ok(runner, "--home", str(self.log), "init", "--org", "acme")
        _ok(runner, "--home", str(self.wit), "init", "--org", "wit")
        self.append(6)
        self.vkey = tmp / "log.vkey"
        self.vkey.write_text(_ok(runner, "--home", str(self.log), "keys", "show", "--vkey"))
        self.wkey = tmp / "wit.vkey"
        self.wkey.write_text(_ok(runner, "--home", str(self.wit), "keys", "show", "--witness-vkey"))

    def append(self, n: int) -> None:
        for _ in range(n):
            _ok(self.runner, "--home", str(self.log), "explain", CONTEXT, "--record")

    def cli(self, *args: str) -> str:
        return _ok(self.runner, "--home", str(self.log), *args)

    def checkpoint(self, name: str) -> Path:
        out = self.tmp / name
        self.cli("audit", "checkpoint", "-o", str(out))
        return out


@pytest.fixture
def homes(tmp_path: Path, runner: CliRunner) -> Homes:
    return Homes(tmp_path, runner)


def test_go_opens_our_checkpoint_notes_with_the_vkey_keys_show_prints(
    tlogverify: Path, homes: Homes, runner: CliRunner
) -> None:
    cp_file = homes.checkpoint("cp6")
    done = _go(tlogverify, "note", homes.vkey, cp_file)
    assert done.returncode == 0, done.stderr
    cp = parse_checkpoint(cp_file.read_bytes())
    with AuditLog.open(Home(homes.log)) as log:
        root = log.tree_root(cp.size)
    origin = "rensei-routing/acme/audit"
    assert done.stdout == f"origin {origin}\nsize 6\nroot {base64.b64encode(root).decode()}\n"
    other = homes.tmp / "other.vkey"
    other.write_text(_ok(runner, "--home", str(homes.wit), "keys", "show", "--vkey"))
    assert _go(tlogverify, "note", other, cp_file).returncode == 1


def test_go_checks_a_proof_audit_prove_wrote_and_refuses_a_tampered_copy(
    tlogverify: Path, homes: Homes, runner: CliRunner
) -> None:
    cp_file = homes.checkpoint("cp6")
    cos = homes.tmp / "cos"
    cos.write_text(
        _ok(
            runner,
            *("--home", str(homes.wit), "witness", "cosign", str(cp_file)),
            *("--trust", homes.vkey.read_text().strip()),
        )
    )
    homes.cli("audit", "checkpoint", "--add-cosignature", str(cos), "--witness", str(homes.wkey))
    for seq in (0, 3, 5):
        proof = homes.tmp / f"p{seq}"
        homes.cli("audit", "prove", str(seq), "-o", str(proof))
        done = _go(tlogverify, "proof", homes.vkey, proof, "-witness", homes.wkey)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"record {seq} included in rensei-routing/acme/audit at size 6\n"
    text = (homes.tmp / "p3").read_text()
    tampered = homes.tmp / "tampered"
    tampered.write_text(_flip_line(text, 3))  # the first hash of the inclusion path
    assert _go(tlogverify, "proof", homes.vkey, tampered, "-witness", homes.wkey).returncode == 1
    tampered.write_text(text.replace("index 3\n", "index 2\n"))
    assert _go(tlogverify, "proof", homes.vkey, tampered).returncode == 1
    # The witness's cosignature is what Go checks for -witness: a copy without it fails.
    tampered.write_text(text.replace(cos.read_text(), ""))
    assert _go(tlogverify, "proof", homes.vkey, tampered).returncode == 0
    assert _go(tlogverify, "proof", homes.vkey, tampered, "-witness", homes.wkey).returncode == 1


def test_go_checks_a_consistency_proof_audit_consistency_wrote_and_refuses_a_tampered_copy(
    tlogverify: Path, homes: Homes
) -> None:
    old = homes.checkpoint("cp6")
    homes.append(5)
    new = homes.checkpoint("cp11")
    body = homes.tmp / "c6-11"
    homes.cli("audit", "consistency", str(old), str(new), "-o", str(body))
    done = _go(tlogverify, "consistency", homes.vkey, old, body)
    assert done.returncode == 0, done.stderr
    by_size = homes.tmp / "c6-11-by-size"
    homes.cli("audit", "consistency", "6", "11", "-o", str(by_size))
    assert _go(tlogverify, "consistency", homes.vkey, old, by_size).returncode == 0
    tampered = homes.tmp / "tampered"
    tampered.write_text(_flip_line(body.read_text(), 1))
    assert _go(tlogverify, "consistency", homes.vkey, old, tampered).returncode == 1
    tampered.write_text(body.read_text().replace("old 6\n", "old 5\n", 1))
    assert _go(tlogverify, "consistency", homes.vkey, old, tampered).returncode == 1
