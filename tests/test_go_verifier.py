"""A verifier nobody here wrote: tests/go/tlogverify, built against Debian's
golang-golang-x-mod-dev (Go's own sumdb/note and sumdb/tlog), opens checkpoints our note code
signed, checks inclusion proofs and consistency proofs our tree made over the record hashes of a
real AuditLog, recomputes Go's stored hashes for the same leaves, and refuses tampered evidence.

The build runs once per session in GOPATH mode (offline: the x/mod sources are in
/usr/share/gocode). Without Go this module skips, except under CI (``CI`` set), where
``.ci/run`` installs Go and a missing toolchain is a failure."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rensei_routing import signing
from rensei_routing.core.audit.archive import export_line
from rensei_routing.core.audit.chain import AuditRecord, payload_hash, record_hash
from rensei_routing.core.audit.cosignature import VerifierKey, cosign
from rensei_routing.core.audit.merkle import MemoryTree
from rensei_routing.core.audit.note import (
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    note_key_hash,
    tree_checkpoint,
)
from rensei_routing.core.audit.tlog import AddCheckpoint, TlogProof
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.store.audit import AuditLog

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "go" / "tlogverify"
XMOD = Path("/usr/share/gocode/src/golang.org/x/mod/sumdb")
ORIGIN = checkpoint_origin("acme")
LOG_KEY = signing.PrivateKey(hashlib.sha256(b"go verifier log key").digest())
WITNESS = signing.PrivateKey(hashlib.sha256(b"go verifier witness").digest())
T0 = "2026-01-02T03:04:05Z"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


@pytest.fixture(scope="session")
def tlogverify(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not (XMOD / "note").is_dir() or not (XMOD / "tlog").is_dir():
        reason = "go or Debian's golang-golang-x-mod-dev is missing (.ci/run installs both)"
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("go")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"/usr/share/gocode:{work / 'gopath'}",
        "GOCACHE": str(work / "cache"),
        "GOFLAGS": "",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
    }
    binary = work / "tlogverify"
    subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=SOURCE, env=env, check=True, timeout=300
    )
    return binary


@dataclass
class Log:
    dir: Path
    lines: list[bytes]  # each record's export line
    tree: MemoryTree

    def write(self, name: str, text: str | bytes) -> Path:
        path = self.dir / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        return path


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Log]:
    d = tmp_path_factory.mktemp("log")
    payloads = [{"decision": i, "route": f"host-{i % 3}", "note": "é ✓"} for i in range(37)]
    with AuditLog(d / "audit.db", origin=ORIGIN, private_key=LOG_KEY) as audit:
        audit.append_many(payloads[:20], recorded_at=T0)
        for p in payloads[20:]:
            audit.append(p, recorded_at=T0)
        assert audit.verify()
        records = list(audit.records())
        chain_form = audit.checkpoint()
    tree = MemoryTree([bytes.fromhex(r.record_hash.removeprefix("sha256:")) for r in records])
    out = Log(dir=d, lines=[export_line(r) for r in records], tree=tree)
    out.write("log.vkey", VerifierKey(name=ORIGIN, public_key=LOG_KEY.public_key.raw).to_text())
    out.write("witness.vkey", _vkey(WITNESS, "witness.example"))
    out.write("chain-form.note", chain_form.to_text())
    yield out


def _vkey(key: signing.PrivateKey, name: str) -> str:
    return VerifierKey(name=name, public_key=key.public_key.raw).to_text()


def _signed(log: Log, size: int, key: signing.PrivateKey = LOG_KEY) -> Checkpoint:
    cp = tree_checkpoint(ORIGIN, size, log.tree.root(size))
    kh = note_key_hash(ORIGIN, key.public_key.raw)
    return cp.with_signature(NoteSignature(name=ORIGIN, key_hash=kh, signature=key.sign(cp.body)))


def _cosigned(cp: Checkpoint) -> Checkpoint:
    line = cosign(
        cp,
        name="witness.example",
        public_key=WITNESS.public_key.raw,
        timestamp=1767323045,
        sign=WITNESS.sign,
    )
    return cp.with_signature(line)


def _run(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def _proof(log: Log, index: int, size: int, cp: Checkpoint | None = None) -> TlogProof:
    return TlogProof(
        index=index,
        proof=tuple(log.tree.inclusion_proof(index, size)),
        checkpoint=cp or _cosigned(_signed(log, size)),
        extra=log.lines[index].rstrip(b"\n"),
    )


# -- what holds ---------------------------------------------------------------------------------


def test_go_opens_our_tree_checkpoint_and_our_chain_form_checkpoint(
    tlogverify: Path, log: Log
) -> None:
    note = log.write("tree.note", _cosigned(_signed(log, 37)).to_text())
    done = _run(tlogverify, "note", log.dir / "log.vkey", note)
    assert done.returncode == 0, done.stderr
    root = base64.b64encode(log.tree.root()).decode()
    assert done.stdout == f"origin {ORIGIN}\nsize 37\nroot {root}\n"
    # a checkpoint the store signed before the tree existed verifies with the same vkey
    done = _run(tlogverify, "note", log.dir / "log.vkey", log.dir / "chain-form.note")
    assert done.returncode == 0, done.stderr
    assert "size 37" in done.stdout


def test_go_stored_hashes_equal_ours(tlogverify: Path, log: Log) -> None:
    leaves = log.write("leaves", "".join(f"{h.hex()}\n" for h in _leaf_data(log)))
    done = _run(tlogverify, "stored", leaves)
    assert done.returncode == 0, done.stderr
    *stored, root = done.stdout.splitlines()
    assert stored == [h.hex() for h in log.tree.hashes]
    assert root == "root " + base64.b64encode(log.tree.root()).decode()


def _leaf_data(log: Log) -> list[bytes]:
    return [_record_hash(line) for line in log.lines]


def _record_hash(line: bytes) -> bytes:
    return bytes.fromhex(json.loads(line)["record_hash"].removeprefix("sha256:"))


@pytest.mark.parametrize(
    ("index", "size"), [(0, 1), (0, 37), (19, 20), (20, 37), (36, 37), (5, 32)]
)
def test_go_checks_our_inclusion_proofs_from_the_record_up(
    tlogverify: Path, log: Log, index: int, size: int
) -> None:
    path = log.write(f"p{index}-{size}.tlog-proof", _proof(log, index, size).to_text())
    done = _run(
        tlogverify, "proof", log.dir / "log.vkey", path, "-witness", log.dir / "witness.vkey"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"record {index} included in {ORIGIN} at size {size}\n"


@pytest.mark.parametrize(("old", "new"), [(1, 37), (4, 37), (20, 21), (13, 32), (37, 37), (0, 9)])
def test_go_checks_our_consistency_proofs(tlogverify: Path, log: Log, old: int, new: int) -> None:
    old_note = log.write(f"old{old}.note", _signed(log, old).to_text())
    body = AddCheckpoint(
        old_size=old,
        proof=tuple(log.tree.consistency_proof(old, new)),
        checkpoint=_signed(log, new),
    )
    path = log.write(f"c{old}-{new}.body", body.to_text())
    done = _run(tlogverify, "consistency", log.dir / "log.vkey", old_note, path)
    assert done.returncode == 0, done.stderr


# -- what Go refuses ----------------------------------------------------------------------------


def _flip_line(text: str, prefix_lines: int) -> str:
    lines = text.split("\n")
    raw = bytearray(base64.b64decode(lines[prefix_lines]))
    raw[7] ^= 0x10
    lines[prefix_lines] = base64.b64encode(bytes(raw)).decode()
    return "\n".join(lines)


def _forged_payload(log: Log, index: int) -> str:
    proof = _proof(log, index, 37)
    line = proof.extra or b""
    forged = line.replace(b'"decision":' + str(index).encode(), b'"decision":999')
    assert forged != line
    return TlogProof(
        index=index, proof=proof.proof, checkpoint=proof.checkpoint, extra=forged
    ).to_text()


def _rehashed_record(log: Log, index: int) -> str:
    """Another payload at that seq with its payload and record hashes recomputed: a record
    that hashes right on its own, so only the tree can tell it is not the logged one."""
    proof = _proof(log, index, 37)
    doc = json.loads(proof.extra or b"")
    data = canonical_bytes({**doc["payload"], "route": "forged"})
    ph = payload_hash(data)
    rh = record_hash(doc["seq"], doc["prev_hash"], doc["recorded_at"], ph)
    record = AuditRecord(
        seq=doc["seq"],
        recorded_at=doc["recorded_at"],
        prev_hash=doc["prev_hash"],
        payload_hash=ph,
        record_hash=rh,
        payload_bytes=data,
    )
    extra = export_line(record).rstrip(b"\n")
    return TlogProof(
        index=index, proof=proof.proof, checkpoint=proof.checkpoint, extra=extra
    ).to_text()


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("flipped-proof-hash", "inclusion"),
        ("other-index", "seq"),
        ("forged-payload", "payload"),
        ("forged-record-rehashed", "inclusion"),
        ("dropped-hash", "inclusion"),
        ("root-of-another-size", "signature"),
        ("signed-by-another-key", "checkpoint note"),
        ("no-cosignature", "witness"),
    ],
)
def test_go_refuses_tampered_proofs(tlogverify: Path, log: Log, case: str, expect: str) -> None:
    good = _proof(log, 11, 37)
    if case == "flipped-proof-hash":
        text = _flip_line(good.to_text(), 3)
    elif case == "other-index":
        text = good.to_text().replace("index 11\n", "index 12\n")
    elif case == "forged-payload":
        text = _forged_payload(log, 11)
    elif case == "forged-record-rehashed":
        text = _rehashed_record(log, 11)
    elif case == "dropped-hash":
        text = TlogProof(
            index=11, proof=good.proof[:-1], checkpoint=good.checkpoint, extra=good.extra
        ).to_text()
    elif case == "root-of-another-size":
        cp = good.checkpoint
        forged = Checkpoint(
            origin=cp.origin, size=36, head_hash=cp.head_hash, signatures=cp.signatures
        )
        text = TlogProof(index=11, proof=good.proof, checkpoint=forged, extra=good.extra).to_text()
    elif case == "signed-by-another-key":
        cp = _cosigned(_signed(log, 37, key=WITNESS))
        text = _proof(log, 11, 37, cp).to_text()
    else:
        text = _proof(log, 11, 37, _signed(log, 37)).to_text()
    path = log.write(f"bad-{case}.tlog-proof", text)
    # the untampered file passes the same command
    ok = log.write("good.tlog-proof", good.to_text())
    args = ["-witness", log.dir / "witness.vkey"]
    assert _run(tlogverify, "proof", log.dir / "log.vkey", ok, *args).returncode == 0
    done = _run(tlogverify, "proof", log.dir / "log.vkey", path, *args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert expect in done.stderr


def test_go_refuses_a_fork_and_a_tampered_consistency_proof(tlogverify: Path, log: Log) -> None:
    fork = MemoryTree([_record_hash(line) for line in log.lines[:20]])
    for i in range(20, 37):
        fork.append(hashlib.sha256(f"rewritten {i}".encode()).digest())
    forked = tree_checkpoint(ORIGIN, 37, fork.root())
    kh = note_key_hash(ORIGIN, LOG_KEY.public_key.raw)
    forked = forked.with_signature(
        NoteSignature(name=ORIGIN, key_hash=kh, signature=LOG_KEY.sign(forked.body))
    )
    old_note = log.write("old25.note", _signed(log, 25).to_text())
    body = AddCheckpoint(old_size=25, proof=tuple(fork.consistency_proof(25)), checkpoint=forked)
    done = _run(
        tlogverify,
        "consistency",
        log.dir / "log.vkey",
        old_note,
        log.write("fork.body", body.to_text()),
    )
    assert done.returncode == 1 and "consistency" in done.stderr, done.stderr
    good = AddCheckpoint(
        old_size=25, proof=tuple(log.tree.consistency_proof(25)), checkpoint=_signed(log, 37)
    ).to_text()
    path = log.write("flipped.body", _flip_line(good, 2))
    done = _run(tlogverify, "consistency", log.dir / "log.vkey", old_note, path)
    assert done.returncode == 1 and "consistency" in done.stderr, done.stderr
