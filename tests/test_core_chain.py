"""The pure chain: link rules, checkpoint notes, and the streaming verifier over in-memory rows."""

from __future__ import annotations

import base64
import hashlib
import json
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import signing
from rensei_routing.core.audit.chain import (
    GENESIS_HASH,
    REASONS,
    STRICT_PAYLOADS,
    AuditRecord,
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    encode_payload,
    link_rows,
    link_stamped,
    note_key_hash,
    parse_checkpoint,
    payload_hash,
    record_hash,
    verify_chain,
)
from rensei_routing.core.canonical import digest
from rensei_routing.core.redact import redact
from rensei_routing.core.timestamps import check_timestamp, format_timestamp
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


@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.builds(
            timezone,
            st.timedeltas(
                min_value=timedelta(hours=-23, minutes=-59),
                max_value=timedelta(hours=23, minutes=59),
            ),
        ),
    )
)
def test_format_timestamp_is_the_rfc3339_text_of_the_utc_instant(moment: datetime) -> None:
    text = format_timestamp(moment)
    assert check_timestamp(text) == text
    assert datetime.fromisoformat(text[:-1] + "+00:00") == moment
    utc = moment.astimezone(UTC)
    assert text == (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond:06d}Z"
    )


def test_format_timestamp_writes_a_year_before_1000_in_four_digits() -> None:
    assert format_timestamp(datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == (
        "0999-01-02T03:04:05.000006Z"
    )


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


class _StrSub(str):
    __slots__ = ()


def _relinked(rows: list[Any], seq: int, column: int, value: Any) -> list[Any]:
    """Set one field of record ``seq`` and recompute every hash from it on, as an attacker who
    can write the rows would (the record hash over the bytes the fast path would hash)."""
    rows = [list(r) for r in rows]
    rows[seq][column] = value
    prev = rows[seq][2]
    for r in rows[seq:]:
        r[2] = prev
        r[3] = payload_hash(r[5]) if type(r[5]) is bytes else r[3]
        at = json.dumps(r[1], ensure_ascii=False)
        text = f'{{"payload_hash":"{r[3]}","prev_hash":"{prev}","recorded_at":{at},"seq":{r[0]}}}'
        r[4] = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        prev = r[4]
    return rows


# Rows whose every hash was recomputed (or equals a well-formed value) but which a strict walk
# refuses: the fast path must not take any of them for an intact record.
_REHASHED = {
    "seq-float": (0, 6.0),
    "seq-bool": (0, True),
    "quote-in-recorded-at": (1, 'x"y'),
    "surrogate-in-recorded-at": (1, "2025-03-01T12:00:00\ud800Z"),
    "bad-date": (1, "2025-02-30T12:00:00Z"),
    "not-json": (5, b'{"i":6'),
    "duplicate-key": (5, b'{"i":6,"i":6}'),
    "bytearray": (5, bytearray(b'{"i":6}')),
    "prev-hash-str-subclass": (2, None),
}


@pytest.mark.parametrize(("column", "value"), list(_REHASHED.values()), ids=list(_REHASHED))
def test_a_rehashed_record_the_strict_rules_refuse_is_unparseable(column: int, value: Any) -> None:
    rows = _rows(12)
    if value is None:  # equal to the previous record hash, but not exactly a str
        rows = [list(r) for r in rows]
        rows[6][column] = _StrSub(rows[6][column])
    else:
        rows = _relinked(rows, 6, column, value)
    result = verify_chain(rows)
    assert (result.first_broken_seq, result.reason, result.records_checked) == (
        6,
        "unparseable-record",
        6,
    ), result
    # below a strict checkpoint of the honest log, the same verdict (after a strict second walk)
    cp = _strict_checkpoint_of(_rows(12), 10)
    again = verify_chain(rows, checkpoints=[cp], signature_ok=_ok, rows_again=lambda: rows)
    assert again == result


def test_an_empty_recorded_at_is_no_timestamp_on_the_first_record_either() -> None:
    # The walk checks a batch's shared timestamp once; before any timestamp had been seen, an
    # empty one passed for "the same as the last" (found in review).
    for start in (0, 3):
        rows = _relinked(_rows(6), start, 1, "")
        result = verify_chain(
            rows[start:] if start else rows, start_seq=start, start_hash=rows[start][2]
        )
        assert (result.first_broken_seq, result.reason) == (start, "unparseable-record"), result


def test_a_malformed_start_hash_is_unparseable_even_when_the_first_row_links_to_it() -> None:
    rows = _relinked(_rows(3), 0, 2, "sha256:XYZ")
    result = verify_chain(rows, start_hash="sha256:XYZ")
    assert (result.first_broken_seq, result.reason) == (0, "unparseable-record")


# -- sparing the parse below a strict checkpoint --------------------------------------------------


def _strict_checkpoint_of(rows: list[Any], size: int, key: signing.PrivateKey = KEY) -> Checkpoint:
    head = GENESIS_HASH if size == 0 else rows[size - 1][4]
    cp = Checkpoint(origin=ORIGIN, size=size, head_hash=head, extensions=(STRICT_PAYLOADS,))
    return _sign(cp, key=key)


def _forged(n: int = 12, seq: int = 3) -> list[Any]:
    """An n-record chain whose record ``seq`` is not JSON, every hash recomputed."""
    return _relinked(_rows(n), seq, 5, b'{"outcome":"selected","outcome":"rejected"}')


def test_a_strict_checkpoint_spares_the_parse_below_its_size() -> None:
    """What a checkpoint carrying the line vouches for is taken on its signer's word: signed
    over a log whose record 3 is not JSON (a signer that did not parse), the records below it
    are not parsed again. This is what makes verify fast, so a verifier that parsed anyway
    would fail here; the tests below show who may make that promise."""
    rows = _forged()
    cp = _strict_checkpoint_of(rows, 8)
    result = verify_chain(rows, checkpoints=[cp], signature_ok=_ok, rows_again=lambda: rows)
    assert result and result.records_checked == 12
    # a stream read once is parsed in full
    strict = verify_chain(rows, checkpoints=[cp], signature_ok=_ok)
    assert (strict.first_broken_seq, strict.reason) == (3, "unparseable-record")
    # the parse resumes at the checkpoint's size
    low = _strict_checkpoint_of(rows, 3)
    result = verify_chain(rows, checkpoints=[low], signature_ok=_ok, rows_again=lambda: rows)
    assert (result.first_broken_seq, result.reason) == (3, "unparseable-record")


def test_a_checkpoint_without_the_line_spares_nothing() -> None:
    """An earlier release signed checkpoints without parsing: its notes vouch for hashes only."""
    rows = _forged()
    old = _checkpoint_of(rows, 8)
    assert old.extensions == ()
    result = verify_chain(rows, checkpoints=[old], signature_ok=_ok, rows_again=lambda: rows)
    assert (result.first_broken_seq, result.reason, result.records_checked) == (
        3,
        "unparseable-record",
        3,
    )
    # nor does another extension line
    other = _sign(Checkpoint(origin=ORIGIN, size=8, head_hash=rows[7][4], extensions=("x: y",)))
    result = verify_chain(rows, checkpoints=[other], signature_ok=_ok, rows_again=lambda: rows)
    assert (result.first_broken_seq, result.reason) == (3, "unparseable-record")


def test_a_strict_checkpoint_that_fails_its_signature_spares_nothing() -> None:
    rows = _forged()
    other = signing.PrivateKey(bytes(range(1, 33)))
    forged = _strict_checkpoint_of(rows, 8, key=other)
    result = verify_chain(rows, checkpoints=[forged], signature_ok=_ok, rows_again=lambda: rows)
    assert (result.reason, result.first_broken_seq) == ("checkpoint-signature-invalid", None)
    # the line is covered by the signature: added to a signed note, the note fails
    old = _checkpoint_of(rows, 8)
    added = Checkpoint(
        origin=ORIGIN,
        size=8,
        head_hash=old.head_hash,
        extensions=(STRICT_PAYLOADS,),
        signatures=old.signatures,
    )
    assert parse_checkpoint(added.to_text()) == added
    result = verify_chain(rows, checkpoints=[added], signature_ok=_ok, rows_again=lambda: rows)
    assert (result.reason, result.first_broken_seq) == ("checkpoint-signature-invalid", None)


def test_a_failure_below_a_strict_checkpoint_is_named_by_a_strict_second_walk() -> None:
    honest = _rows(12)
    cp = _strict_checkpoint_of(honest, 8)
    rows = _forged()  # record 3 rewritten after cp was signed, hashes recomputed
    walks: list[int] = []

    def again() -> list[Any]:
        walks.append(1)
        return rows

    seen: list[int] = []
    result = verify_chain(
        rows, checkpoints=[cp], signature_ok=_ok, rows_again=again, progress=seen.append
    )
    assert (result.first_broken_seq, result.reason, result.records_checked) == (
        3,
        "unparseable-record",
        3,
    )
    assert result == verify_chain(rows, checkpoints=[cp], signature_ok=_ok)
    assert walks == [1]
    assert seen == sorted(seen)  # the second walk's progress never goes back


@pytest.mark.parametrize(
    "how",
    [
        "payload",
        "recorded_at",
        "record_hash",
        "prev_hash",
        "payload_hash",
        "delete",
        "swap",
        "renumber",
        "not-json",
        "bad-hash-form",
        "wrong-type",
        "short-row",
    ],
)
@pytest.mark.parametrize("size", [4, 10, 12])
def test_every_tamper_reads_the_same_with_a_strict_checkpoint(how: str, size: int) -> None:
    honest = _rows(12)
    cp = _strict_checkpoint_of(honest, size)
    rows = _tamper(honest, how)
    strict = verify_chain(rows, checkpoints=[cp], signature_ok=_ok)
    fast = verify_chain(rows, checkpoints=[cp], signature_ok=_ok, rows_again=lambda: rows)
    assert fast == strict and not fast


def test_a_failure_above_a_strict_checkpoint_needs_no_second_walk() -> None:
    honest = _rows(12)
    cp = _strict_checkpoint_of(honest, 6)
    rows = _tamper(honest, "not-json")  # record 6: the first one the walk parses
    walks: list[int] = []
    result = verify_chain(
        rows, checkpoints=[cp], signature_ok=_ok, rows_again=lambda: walks.append(1) or rows
    )
    assert (result.first_broken_seq, result.reason) == (6, "unparseable-record")
    assert walks == []


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


_STAMPS = [
    "2025-03-01T12:00:00.000000Z",
    "2025-03-01T12:00:00.000001Z",
    "2025-03-01T12:00:01.000000Z",
    "2025-03-02T12:00:00.000000Z",
]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(_STAMPS) - 1), min_size=1, max_size=12),
    at=st.integers(0, 11),
    to=st.integers(0, len(_STAMPS) - 1),
)
def test_records_sharing_or_changing_their_time_are_hashed_with_their_own(
    picks: list[int], at: int, to: int
) -> None:
    """The walk escapes a batch's shared ``recorded_at`` once: runs of one time, times that
    change and change back all verify, and a time swapped for another (hashes left as they
    were) fails at that record, as every record is hashed with its own time."""
    stamped = [(_STAMPS[k], encode_payload({"i": i})) for i, k in enumerate(picks)]
    rows = [list(r) for r in link_stamped(stamped, seq=0, prev_hash=GENESIS_HASH)]
    result = verify_chain(iter(rows))
    assert result.ok and result.records_checked == len(rows)
    at %= len(rows)
    if _STAMPS[to] == rows[at][1]:
        return
    rows[at][1] = _STAMPS[to]
    result = verify_chain(iter(rows))
    assert (result.first_broken_seq, result.reason) == (at, "record-hash-mismatch")
