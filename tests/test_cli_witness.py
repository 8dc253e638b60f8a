"""``rensei witness cosign``: a home witnessing another log through files. Checkpoints are signed
with the log home's real key over real tree roots (a ``MemoryTree`` of record-hash leaves), the
consistency proofs are the tree's; the witness's view is read back from its SQLite database after
every request, and every refusal must leave it byte for byte as it was."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.audit.cosignature import parse_vkey
from rensei_routing.core.audit.merkle import MemoryTree
from rensei_routing.core.audit.note import (
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    note_key_hash,
    parse_checkpoint,
)
from rensei_routing.core.audit.tlog import AddCheckpoint
from rensei_routing.evidence.policy import check_log_signature, load_key, valid_cosigners
from rensei_routing.store.home import Home
from rensei_routing.store.witness import StoredView, advance, read_view

ORIGIN = checkpoint_origin("acme")


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


class Log:
    """A log home's key and a tree of leaves; checkpoints and proofs of it as files."""

    def __init__(self, tmp: Path, runner: CliRunner, org: str = "acme") -> None:
        self.home = tmp / f"log-{org}"
        _ok(runner, "--home", str(self.home), "init", "--org", org)
        self.key = Home(self.home).private_key()
        self.origin = checkpoint_origin(org)
        self.tree = MemoryTree([hashlib.sha256(b"record %d" % i).digest() for i in range(200)])
        self.dir = tmp
        self.vkey = _ok(runner, "--home", str(self.home), "keys", "show", "--vkey").strip()

    def checkpoint(
        self,
        size: int,
        *,
        root: bytes | None = None,
        origin: str | None = None,
        key: signing.PrivateKey | None = None,
    ) -> Checkpoint:
        origin = origin or self.origin
        key = key or self.key
        root = self.tree.root(size) if root is None else root
        cp = Checkpoint(origin=origin, size=size, head_hash="sha256:" + root.hex())
        sig = key.sign(cp.body)
        line = NoteSignature(
            name=origin, key_hash=note_key_hash(origin, key.public_key.raw), signature=sig
        )
        return cp.with_signature(line)

    def write(self, name: str, text: str) -> str:
        path = self.dir / name
        path.write_text(text)
        return str(path)

    def cp_file(self, size: int, **kw: object) -> str:
        return self.write(f"cp{size}-{len(kw)}.note", self.checkpoint(size, **kw).to_text())  # type: ignore[arg-type]

    def proof_file(
        self, old: int, new: int, *, proof: list[bytes] | None = None, cp: Checkpoint | None = None
    ) -> str:
        hashes = self.tree.consistency_proof(old, new) if proof is None else proof
        body = AddCheckpoint(
            old_size=old, proof=tuple(hashes), checkpoint=cp or self.checkpoint(new)
        )
        return self.write(f"proof{old}-{new}.txt", body.to_text())


@pytest.fixture
def log(tmp_path: Path, runner: CliRunner) -> Log:
    return Log(tmp_path, runner)


@pytest.fixture
def witness(tmp_path: Path, runner: CliRunner) -> Path:
    home = tmp_path / "witness"
    _ok(runner, "--home", str(home), "init", "--org", "wit")
    return home


def _views(home: Path) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(home / "rensei.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute("SELECT * FROM witness_views ORDER BY origin"))
    finally:
        conn.close()


def _cosign(runner: CliRunner, witness: Path, cp: str, trust: str, proof: str | None = None):
    args = ["--home", str(witness), "witness", "cosign", cp, "--trust", trust]
    if proof is not None:
        args += ["--proof", proof]
    return runner.invoke(cli, args)


def _verified_by_witness(runner: CliRunner, witness: Path, cp: Checkpoint, line: str) -> bool:
    vkey = _ok(runner, "--home", str(witness), "keys", "show", "--witness-vkey").strip()
    key = load_key(vkey, witness=True)
    signed = parse_checkpoint(cp.to_text() + line)
    return valid_cosigners(signed, [key]) == (0,)


def test_first_cosign_then_the_same_again_then_a_proven_advance(
    log: Log, witness: Path, runner: CliRunner
) -> None:
    first = _cosign(runner, witness, log.cp_file(5), log.vkey)
    assert first.exit_code == 0, first.output
    assert (
        first.stdout.startswith("— rensei-routing/wit/witness ") and first.stdout.count("\n") == 1
    )
    assert _verified_by_witness(runner, witness, log.checkpoint(5), first.stdout)
    (row,) = _views(witness)
    assert row[:3] == (ORIGIN, 5, log.tree.root(5)) and row[3] == log.vkey
    again = _cosign(runner, witness, log.cp_file(5), str(log.home / "keys" / "host.pub"))
    assert again.exit_code == 0, again.output
    assert "cosigned again" in again.stderr
    assert _views(witness)[0][:3] == row[:3]
    moved = _cosign(runner, witness, log.cp_file(17), log.vkey, log.proof_file(5, 17))
    assert moved.exit_code == 0, moved.output
    assert _verified_by_witness(runner, witness, log.checkpoint(17), moved.stdout)
    assert _views(witness)[0][:3] == (ORIGIN, 17, log.tree.root(17))
    # A cosignature is not transferable to another checkpoint.
    assert not _verified_by_witness(runner, witness, log.checkpoint(16), moved.stdout)


def test_a_view_of_size_zero_needs_no_proof(log: Log, witness: Path, runner: CliRunner) -> None:
    assert _cosign(runner, witness, log.cp_file(0), log.vkey).exit_code == 0
    assert _cosign(runner, witness, log.cp_file(3), log.vkey).exit_code == 0
    assert _views(witness)[0][1] == 3


REFUSALS = [
    "backwards",
    "conflict",
    "proof-required",
    "old-size-mismatch",
    "inconsistent",
    "inconsistent-other-tree",
    "proof-for-other-checkpoint",
    "wrong-key",
    "other-origin",
    "other-log-key",
    "malformed-checkpoint",
    "malformed-proof",
    "malformed-key",
]


@pytest.mark.parametrize("case", REFUSALS)
def test_each_refusal_is_typed_one_line_and_writes_nothing(
    case: str, log: Log, witness: Path, runner: CliRunner, tmp_path: Path
) -> None:
    assert _cosign(runner, witness, log.cp_file(8), log.vkey).exit_code == 0
    before = _views(witness)
    other = signing.generate()
    forked = MemoryTree([hashlib.sha256(b"forked %d" % i).digest() for i in range(200)])
    trust, proof = log.vkey, None
    cp = log.cp_file(12)
    if case == "backwards":
        cp = log.cp_file(7)
    elif case == "conflict":
        cp = log.cp_file(8, root=forked.root(8))
    elif case == "old-size-mismatch":
        proof = log.proof_file(6, 12)
    elif case == "inconsistent":
        hashes = log.tree.consistency_proof(8, 12)
        hashes[0] = bytes([hashes[0][0] ^ 1]) + hashes[0][1:]
        proof = log.proof_file(8, 12, proof=hashes)
    elif case == "inconsistent-other-tree":
        cp = log.cp_file(12, root=forked.root(12))
        proof = log.proof_file(
            8, 12, proof=forked.consistency_proof(8, 12), cp=parse_checkpoint(Path(cp).read_text())
        )
    elif case == "proof-for-other-checkpoint":
        proof = log.proof_file(8, 13)
    elif case == "wrong-key":
        cp = log.cp_file(12, key=other)
    elif case == "other-origin":
        cp = log.cp_file(12, origin="rensei-routing/else/audit")
    elif case == "other-log-key":
        cp = log.cp_file(12, key=other)
        trust = log.write("other.pub", other.public_key.to_text() + "\n")
        proof = log.proof_file(8, 12, cp=parse_checkpoint(Path(cp).read_text()))
    elif case == "malformed-checkpoint":
        cp = log.write("bad.note", "not a checkpoint\n")
    elif case == "malformed-proof":
        proof = log.write("bad.proof", "old 8\n%%%\n\n" + Path(cp).read_text())
    elif case == "malformed-key":
        trust = "someone+1234+AAAA"
    result = _cosign(runner, witness, cp, trust, proof)
    expected = {
        "inconsistent-other-tree": "inconsistent",
        "malformed-checkpoint": "malformed",
        "malformed-proof": "malformed",
        "malformed-key": "malformed",
    }.get(case, case)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: {expected}: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    assert _views(witness) == before


def test_a_stale_swap_changes_nothing(log: Log, witness: Path) -> None:
    """The window compare-and-swap closes: a request checked against a view that another request
    moved meanwhile writes nothing."""
    conn = Home(witness).connect(write=True)

    def swap(held: StoredView | None, size: int, at: int) -> bool:
        with conn:
            return advance(
                conn,
                held,
                origin=ORIGIN,
                size=size,
                root=log.tree.root(size),
                log_key=log.vkey,
                note=f"n{size}",
                cosigned_at=at,
            )

    try:
        assert swap(None, 4, 1)
        seen = read_view(conn, ORIGIN)
        assert seen is not None
        assert swap(seen, 16, 2)  # another request moves the view to 16
        assert not swap(seen, 8, 3)  # the slower one, checked against size 4, would roll it back
        assert not swap(None, 2, 4)  # nor can a second "first" view replace the stored one
        now = read_view(conn, ORIGIN)
        assert now is not None and (now.size, now.note, now.advances) == (16, "n16", 1)
    finally:
        conn.close()


def test_two_concurrent_processes_never_roll_the_view_back(
    log: Log, witness: Path, runner: CliRunner
) -> None:
    """Two real processes race from one view (size 4): one to 8, one to 20, each with a proof
    from 4. Exactly one may win; the loser is refused (backwards or old-size-mismatch) and the
    view is the winner's, whichever order they ran in."""
    assert _cosign(runner, witness, log.cp_file(4), log.vkey).exit_code == 0
    for rnd in range(3):
        base = _views(witness)[0][1]
        assert isinstance(base, int)
        small, large = base + 4, base + 16
        jobs = [
            (small, log.cp_file(small), log.proof_file(base, small)),
            (large, log.cp_file(large), log.proof_file(base, large)),
        ]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rensei_routing.cli",
                    "--home",
                    str(witness),
                    "witness",
                    "cosign",
                    cp,
                    "--trust",
                    log.vkey,
                    "--proof",
                    proof,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _, cp, proof in (jobs if rnd % 2 else reversed(jobs))
        ]
        outs = [(p.wait(timeout=120), p.communicate()) for p in procs]
        sizes = [s for s, _, _ in (jobs if rnd % 2 else list(reversed(jobs)))]
        won = [s for s, (rc, _) in zip(sizes, outs, strict=True) if rc == 0]
        lost = [err for rc, (_, err) in outs if rc != 0]
        assert len(won) == 1, outs
        assert len(lost) == 1 and lost[0].split(":")[1].strip() in (
            "backwards",
            "old-size-mismatch",
        ), lost
        assert _views(witness)[0][1] == won[0]
        assert _views(witness)[0][2] == log.tree.root(won[0])


def test_keys_show_vkey_verifies_the_homes_own_checkpoints(
    log: Log, runner: CliRunner, tmp_path: Path
) -> None:
    vkey = parse_vkey(log.vkey)
    assert vkey.name == ORIGIN and vkey.public_key == log.key.public_key.raw
    assert log.vkey.split("+")[1] == note_key_hash(ORIGIN, vkey.public_key).hex()
    out = tmp_path / "real.checkpoint"
    _ok(runner, "--home", str(log.home), "audit", "checkpoint", "-o", str(out))
    check_log_signature(parse_checkpoint(out.read_bytes()), load_key(log.vkey))
    doc = _ok(runner, "--home", str(log.home), "keys", "show", "--json")
    assert log.vkey in doc
