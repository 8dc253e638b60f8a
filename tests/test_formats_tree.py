"""The tree formats' examples in docs/formats.md verify with the project's own readers: the
verifier keys parse, the checkpoints verify under them, the cosignature line counts toward a
quorum, the tlog-proof leads from its record to the root, and the add-checkpoint body proves
size 3 a prefix of size 5. (tests/test_go_verifier.py runs Go's verifier on the same text.)"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from rensei_routing import signing
from rensei_routing.core.audit.archive import rows_from_lines
from rensei_routing.core.audit.chain import AuditRecord, verify_chain
from rensei_routing.core.audit.cosignature import WitnessPolicy, check_checkpoint, parse_vkey
from rensei_routing.core.audit.note import parse_checkpoint, parse_signature_lines
from rensei_routing.core.audit.tlog import (
    check_consistent,
    parse_add_checkpoint,
    parse_tlog_proof,
    verify_tlog_proof,
)
from rensei_routing.errors import CheckpointRejectedError, ProofError

FORMATS = Path(__file__).resolve().parent.parent / "docs" / "formats.md"
_EXAMPLE = re.compile(r"<!-- example: ([a-z0-9-]+) -->\n```[a-z]*\n(.*?)\n```", re.S)


def examples() -> dict[str, str]:
    """Every marked example of docs/formats.md, by name, each ending in a newline."""
    return {m[1]: m[2] + "\n" for m in _EXAMPLE.finditer(FORMATS.read_text(encoding="utf-8"))}


EX = examples()
LOG = parse_vkey(EX["tree-log-vkey"])
WITNESS = parse_vkey(EX["tree-witness-vkey"])


def test_the_vkeys_are_the_documented_seeds() -> None:
    for vkey, seed in [
        (LOG, b"rensei-routing documentation tree log key"),
        (WITNESS, b"rensei-routing documentation witness key"),
    ]:
        key = signing.PrivateKey(hashlib.sha256(seed).digest())
        assert vkey.public_key == key.public_key.raw
        assert vkey.to_text() + "\n" == EX["tree-log-vkey" if vkey is LOG else "tree-witness-vkey"]


def test_checkpoint_and_cosignature_examples_verify() -> None:
    cp = parse_checkpoint(EX["tree-checkpoint"])
    assert check_checkpoint(cp, WitnessPolicy(log=LOG), signing.check_raw).checkpoint == cp
    cosigned = cp.with_signature(parse_signature_lines(EX["cosignature"])[0])
    policy = WitnessPolicy(log=LOG, witnesses=(WITNESS,))
    result = check_checkpoint(cosigned, policy, signing.check_raw)
    assert result.cosigned == (("witness.example/w1", 1767225600),)
    with pytest.raises(CheckpointRejectedError) as e:
        check_checkpoint(cp, policy, signing.check_raw)
    assert e.value.verdict == "quorum-not-met"


def test_tlog_proof_example_leads_from_its_record_to_the_signed_root() -> None:
    proof = parse_tlog_proof(EX["tlog-proof"])
    assert proof.to_text() == EX["tlog-proof"]
    rows = list(rows_from_lines([(proof.extra or b"").decode() + "\n"]))
    record = AuditRecord.from_row(rows[0])
    assert record.seq == proof.index == 2
    # the record's own hashes hold (verified as a one-record chain from its prev_hash)
    assert verify_chain(rows, start_seq=2, start_hash=record.prev_hash)
    leaf = bytes.fromhex(record.record_hash.removeprefix("sha256:"))
    policy = WitnessPolicy(log=LOG, witnesses=(WITNESS,))
    verify_tlog_proof(proof, leaf, policy, signing.check_raw)
    with pytest.raises(ProofError):
        verify_tlog_proof(proof, bytes(32), policy, signing.check_raw)


def test_add_checkpoint_example_proves_3_a_prefix_of_5() -> None:
    body = parse_add_checkpoint(EX["add-checkpoint"])
    assert body.to_text() == EX["add-checkpoint"]
    old = parse_checkpoint(EX["tree-checkpoint-3"])
    for cp in (old, body.checkpoint):
        check_checkpoint(cp, WitnessPolicy(log=LOG), signing.check_raw)
    assert body.old_size == old.size == 3
    check_consistent(old, body.checkpoint, body.proof)
