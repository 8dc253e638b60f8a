"""The C2SP formats over the tree (core/audit/tlog.py, cosignature.py, note.py): verifier keys,
cosignature/v1, the witness policy, tlog-proof files and add-checkpoint bodies. Real Ed25519
keys through rensei_routing.signing; every format round-trips and refuses malformed text with a
typed error; every refusal names its verdict."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import signing
from rensei_routing.core.audit.cosignature import (
    VerifierKey,
    WitnessPolicy,
    check_checkpoint,
    cosign,
    cosignature_message,
    parse_vkey,
    read_cosignature,
)
from rensei_routing.core.audit.merkle import MemoryTree, leaf_hash
from rensei_routing.core.audit.note import (
    STRICT_PAYLOADS,
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    note_key_hash,
    parse_checkpoint,
    parse_signature_lines,
    tree_checkpoint,
)
from rensei_routing.core.audit.tlog import (
    AddCheckpoint,
    TlogProof,
    check_consistent,
    parse_add_checkpoint,
    parse_tlog_proof,
    verify_tlog_proof,
)
from rensei_routing.errors import (
    CheckpointFormatError,
    CheckpointRejectedError,
    EvidenceFormatError,
    InputError,
    KeyFormatError,
    ProofError,
)

ORIGIN = checkpoint_origin("acme")
LOG_KEY = signing.PrivateKey(hashlib.sha256(b"log key").digest())
W1 = signing.PrivateKey(hashlib.sha256(b"witness 1").digest())
W2 = signing.PrivateKey(hashlib.sha256(b"witness 2").digest())
LEAVES = [hashlib.sha256(f"r{i}".encode()).digest() for i in range(40)]
TREE = MemoryTree(LEAVES)


def _signed(size: int, key: signing.PrivateKey = LOG_KEY, origin: str = ORIGIN) -> Checkpoint:
    cp = tree_checkpoint(origin, size, TREE.root(size), (STRICT_PAYLOADS,))
    kh = note_key_hash(origin, key.public_key.raw)
    return cp.with_signature(NoteSignature(name=origin, key_hash=kh, signature=key.sign(cp.body)))


def _vkey(key: signing.PrivateKey, name: str) -> VerifierKey:
    return VerifierKey(name=name, public_key=key.public_key.raw)


def _cosigned(
    cp: Checkpoint, key: signing.PrivateKey, name: str, when: int = 1700000000
) -> Checkpoint:
    line = cosign(cp, name=name, public_key=key.public_key.raw, timestamp=when, sign=key.sign)
    return cp.with_signature(line)


LOG_VKEY = _vkey(LOG_KEY, ORIGIN)


# -- verifier keys ------------------------------------------------------------------------------


def test_vkey_round_trips_and_verifies_our_existing_note_signatures() -> None:
    text = LOG_VKEY.to_text()
    name, key_id, blob = text.split("+", 2)
    assert name == ORIGIN
    assert bytes.fromhex(key_id) == note_key_hash(ORIGIN, LOG_KEY.public_key.raw)
    assert base64.b64decode(blob) == b"\x01" + LOG_KEY.public_key.raw
    assert parse_vkey(text + "\n") == LOG_VKEY
    # a note signed the way the store signs checkpoints verifies under the parsed vkey
    result = check_checkpoint(_signed(7), WitnessPolicy(log=parse_vkey(text)), signing.check_raw)
    assert result.checkpoint.size == 7 and result.cosigned == ()


def _vkey_with(**change: str) -> str:
    name, key_id, blob = LOG_VKEY.to_text().split("+", 2)
    parts = {"name": name, "key_id": key_id, "blob": blob, **change}
    return f"{parts['name']}+{parts['key_id']}+{parts['blob']}"


_RAW = LOG_KEY.public_key.raw


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a+b",
        _vkey_with(name="other.example/log"),
        _vkey_with(key_id="0000zzzz"),
        _vkey_with(key_id=note_key_hash(ORIGIN, _RAW).hex().upper()),
        _vkey_with(key_id="1234567"),
        _vkey_with(blob="!!!!"),
        _vkey_with(blob=base64.b64encode(b"\x02" + _RAW).decode()),
        _vkey_with(blob=base64.b64encode(b"\x01" + _RAW[:31]).decode()),
        _vkey_with(blob=base64.b64encode(b"\x01" + _RAW).decode()[:-1]),
        _vkey_with(name="two words"),
        LOG_VKEY.to_text() + "+x",
    ],
    ids=[
        "empty",
        "two-fields",
        "id-of-another-name",
        "non-hex-id",
        "uppercase-id",
        "short-id",
        "not-base64",
        "unknown-type",
        "short-key",
        "truncated-base64",
        "space-in-name",
        "plus-in-base64-tail",
    ],
)
def test_malformed_vkeys_are_key_format_errors(text: str) -> None:
    with pytest.raises(KeyFormatError):
        parse_vkey(text)


# -- cosignatures -------------------------------------------------------------------------------


def test_cosignature_line_is_the_spec_bytes() -> None:
    cp = _signed(5)
    line = cosign(
        cp, name="w1.example", public_key=W1.public_key.raw, timestamp=1679315147, sign=W1.sign
    )
    kid = hashlib.sha256(b"w1.example\n\x04" + W1.public_key.raw).digest()[:4]
    assert line.key_hash == kid
    message = b"cosignature/v1\ntime 1679315147\n" + cp.body
    assert cosignature_message(cp.body, 1679315147) == message
    assert line.signature[:8] == (1679315147).to_bytes(8, "big")
    assert signing.check(W1.public_key, message, line.signature[8:])
    parsed = read_cosignature(parse_signature_lines(line.to_line())[0])
    assert parsed is not None and parsed.timestamp == 1679315147


def _policy(*witnesses: VerifierKey, quorum: int | None = None) -> WitnessPolicy:
    return WitnessPolicy(log=LOG_VKEY, witnesses=witnesses, quorum=quorum)


def test_quorum_counts_each_valid_witness_once_and_ignores_unknown_lines() -> None:
    cp = _cosigned(_cosigned(_signed(9), W1, "w1.example"), W1, "w1.example", 1700000500)
    stranger = signing.PrivateKey(hashlib.sha256(b"stranger").digest())
    cp = _cosigned(cp, stranger, "w9.example")
    cp = cp.with_signature(NoteSignature(name="w8.example", key_hash=b"abcd", signature=b"junk"))
    v1, v2 = _vkey(W1, "w1.example"), _vkey(W2, "w2.example")
    result = check_checkpoint(cp, _policy(v1, v2, quorum=1), signing.check_raw)
    assert result.cosigned == (("w1.example", 1700000500),)
    with pytest.raises(CheckpointRejectedError) as e:
        check_checkpoint(cp, _policy(v1, v2), signing.check_raw)
    assert e.value.verdict == "quorum-not-met"
    both = _cosigned(cp, W2, "w2.example")
    assert len(check_checkpoint(both, _policy(v1, v2), signing.check_raw).cosigned) == 2


def _tampered_line(cp: Checkpoint, index: int, flip: int) -> Checkpoint:
    sigs = list(cp.signatures)
    blob = bytearray(sigs[index].signature)
    blob[flip] ^= 1
    sigs[index] = NoteSignature(
        name=sigs[index].name, key_hash=sigs[index].key_hash, signature=bytes(blob)
    )
    return Checkpoint(
        origin=cp.origin,
        size=cp.size,
        head_hash=cp.head_hash,
        extensions=cp.extensions,
        signatures=tuple(sigs),
    )


@pytest.mark.parametrize(
    ("make", "verdict"),
    [
        (lambda: _signed(9, origin="rensei-routing/other/audit"), "other-origin"),
        (lambda: _cosigned(_signed(9, key=W2), W1, "w1.example"), "wrong-key"),
        (lambda: _tampered_line(_cosigned(_signed(9), W1, "w1.example"), 0, 10), "bad-signature"),
        (lambda: _tampered_line(_cosigned(_signed(9), W1, "w1.example"), 1, 3), "bad-signature"),
        (lambda: _tampered_line(_cosigned(_signed(9), W1, "w1.example"), 1, 40), "bad-signature"),
        (lambda: _signed(9), "quorum-not-met"),
        (lambda: _cosigned(_signed(9), W2, "w1.example"), "quorum-not-met"),
    ],
    ids=[
        "other-origin",
        "log-signed-by-another-key",
        "log-signature-flipped",
        "cosignature-timestamp-changed",
        "cosignature-flipped",
        "no-cosignature",
        "cosigned-by-another-key-under-the-name",
    ],
)
def test_policy_refusals_have_their_verdict(make: object, verdict: str) -> None:
    cp = make()  # type: ignore[operator]
    with pytest.raises(CheckpointRejectedError) as e:
        check_checkpoint(cp, _policy(_vkey(W1, "w1.example")), signing.check_raw)
    assert e.value.verdict == verdict


def test_a_checkpoint_body_changed_after_signing_is_refused() -> None:
    cp = _cosigned(_signed(9), W1, "w1.example")
    forged = Checkpoint(
        origin=cp.origin,
        size=10,
        head_hash=cp.head_hash,
        extensions=cp.extensions,
        signatures=cp.signatures,
    )
    with pytest.raises(CheckpointRejectedError) as e:
        check_checkpoint(forged, _policy(_vkey(W1, "w1.example")), signing.check_raw)
    assert e.value.verdict == "bad-signature"


@pytest.mark.parametrize("quorum", [-1, 3])
def test_a_quorum_out_of_range_is_an_input_error(quorum: int) -> None:
    with pytest.raises(InputError):
        _policy(_vkey(W1, "a"), _vkey(W2, "b"), quorum=quorum)
    with pytest.raises(InputError):
        _policy(_vkey(W1, "a"), _vkey(W1, "a"))


# -- tlog-proof ---------------------------------------------------------------------------------


def _proof(index: int, size: int, extra: bytes | None = b"record line") -> TlogProof:
    cp = _cosigned(_signed(size), W1, "w1.example")
    return TlogProof(
        index=index, proof=tuple(TREE.inclusion_proof(index, size)), checkpoint=cp, extra=extra
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_tlog_proof_round_trips_and_verifies(data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 40))
    index = data.draw(st.integers(0, size - 1))
    extra = data.draw(st.none() | st.binary(min_size=1, max_size=200))
    proof = _proof(index, size, extra)
    text = proof.to_text()
    assert parse_tlog_proof(text) == proof
    assert parse_tlog_proof(text.encode()).to_text() == text
    result = verify_tlog_proof(
        proof, LEAVES[index], _policy(_vkey(W1, "w1.example")), signing.check_raw
    )
    assert result.cosigned[0][0] == "w1.example"
    other = data.draw(st.integers(0, 39).filter(lambda i: i != index))
    with pytest.raises(ProofError) as e:
        verify_tlog_proof(proof, LEAVES[other], _policy(), signing.check_raw)
    assert e.value.verdict == "inclusion-failed"


def test_tlog_proof_text_is_the_spec_layout() -> None:
    proof = _proof(3, 8)
    lines = proof.to_text().split("\n")
    assert lines[0] == "c2sp.org/tlog-proof@v1"
    assert lines[1] == "extra " + base64.b64encode(b"record line").decode()
    assert lines[2] == "index 3"
    assert [base64.b64decode(x) for x in lines[3:6]] == TREE.inclusion_proof(3, 8)
    assert lines[6] == ""
    assert "\n".join(lines[7:]) == proof.checkpoint.to_text()
    assert "extra" not in _proof(3, 8, None).to_text()


def test_a_proof_against_a_forged_root_is_refused_by_its_signature() -> None:
    proof = _proof(2, 8)
    forged_cp = Checkpoint(
        origin=ORIGIN,
        size=8,
        head_hash="sha256:" + leaf_hash(b"x").hex(),
        signatures=proof.checkpoint.signatures,
    )
    forged = TlogProof(index=2, proof=proof.proof, checkpoint=forged_cp)
    with pytest.raises(CheckpointRejectedError) as e:
        verify_tlog_proof(forged, LEAVES[2], _policy(), signing.check_raw)
    assert e.value.verdict == "bad-signature"


_GOOD = _proof(3, 8).to_text()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", EvidenceFormatError),
        (_GOOD.replace("tlog-proof@v1", "tlog-proof@v2"), EvidenceFormatError),
        (_GOOD.replace("index 3", "index 03"), EvidenceFormatError),
        (_GOOD.replace("index 3", "index -3"), EvidenceFormatError),
        (_GOOD.replace("index 3\n", ""), EvidenceFormatError),
        (_GOOD.replace("extra ", "extra  "), EvidenceFormatError),
        (_GOOD.replace("extra cmVjb3JkIGxpbmU=", "extra cmVjb3JkIGxpbmU"), EvidenceFormatError),
        (_GOOD.replace("\n\n", "\n"), EvidenceFormatError),
        (_GOOD.replace("index 3\n", "index 3\nAAAA\n"), EvidenceFormatError),
        (_GOOD.replace("index 3\n", "index 3\n" + "AAAA" * 11 + "\n"), EvidenceFormatError),
        (_GOOD.replace("index 3\n", "index 3\n" + ("A" * 43 + "=\n") * 61), EvidenceFormatError),
        (_GOOD.replace("index 3\n", "index 3\t\n"), EvidenceFormatError),
        (_GOOD.replace(ORIGIN + "\n8\n", ORIGIN + "\n08\n"), CheckpointFormatError),
        (_GOOD.rsplit("\u2014", 2)[0], CheckpointFormatError),
        (_GOOD.encode()[:-3] + b"\xff\n", EvidenceFormatError),
    ],
    ids=[
        "empty",
        "other-header",
        "leading-zero-index",
        "negative-index",
        "no-index",
        "double-space-extra",
        "unpadded-extra",
        "no-blank-line",
        "short-hash",
        "33-byte-hash",
        "64-hashes",
        "tab",
        "checkpoint-leading-zero",
        "checkpoint-truncated",
        "not-utf8",
    ],
)
def test_malformed_tlog_proofs_are_refused(text: str | bytes, error: type[Exception]) -> None:
    assert parse_tlog_proof(_GOOD).index == 3  # the control parses
    with pytest.raises(error) as e:
        parse_tlog_proof(text)
    assert getattr(e.value, "verdict", None) == "malformed"


# -- add-checkpoint ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_add_checkpoint_round_trips_and_checks(data: st.DataObject) -> None:
    new = data.draw(st.integers(1, 40))
    old = data.draw(st.integers(0, new))
    body = AddCheckpoint(
        old_size=old, proof=tuple(TREE.consistency_proof(old, new)), checkpoint=_signed(new)
    )
    text = body.to_text()
    assert text.startswith(f"old {old}\n")
    parsed = parse_add_checkpoint(text)
    assert parsed == body
    old_cp = _signed(old) if old else None
    if old_cp is not None:
        check_consistent(old_cp, parsed.checkpoint, parsed.proof)
        if 0 < old < new:
            with pytest.raises(ProofError) as e:
                check_consistent(old_cp, parsed.checkpoint, parsed.proof[:-1])
            assert e.value.verdict == "inconsistent"


def test_a_witness_asked_to_go_backwards_or_sideways_is_refused() -> None:
    with pytest.raises(ProofError) as e:
        check_consistent(_signed(20), _signed(10), [])
    assert e.value.reason == "size-order"
    other = tree_checkpoint(ORIGIN, 10, leaf_hash(b"fork"))
    with pytest.raises(ProofError) as e:
        check_consistent(_signed(10), other, [])
    assert e.value.reason == "root-mismatch"
    with pytest.raises(CheckpointRejectedError) as r:
        check_consistent(
            _signed(10), _signed(12, origin="x.example/log"), TREE.consistency_proof(10, 12)
        )
    assert r.value.verdict == "other-origin"


_BODY = AddCheckpoint(
    old_size=5, proof=tuple(TREE.consistency_proof(5, 9)), checkpoint=_signed(9)
).to_text()


@pytest.mark.parametrize(
    "text",
    [
        _BODY.replace("old 5", "old 05"),
        _BODY.replace("old 5", "old 10"),
        _BODY.replace("old 5", "old5"),
        _BODY.replace("old 5", "old 0"),
        _BODY.replace("old 5\n", "old 5\n" + ("A" * 43 + "=\n") * 64),
        _BODY.replace("\n\n", "\n", 1),
        "old 0\n\n",
    ],
    ids=[
        "leading-zero",
        "old-above-new",
        "no-space",
        "proof-from-zero",
        "64-lines",
        "no-blank",
        "no-note",
    ],
)
def test_malformed_add_checkpoint_bodies_are_refused(text: str) -> None:
    with pytest.raises((EvidenceFormatError, CheckpointFormatError)) as e:
        parse_add_checkpoint(text)
    assert e.value.verdict == "malformed"  # type: ignore[union-attr]


def test_witness_reply_lines_attach_to_the_checkpoint() -> None:
    cp = _signed(9)
    reply = cosign(
        cp, name="w1.example", public_key=W1.public_key.raw, timestamp=5, sign=W1.sign
    ).to_line()
    stored = parse_checkpoint(cp.to_text() + reply)
    assert check_checkpoint(
        stored, _policy(_vkey(W1, "w1.example")), signing.check_raw
    ).cosigned == (("w1.example", 5),)
    for bad in ["", "\u2014 w1.example\n", reply.rstrip("\n"), reply + "x\n"]:
        with pytest.raises(CheckpointFormatError):
            parse_signature_lines(bad)
