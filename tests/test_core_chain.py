"""The pure chain: link rules, checkpoint notes, and the streaming verifier over in-memory rows."""

from __future__ import annotations

import base64
import json
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import signing
from rensei_routing.core.canonical import digest
from rensei_routing.core.chain import (
    GENESIS_HASH,
    REASONS,
    AuditRecord,
    Checkpoint,
    NoteSignature,
    check_timestamp,
    checkpoint_origin,
    encode_payload,
    format_timestamp,
    link_rows,
    note_key_hash,
    parse_checkpoint,
    payload_hash,
    record_hash,
    verify_chain,
)
from rensei_routing.core.redact import redact
from rensei_routing.errors import CheckpointFormatError, MalformedError

T0 = "2025-03-01T12:00:00.000000Z"
ORIGIN = checkpoint_origin("acme")
KEY = signing.PrivateKey(bytes(range(32)))
PUB = KEY.public_key
KEY_HASH = note_key_hash(ORIGIN, PUB.raw)


def _rows(n: int, *, start: int = 0, prev: str = GENESIS_HASH) -> list[Any]:
    payloads = [encode_payload({"i": i, "note": f"decision {i}"}) for i in range(start, start + n)]
    return [list(r) for r in link_rows(payloads, seq=start, prev_hash=prev, recorded_at=T0)]


def _sign(cp: Checkpoint, key: signing.PrivateKey = KEY, name: str = ORIGIN) -> Checkpoint:
    sig = NoteSignature(
        name=name, key_hash=note_key_hash(name, key.public_key.raw), signature=key.sign(cp.body)
    )
    return cp.with_signature(sig)


def _ok(cp: Checkpoint) -> bool:
    sig = cp.signature_by(ORIGIN, KEY_HASH)
    return sig is not None and signing.check(PUB, cp.body, sig)


def _checkpoint_of(rows: list[Any], size: int) -> Checkpoint:
    head = GENESIS_HASH if size == 0 else rows[size - 1][4]
    return _sign(Checkpoint(origin=ORIGIN, size=size, head_hash=head))


# -- link rules ---------------------------------------------------------------------------------


def test_genesis_and_first_links() -> None:
    assert GENESIS_HASH == "sha256:" + "0" * 64
    rows = _rows(3)
    assert [r[0] for r in rows] == [0, 1, 2]
    assert rows[0][2] == GENESIS_HASH
    assert rows[1][2] == rows[0][4] and rows[2][2] == rows[1][4]


def test_payload_hash_is_the_digest_of_the_redacted_payload() -> None:
    payload = {"b": ["ghp_" + "x1" * 18], "a": 1}
    data = encode_payload(payload)
    assert json.loads(data) == redact(payload)
    assert payload_hash(data) == digest(redact(payload))
    assert b"ghp_" not in data


@pytest.mark.parametrize("field", ["seq", "prev_hash", "recorded_at", "payload_hash"])
def test_record_hash_covers_every_field_including_recorded_at(field: str) -> None:
    base = {"seq": 4, "prev_hash": GENESIS_HASH, "recorded_at": T0, "payload_hash": digest(1)}
    changed = dict(base)
    changed[field] = {
        "seq": 5,
        "prev_hash": digest(2),
        "recorded_at": "2025-03-01T12:00:00.000001Z",
        "payload_hash": digest(3),
    }[field]
    assert record_hash(**base) == digest(base)
    assert record_hash(**changed) != record_hash(**base)


@pytest.mark.parametrize(
    "text",
    ["2025-03-01T12:00:00Z", "2025-03-01T12:00:00.5Z", "2024-02-29T23:59:59.123456Z"],
)
def test_timestamps_accepted(text: str) -> None:
    assert check_timestamp(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "2025-03-01 12:00:00Z",
        "2025-03-01T12:00:00+00:00",
        "2025-03-01T12:00:00",
        "2025-13-01T12:00:00Z",
        "2023-02-29T00:00:00Z",
        "2025-03-01T12:00:00.1234567Z",
        "",
    ],
)
def test_timestamps_refused(text: str) -> None:
    with pytest.raises(MalformedError):
        check_timestamp(text)


def test_format_timestamp_normalises_to_utc() -> None:
    moment = datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(moment) == "2025-03-01T12:00:00.000000Z"
    assert check_timestamp(format_timestamp(datetime.now(UTC)))
    with pytest.raises(MalformedError):
        format_timestamp(datetime(2025, 3, 1))


# -- verifier -----------------------------------------------------------------------------------


def test_intact_chain_verifies_and_is_truthy() -> None:
    rows = _rows(25)
    result = verify_chain(iter(rows))
    assert result and result.ok
    assert (result.records_checked, result.first_broken_seq, result.reason) == (25, None, None)
    assert result.head_hash == rows[-1][4]
    assert verify_chain([]).records_checked == 0


def _tamper(rows: list[Any], how: str) -> list[Any]:
    rows = [list(r) for r in rows]
    if how == "payload":
        rows[6][5] = json.dumps({"i": 6, "note": "rewritten"}).encode()
    elif how == "recorded_at":
        rows[6][1] = "2025-03-01T12:00:01.000000Z"
    elif how == "record_hash":
        rows[6][4] = digest("forged")
    elif how == "prev_hash":
        rows[6][2] = digest("forged")
    elif how == "payload_hash":
        rows[6][3] = digest("forged")
    elif how == "delete":
        del rows[6]
    elif how == "swap":
        rows[6], rows[8] = rows[8], rows[6]
        rows[6][0], rows[8][0] = 6, 8
    elif how == "renumber":
        for r in rows[6:]:
            r[0] += 1
    elif how == "not-json":
        rows[6][5] = b"\xff{not json"
    elif how == "bad-hash-form":
        rows[6][3] = "sha256:XYZ"
    elif how == "wrong-type":
        rows[6][0] = "6"
    elif how == "short-row":
        rows[6] = rows[6][:4]
    return rows


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("payload", "payload-hash-mismatch"),
        ("recorded_at", "record-hash-mismatch"),
        ("record_hash", "record-hash-mismatch"),
        ("prev_hash", "prev-hash-mismatch"),
        ("payload_hash", "payload-hash-mismatch"),
        ("delete", "seq-gap"),
        ("swap", "prev-hash-mismatch"),
        ("renumber", "seq-gap"),
        ("not-json", "unparseable-record"),
        ("bad-hash-form", "unparseable-record"),
        ("wrong-type", "unparseable-record"),
        ("short-row", "unparseable-record"),
    ],
)
def test_each_tamper_names_seq_and_reason(how: str, reason: str) -> None:
    result = verify_chain(_tamper(_rows(12), how))
    assert not result
    assert (result.first_broken_seq, result.reason, result.records_checked) == (6, reason, 6)
    assert reason in REASONS and result.detail


def test_valid_json_in_another_encoding_is_unparseable_not_a_hash_mismatch() -> None:
    # Stored payloads are UTF-8 (RFC 8785); json.loads alone would guess UTF-16 from a BOM.
    rows = _rows(12)
    rows[6][5] = '{"i": 6}'.encode("utf-16")
    result = verify_chain(rows)
    assert (result.first_broken_seq, result.reason) == (6, "unparseable-record")


# -- records as displayed ------------------------------------------------------------------------


def test_record_to_dict_of_an_intact_record_has_no_damage_keys() -> None:
    record = AuditRecord.from_row(_rows(1)[0])
    assert record.payload_error is None
    assert record.to_dict() == {
        "seq": 0,
        "recorded_at": T0,
        "prev_hash": GENESIS_HASH,
        "payload_hash": record.payload_hash,
        "record_hash": record.record_hash,
        "payload": {"i": 0, "note": "decision 0"},
    }
    literal_null = AuditRecord.from_row([*_rows(1)[0][:5], b"null"])
    assert literal_null.to_dict()["payload"] is None and literal_null.payload_error is None
    assert "payload_error" not in literal_null.to_dict()


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe\x00", b'{"i": 1', '{"i": 1}'.encode("utf-16"), b"[" * 100_000 + b"]" * 100_000],
    ids=["binary", "truncated-json", "utf-16", "too-deep"],
)
def test_damaged_record_is_displayable_as_its_raw_bytes(data: bytes) -> None:
    record = AuditRecord.from_row([*_rows(3)[2][:5], data])
    shown = record.to_dict()  # total: never raises
    assert shown["payload"] is None
    assert shown["payload_raw_hex"] == data.hex()
    assert shown["payload_error"] == record.payload_error
    assert record.payload_error is not None and record.payload_error.startswith("not JSON: ")
    assert "\n" not in record.payload_error and "\t" not in record.payload_error
    assert shown["seq"] == 2 and shown["record_hash"] == record.record_hash
    with pytest.raises(MalformedError, match=r"audit\[2\]\.payload"):
        _ = record.payload


def test_checkpoints_catch_truncation_and_rewrites() -> None:
    rows = _rows(10)
    cp = _checkpoint_of(rows, 8)
    assert verify_chain(rows, checkpoints=[cp], signature_ok=_ok, origin=ORIGIN)
    assert verify_chain(rows[:8], checkpoints=[cp], signature_ok=_ok).ok
    assert verify_chain(rows[:5], checkpoints=[]).ok  # undetectable without a checkpoint
    short = verify_chain(rows[:5], checkpoints=[cp], signature_ok=_ok)
    assert (short.ok, short.reason, short.first_broken_seq) == (
        False,
        "truncated-below-checkpoint",
        5,
    )
    rewritten = rows[:5] + _rows(5, start=5, prev=rows[4][4])
    rewritten[5:] = [list(r) for r in _relink(rewritten[5:], "other")]
    result = verify_chain(rewritten, checkpoints=[cp], signature_ok=_ok)
    assert (result.reason, result.first_broken_seq) == ("truncated-below-checkpoint", 7)


def _relink(rows: list[Any], salt: str) -> list[Any]:
    prev = rows[0][2]
    payloads = [encode_payload({"salt": salt, "i": r[0]}) for r in rows]
    return link_rows(payloads, seq=rows[0][0], prev_hash=prev, recorded_at=T0)


def test_checkpoint_at_zero_is_genesis() -> None:
    assert verify_chain(_rows(3), checkpoints=[_checkpoint_of([], 0)], signature_ok=_ok)
    bad = _sign(Checkpoint(origin=ORIGIN, size=0, head_hash=digest("x")))
    result = verify_chain(_rows(3), checkpoints=[bad], signature_ok=_ok)
    assert (result.reason, result.first_broken_seq) == ("truncated-below-checkpoint", 0)


def test_forged_or_foreign_checkpoints_are_distinct_from_broken_links() -> None:
    rows = _rows(6)
    other = signing.PrivateKey(bytes(range(1, 33)))
    forged = _sign(Checkpoint(origin=ORIGIN, size=6, head_hash=rows[-1][4]), key=other)
    result = verify_chain(rows, checkpoints=[forged], signature_ok=_ok, origin=ORIGIN)
    assert (result.ok, result.reason, result.first_broken_seq) == (
        False,
        "checkpoint-signature-invalid",
        None,
    )
    foreign = _sign(Checkpoint(origin=checkpoint_origin("other"), size=6, head_hash=rows[-1][4]))
    result = verify_chain(rows, checkpoints=[foreign], signature_ok=lambda cp: True, origin=ORIGIN)
    assert result.reason == "checkpoint-signature-invalid"
    with pytest.raises(ValueError):
        verify_chain(rows, checkpoints=[forged])


def test_progress_and_resume() -> None:
    rows = _rows(30)
    seen: list[int] = []
    assert verify_chain(rows, progress=seen.append)
    assert seen[-1] == 30
    tail = verify_chain(rows[20:], start_seq=20, start_hash=rows[19][4])
    assert tail and tail.records_checked == 30
    wrong = verify_chain(rows[20:], start_seq=20, start_hash=GENESIS_HASH)
    assert (wrong.reason, wrong.first_broken_seq) == ("prev-hash-mismatch", 20)


def _stream(n: int) -> Iterator[tuple[Any, ...]]:
    prev = GENESIS_HASH
    for seq in range(n):
        data = b'{"i":%d}' % seq
        p_hash = payload_hash(data)
        r_hash = record_hash(seq, prev, T0, p_hash)
        yield (seq, T0, prev, p_hash, r_hash, data)
        prev = r_hash


@pytest.mark.slow
def test_verifier_memory_does_not_grow_with_the_log() -> None:
    peaks = []
    for n in (2_000, 20_000):
        tracemalloc.start()
        assert verify_chain(_stream(n)).records_checked == n
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] * 2 + 64_000, peaks


# -- checkpoint notes ---------------------------------------------------------------------------


def test_checkpoint_note_text_and_round_trip() -> None:
    head = "sha256:" + "ab" * 32
    cp = _sign(Checkpoint(origin=ORIGIN, size=42, head_hash=head))
    text = cp.to_text()
    b64 = base64.b64encode(bytes.fromhex("ab" * 32)).decode()
    assert text.startswith(f"{ORIGIN}\n42\n{b64}\n\n\u2014 {ORIGIN} ")
    assert text.endswith("\n") and text.count("\n") == 5
    parsed = parse_checkpoint(text)
    assert parsed == cp
    assert parse_checkpoint(text.encode()) == cp
    assert _ok(parsed)


def test_note_signature_line_matches_the_go_sumdb_note_reference() -> None:
    # golang.org/x/mod/sumdb/note documentation example key and signed note.
    vkey = base64.b64decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    skey = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
    assert vkey[0] == skey[0] == 1
    key = signing.PrivateKey(skey[1:])
    assert key.public_key.raw == vkey[1:]
    assert note_key_hash("PeterNeumann", vkey[1:]).hex() == "c74f20a3"
    text = (
        b"If you think cryptography is the answer to your problem,\n"
        b"then you don't know what your problem is.\n"
    )
    line = NoteSignature(
        name="PeterNeumann",
        key_hash=note_key_hash("PeterNeumann", vkey[1:]),
        signature=key.sign(text),
    ).to_line()
    assert line == (
        "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqd"
        "ngotpRZb6KE6RyyBwJnAM=\n"
    )


_GOOD = _sign(Checkpoint(origin=ORIGIN, size=3, head_hash="sha256:" + "cd" * 32)).to_text()
_HASH_LINE = _GOOD.split("\n")[2]


@pytest.mark.parametrize(
    "note",
    [
        "",
        _GOOD.rstrip("\n"),
        _GOOD.replace("\n\n", "\n"),
        _GOOD.split("\n\n")[0] + "\n\n",
        _GOOD.replace("\n3\n", "\n03\n"),
        _GOOD.replace("\n3\n", "\n-3\n"),
        _GOOD.replace("\n3\n", "\nthree\n"),
        _GOOD.replace("\n3\n", "\n99999999999999999999\n"),
        _GOOD.replace(_HASH_LINE, "not base64!"),
        _GOOD.replace(_HASH_LINE, base64.b64encode(b"short").decode()),
        _GOOD.replace(ORIGIN + "\n", "\n", 1),
        _GOOD.replace("\u2014 ", "- "),
        _GOOD.replace(f"\u2014 {ORIGIN} ", f"\u2014 {ORIGIN}  "),
        _GOOD + "\u2014 x QUJD\n",
        _GOOD.replace("\n3\n", "\n3\r\n"),
        _GOOD + "x" * 20_000,
    ],
    ids=[
        "empty",
        "no-final-newline",
        "no-blank-line",
        "no-signature",
        "leading-zero",
        "negative",
        "words",
        "too-big",
        "hash-not-base64",
        "hash-short",
        "empty-origin",
        "bad-dash",
        "double-space",
        "short-signature",
        "control-char",
        "too-long",
    ],
)
def test_malformed_notes_are_refused(note: str) -> None:
    with pytest.raises(CheckpointFormatError):
        parse_checkpoint(note)


def test_non_utf8_note_is_refused() -> None:
    with pytest.raises(CheckpointFormatError):
        parse_checkpoint(_GOOD.encode() + b"\xff\n")


def test_unknown_signatures_are_kept_but_only_ours_counts() -> None:
    other = signing.PrivateKey(bytes(32))
    cp = _sign(
        _sign(Checkpoint(origin=ORIGIN, size=1, head_hash=GENESIS_HASH), key=other, name="w")
    )
    parsed = parse_checkpoint(cp.to_text())
    assert len(parsed.signatures) == 2 and _ok(parsed)
    assert parsed.signature_by("w", note_key_hash("w", PUB.raw)) is None


@settings(max_examples=200)
@given(
    st.integers(min_value=0, max_value=2**53 - 1),
    st.text(max_size=80),
    st.text(max_size=40),
    st.text(max_size=80),
)
def test_record_hash_preimage_is_the_canonical_object(seq, prev, at, payload) -> None:
    expected = digest({"seq": seq, "prev_hash": prev, "recorded_at": at, "payload_hash": payload})
    assert record_hash(seq, prev, at, payload) == expected


def test_a_self_encoding_payload_is_stored_as_its_dict_would_be() -> None:
    from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain

    snapshot = PolicySnapshot.of([RoutingPolicy.from_dict({"id": "p"})])
    clean = explain(RouteContext.from_dict({"principal_id": "implementer"}), snapshot)
    assert encode_payload(clean) == encode_payload(clean.to_dict())
    # A credential in the context: the object path redacts exactly as the dict path does.
    leaky = explain(RouteContext.from_dict({"principal_id": "ghp_" + "a" * 36}), snapshot)
    stored = encode_payload(leaky)
    assert stored == encode_payload(leaky.to_dict())
    assert b"ghp_" not in stored and b"[REDACTED:github-token]" in stored
