"""``host claim --receipt FILE`` and the files a receipt travels in (issue 29: M1, L3, new user
9). The receipt's file is checked and made ready before the claim is decided: a path inside the
home (its database, a key, the host cache, anything there) is refused, and a place that cannot
be written (a read-only mount, a directory root may not write, a full disk) refuses the claim;
either way no claim is recorded, no receipt remembered and nothing in the home changes. The
claim's ``--json`` output carries the receipt, and ``host receipt verify`` and ``host session
start`` take it as they take the receipt file.

Real processes over a real home (SQLite, Ed25519), real mounts where the machine allows them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

from .conftest import read_only_view

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
CLAIM = ["host", "claim", "--pool", "local-a", "--project", "acme-web"]


def _ok(*args: str) -> None:
    done = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert done.exit_code == 0, (args, done.output)


def rensei(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", "--no-plugins", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A control home's snapshot synced into a host home that holds one claim's record."""
    root = tmp_path_factory.mktemp("claims")
    ctl, host = str(root / "ctl"), str(root / "host")
    _ok("init", "--org", "acme", "--home", ctl)
    _ok("org", "load", str(EXAMPLES / "org.json"), "--home", ctl)
    _ok("policy", "save", str(EXAMPLES / "policies.json"), "--home", ctl)
    _ok("snapshot", "compile", "--home", ctl)
    _ok("snapshot", "export", str(root / "s1.json"), "--home", ctl)
    _ok("init", "--org", "acme", "--home", host)
    _ok("host", "trust", "--from-home", ctl, "--home", host)
    _ok("host", "sync", "--from", str(root / "s1.json"), "--home", host)
    _ok(*CLAIM, "--home", host)
    return root


@pytest.fixture
def home(built: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(built / "host", tmp_path / "host", symlinks=True)
    return tmp_path / "host"


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every entry under ``root``: its mode and a digest of its bytes (or its link target)."""
    out: dict[str, tuple[int, str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            what = "-> " + os.readlink(path)
        elif path.is_dir():
            what = "dir"
        else:
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(root))] = (st.st_mode, what)
    return out


def _held(home: Path) -> tuple[int, int]:
    """(audit records, remembered receipts) of the host home."""
    with closing(apsw.Connection(str(home / "rensei.db"), flags=apsw.SQLITE_OPEN_READONLY)) as c:
        records = c.execute("SELECT count(*) FROM audit_records").get
        receipts = c.execute("SELECT count(*) FROM receipts").get
    assert isinstance(records, int) and isinstance(receipts, int)
    return records, receipts


def _refused_with_nothing_changed(home: Path, target: Path, *, expect: str) -> None:
    held = _held(home)  # first: a reader of a WAL database may leave its -wal/-shm files
    before = _tree(home)
    done = rensei(*CLAIM, "--home", str(home), "--receipt", str(target))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expect in lines[0], lines
    assert _held(home) == held  # no claim recorded, no receipt remembered
    assert _tree(home) == before  # nothing in the home was written


@pytest.mark.parametrize(
    "inside",
    [
        "rensei.db",
        "rensei.db-wal",
        "keys/host.key",
        "keys/new.json",
        "config.toml",
        "host/snapshot.json",
        "host/config.json",
        "receipt.json",
    ],
)
def test_a_receipt_inside_the_home_is_refused_before_the_claim(home: Path, inside: str) -> None:
    # M1: `--receipt <home>/rensei.db` replaced the home's database with a 540-byte receipt
    _refused_with_nothing_changed(home, home / inside, expect="inside the home")


def test_a_receipt_reaching_the_home_through_a_symlink_is_refused(
    home: Path, tmp_path: Path
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(home, target_is_directory=True)
    _refused_with_nothing_changed(home, alias / "rensei.db", expect="inside the home")
    link = tmp_path / "receipt.json"
    link.symlink_to(home / "keys" / "host.key")
    _refused_with_nothing_changed(home, link, expect="inside the home")


@contextmanager
def _tmpfs(where: Path, *options: str) -> Iterator[Path]:
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", ",".join(("size=64k", *options)), "tmpfs", str(where)]
    done = subprocess.run(mount, capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_read_only_mount_refuses_the_claim(home: Path, tmp_path: Path) -> None:
    # L3: the claim was recorded as admitted and its receipt remembered, then a traceback
    folder = tmp_path / "out"
    folder.mkdir()
    with read_only_view(folder) as view:
        _refused_with_nothing_changed(home, view / "r.json", expect="Read-only file system")
    assert list(folder.iterdir()) == []


def test_a_directory_root_may_not_write_refuses_the_claim(home: Path) -> None:
    # sysfs refuses new files to everyone, root included (what chmod 0555 does not do to root)
    try:
        os.close(os.open("/sys/rensei-probe.tmp", os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass
    else:  # pragma: no cover - a machine where /sys takes files
        os.unlink("/sys/rensei-probe.tmp")
        pytest.skip("/sys takes new files here")
    _refused_with_nothing_changed(home, Path("/sys/r.json"), expect="cannot write /sys/r.json")


def test_a_full_disk_refuses_the_claim_before_recording_it(home: Path, tmp_path: Path) -> None:
    # the temp file can be created, but the receipt's bytes do not fit: still nothing recorded
    with _tmpfs(tmp_path / "full") as full:
        fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: the mount is full
            pass
        finally:
            os.close(fd)
        _refused_with_nothing_changed(home, full / "r.json", expect="the claim was not recorded")
        assert sorted(p.name for p in full.iterdir()) == ["filler"]


def test_a_writable_place_gets_the_receipt_the_home_remembers(home: Path, tmp_path: Path) -> None:
    records, receipts = _held(home)
    target = tmp_path / "r.json"
    done = rensei(*CLAIM, "--home", str(home), "--receipt", str(target))
    assert done.returncode == 0, done.stderr
    assert _held(home) == (records + 1, receipts + 1)
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    receipt = json.loads(target.read_bytes())
    with closing(apsw.Connection(str(home / "rensei.db"), flags=apsw.SQLITE_OPEN_READONLY)) as c:
        body = c.execute(
            "SELECT body FROM receipts WHERE receipt_id = ?", (receipt["receiptId"],)
        ).get
    assert body == target.read_bytes()


def test_claim_json_is_taken_by_receipt_verify_and_session_start(
    home: Path, tmp_path: Path
) -> None:
    # new user 9: `host claim --json > claim.json`, then verify and start from that file
    claimed = rensei(*CLAIM, "--home", str(home), "--json")
    assert claimed.returncode == 0, claimed.stderr
    out = tmp_path / "claim.json"
    out.write_text(claimed.stdout)
    receipt_id = json.loads(claimed.stdout)["receipt"]["receiptId"]
    verified = rensei("host", "receipt", "verify", str(out), "--home", str(home))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"valid: {receipt_id} pool local-a")
    started = rensei("host", "session", "start", "--receipt", str(out), "--home", str(home))
    assert started.returncode == 0, started.stderr
    session_id = started.stdout.strip()
    assert session_id.startswith("sess_") and f"started under {receipt_id}" in started.stderr
    listed = rensei("host", "session", "list", "--home", str(home), "--json")
    assert [(s["sessionId"], s["receiptId"]) for s in json.loads(listed.stdout)] == [
        (session_id, receipt_id)
    ]


def test_claim_json_is_checked_like_the_receipt_it_carries(home: Path, tmp_path: Path) -> None:
    claimed = json.loads(rensei(*CLAIM, "--home", str(home), "--json").stdout)
    claimed["receipt"]["pool"] = "local-b"  # edited: the signature covers the receipt's fields
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(claimed))
    before = _held(home)
    for argv in (
        ["host", "receipt", "verify", str(edited)],
        ["host", "session", "start", "--receipt", str(edited)],
    ):
        done = rensei(*argv, "--home", str(home))
        assert done.returncode == 1 and "bad-signature" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert _held(home) == before


def test_a_refused_claims_json_says_it_carries_no_receipt(home: Path, tmp_path: Path) -> None:
    refused = rensei(
        "host", "claim", "--pool", "no-such-pool", "--home", str(home), "--json"
    )  # fmt: skip
    assert refused.returncode == 1 and json.loads(refused.stdout)["admitted"] is False
    out = tmp_path / "refused.json"
    out.write_text(refused.stdout)
    before = _held(home)
    for argv in (
        ["host", "receipt", "verify", str(out)],
        ["host", "session", "start", "--receipt", str(out)],
    ):
        done = rensei(*argv, "--home", str(home))
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "refused claim" in done.stderr and "carries no receipt" in done.stderr
    assert _held(home) == before
