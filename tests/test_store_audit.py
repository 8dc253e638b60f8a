"""The audit log on a real database file: appends, tamper matrix, checkpoints, redaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from rensei_routing import signing
from rensei_routing.core import _parse
from rensei_routing.core.audit.chain import (
    GENESIS_HASH,
    STRICT_PAYLOADS,
    Checkpoint,
    NoteSignature,
    VerifyResult,
    note_key_hash,
    parse_checkpoint,
    payload_hash,
    record_hash,
)
from rensei_routing.core.audit.treehead import HEAD_LINE, chain_head, form
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import redact
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.resolver import explain
from rensei_routing.errors import (
    AuditError,
    CanonicalEncodingError,
    CheckpointFormatError,
    InputError,
    MalformedError,
    NotFoundError,
    StoreError,
)
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import Codec
from rensei_routing.store.home import Home
from rensei_routing.store.notes import read_checkpoint

from .test_core_redact import CREDENTIALS, IDS

T0 = "2025-03-01T12:00:00.000000Z"
T1 = "2025-03-01T12:00:01.000000Z"
N = 12


def _payload(i: int) -> dict[str, object]:
    return {
        "decision_id": f"d{i}",
        "outcome": "selected",
        "explanation": {"considered": [i, i + 1]},
    }


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="acme")
    return h


@pytest.fixture
def log(home: Home) -> Iterator[AuditLog]:
    with AuditLog.open(home) as audit:
        audit.append_many([_payload(i) for i in range(N)], recorded_at=T0)
        yield audit


def _raw(home: Home) -> apsw.Connection:
    """A plain apsw connection, as an attacker with file access would use."""
    return apsw.Connection(str(home.db_path))


def _sql(home: Home, *statements: str, args: tuple[object, ...] = ()) -> None:
    conn = _raw(home)
    try:
        with conn:
            for s in statements:
                conn.execute(s, args if "?" in s else ())
    finally:
        conn.close()


def _verify(home: Home, *checkpoints: Checkpoint, stored: bool = True) -> VerifyResult:
    with AuditLog.open(home) as fresh:
        return fresh.verify(checkpoints, stored=stored)


# -- appends ------------------------------------------------------------------------------------


def test_append_returns_the_stored_redacted_record(home: Home) -> None:
    token = "ghp_" + "T0k3n" * 8
    with AuditLog.open(home) as audit:
        first = audit.append({"k": token, "n": 1}, recorded_at=T0)
        second = audit.append({"n": 2}, recorded_at=T1)
        assert (first.seq, first.prev_hash) == (0, GENESIS_HASH)
        assert (second.seq, second.prev_hash) == (1, first.record_hash)
        assert first.payload == {"k": "[REDACTED:github-token]", "n": 1}
        assert first.payload_bytes == canonical_bytes(redact({"k": token, "n": 1}))
        assert audit.get(0) == first and audit.get(1) == second
        assert audit.count() == 2 and audit.head() == (2, second.record_hash)
        assert audit.tail(1) == (second,) and audit.tail(5) == (first, second)


def test_chain_continues_across_reopen_and_several_handles(home: Home) -> None:
    with AuditLog.open(home) as a, AuditLog.open(home) as b:
        a.append({"x": 1}, recorded_at=T0)
        b.append({"x": 2}, recorded_at=T0)
        a.append_many([{"x": 3}, {"x": 4}], recorded_at=T0)
    with AuditLog.open(home) as c:
        result = c.append_many([{"x": 5}], recorded_at=T1)
        assert list(result.seqs) == [4]
        assert c.verify().records_checked == 5


def test_append_many_is_all_or_nothing(log: AuditLog) -> None:
    with pytest.raises(CanonicalEncodingError):
        log.append_many([{"ok": 1}, {"bad": float("nan")}], recorded_at=T1)
    assert log.count() == N
    assert log.append_many([], recorded_at=T1).count == 0


def test_store_failures_are_translated_and_write_nothing(home: Home, log: AuditLog) -> None:
    _sql(
        home,
        "CREATE TRIGGER no_more BEFORE INSERT ON audit_records "
        "BEGIN SELECT RAISE(ABORT, 'append refused'); END",
    )
    with pytest.raises(StoreError) as info:
        log.append_many([{"a": 1}, {"a": 2}], recorded_at=T1)
    assert isinstance(info.value.__cause__, apsw.Error)
    assert log.count() == N


@pytest.mark.parametrize("stamp", ["yesterday", "2025-03-01T12:00:00+01:00", ""])
def test_recorded_at_must_be_rfc3339_utc(log: AuditLog, stamp: str) -> None:
    with pytest.raises(MalformedError):
        log.append({"a": 1}, recorded_at=stamp)
    assert log.count() == N


def test_missing_record_is_not_found(log: AuditLog) -> None:
    with pytest.raises(NotFoundError):
        log.get(N)


@pytest.mark.parametrize("seq", [-1, 2**63 - 1, 2**63, 10**20])
def test_seq_beyond_sqlite_integers_is_not_found(log: AuditLog, seq: int) -> None:
    with pytest.raises(NotFoundError, match=f"no audit record with seq {seq}"):
        log.get(seq)


def test_tail_bounds(log: AuditLog) -> None:
    everything = log.tail(N)
    assert log.tail(2**63 - 1) == everything
    assert log.tail(2**63) == everything and log.tail(10**20) == everything
    assert log.tail(0) == ()
    with pytest.raises(MalformedError):
        log.tail(-1)  # SQLite would read LIMIT -1 as "no limit"


def test_damaged_record_can_be_read_back(home: Home, log: AuditLog) -> None:
    _sql(home, "UPDATE audit_records SET payload = x'fffe00' WHERE seq = 2")
    result = _verify(home)
    assert (result.reason, result.first_broken_seq) == ("unparseable-record", 2)
    record = log.get(2)
    shown = record.to_dict()
    assert (shown["seq"], shown["payload"], shown["payload_raw_hex"]) == (2, None, "fffe00")
    assert shown["payload_error"].startswith("not JSON: ")
    with pytest.raises(MalformedError):
        _ = record.payload
    records = log.tail(N)
    assert [r.seq for r in records] == list(range(N))
    assert [r.seq for r in records if r.payload_error is not None] == [2]
    assert [r.to_dict()["payload"] is None for r in records].count(True) == 1


# -- the tamper matrix --------------------------------------------------------------------------


def _swap(home: Home, a: int, b: int) -> None:
    cols = "recorded_at, prev_hash, payload_hash, record_hash, payload"
    conn = _raw(home)
    try:
        with conn:
            ra = conn.execute(f"SELECT {cols} FROM audit_records WHERE seq = ?", (a,)).fetchone()
            rb = conn.execute(f"SELECT {cols} FROM audit_records WHERE seq = ?", (b,)).fetchone()
            sets = ", ".join(f"{c.strip()} = ?" for c in cols.split(","))
            conn.execute(f"UPDATE audit_records SET {sets} WHERE seq = ?", (*rb, a))
            conn.execute(f"UPDATE audit_records SET {sets} WHERE seq = ?", (*ra, b))
    finally:
        conn.close()


def _close_gap(home: Home, gone: int) -> None:
    conn = _raw(home)
    try:
        with conn:
            conn.execute("DELETE FROM audit_records WHERE seq = ?", (gone,))
            for seq in range(gone + 1, N):
                conn.execute("UPDATE audit_records SET seq = ? WHERE seq = ?", (seq - 1, seq))
    finally:
        conn.close()


EDITED = json.dumps({"decision_id": "d5", "outcome": "rejected"}).encode()
FORGED = "sha256:" + "f" * 64


def _set5(column: str, value: object) -> Callable[[Home], None]:
    return lambda h: _sql(h, f"UPDATE audit_records SET {column} = ? WHERE seq = 5", args=(value,))


def _run(*statements: str) -> Callable[[Home], None]:
    return lambda h: _sql(h, *statements)


TAMPERS: dict[str, tuple[Callable[[Home], None], str, int]] = {
    "edit-payload": (_set5("payload", EDITED), "payload-hash-mismatch", 5),
    "edit-recorded-at": (_set5("recorded_at", T1), "record-hash-mismatch", 5),
    "edit-record-hash": (_set5("record_hash", FORGED), "record-hash-mismatch", 5),
    "edit-payload-hash": (_set5("payload_hash", FORGED), "payload-hash-mismatch", 5),
    "edit-prev-hash": (_set5("prev_hash", FORGED), "prev-hash-mismatch", 5),
    "payload-not-json": (_set5("payload", b"\x00\xff"), "unparseable-record", 5),
    "delete-middle-row": (_run("DELETE FROM audit_records WHERE seq = 5"), "seq-gap", 5),
    "delete-first-row": (_run("DELETE FROM audit_records WHERE seq = 0"), "seq-gap", 0),
    "swap-two-rows": (lambda h: _swap(h, 4, 8), "prev-hash-mismatch", 4),
    "renumber-shift": (
        _run("UPDATE audit_records SET seq = seq + 100 WHERE seq >= 5"),
        "seq-gap",
        5,
    ),
    "renumber-all": (_run("UPDATE audit_records SET seq = seq + 1000"), "seq-gap", 0),
    "renumber-close-gap": (lambda h: _close_gap(h, 5), "prev-hash-mismatch", 5),
}


@pytest.mark.parametrize("name", list(TAMPERS), ids=list(TAMPERS))
def test_tamper_matrix_names_exact_reason_and_seq(home: Home, log: AuditLog, name: str) -> None:
    assert log.verify()
    tamper, reason, seq = TAMPERS[name]
    tamper(home)
    result = _verify(home)
    assert (result.ok, result.reason, result.first_broken_seq) == (False, reason, seq), result
    assert result.records_checked == seq


def test_truncated_tail_is_only_caught_with_a_checkpoint(
    home: Home, log: AuditLog, tmp_path: Path
) -> None:
    exported = tmp_path / "cp.txt"
    log.checkpoint(export_to=exported)
    _sql(home, "DELETE FROM audit_records WHERE seq >= 9")
    _sql(home, "DELETE FROM audit_checkpoints")  # a careful attacker removes the stored ones too
    assert _verify(home).ok  # undetected without a checkpoint
    result = _verify(home, read_checkpoint(exported))
    assert (result.ok, result.reason, result.first_broken_seq) == (
        False,
        "truncated-below-checkpoint",
        9,
    )
    assert result.records_checked == 9


def test_stored_checkpoints_catch_a_careless_truncation(home: Home, log: AuditLog) -> None:
    log.checkpoint()
    _sql(home, "DELETE FROM audit_records WHERE seq >= 10")
    result = _verify(home)
    assert (result.reason, result.first_broken_seq) == ("truncated-below-checkpoint", 10)
    assert _verify(home, stored=False).ok


def test_truncate_then_regrow_is_caught_at_the_checkpoint_size(
    home: Home, log: AuditLog, tmp_path: Path
) -> None:
    cp = log.checkpoint()
    _sql(home, "DELETE FROM audit_records WHERE seq >= 6", "DELETE FROM audit_checkpoints")
    with AuditLog.open(home) as again:
        again.append_many([{"rewritten": i} for i in range(8)], recorded_at=T1)
        assert again.verify().ok
    result = _verify(home, cp)
    assert (result.reason, result.first_broken_seq) == ("truncated-below-checkpoint", N - 1)


def _forge(
    cp: Checkpoint,
    key: signing.PrivateKey,
    key_hash: bytes | None = None,
    extensions: tuple[str, ...] = (),
) -> Checkpoint:
    bare = Checkpoint(origin=cp.origin, size=cp.size, head_hash=cp.head_hash, extensions=extensions)
    khash = key_hash or note_key_hash(cp.origin, key.public_key.raw)
    return bare.with_signature(
        NoteSignature(name=cp.origin, key_hash=khash, signature=key.sign(bare.body))
    )


def test_checkpoint_forged_with_another_key_is_refused(home: Home, log: AuditLog) -> None:
    real = log.checkpoint()
    assert _verify(home, real).ok
    other = signing.generate()
    forged = parse_checkpoint(_forge(real, other).to_text())
    result = _verify(home, forged)
    assert (result.ok, result.reason, result.first_broken_seq) == (
        False,
        "checkpoint-signature-invalid",
        None,
    )
    # The same forgery claiming our key's hash fails the signature itself.
    ours = note_key_hash(real.origin, home.public_key().raw)
    result = _verify(home, _forge(real, other, key_hash=ours))
    assert result.reason == "checkpoint-signature-invalid"
    # A checkpoint from another org's log is refused too.
    foreign = _forge(
        Checkpoint(origin="rensei-routing/other/audit", size=N, head_hash=real.head_hash),
        home.private_key(),
    )
    assert _verify(home, foreign).reason == "checkpoint-signature-invalid"


def test_edited_stored_checkpoint_is_reported(home: Home, log: AuditLog) -> None:
    cp = log.checkpoint()
    lying = cp.to_text().replace(f"\n{N}\n", f"\n{N + 5}\n")
    _sql(home, "UPDATE audit_checkpoints SET note = ?", args=(lying,))
    assert _verify(home).reason == "checkpoint-signature-invalid"
    _sql(home, "UPDATE audit_checkpoints SET note = 'garbage'")
    assert _verify(home).reason == "checkpoint-signature-invalid"


def test_checkpoint_refuses_to_vouch_for_a_broken_log(home: Home, log: AuditLog) -> None:
    _sql(home, f"UPDATE audit_records SET recorded_at = '{T1}' WHERE seq = 3")
    with AuditLog.open(home) as fresh, pytest.raises(AuditError, match="seq 3"):
        fresh.checkpoint()


def _checkpoint_rows(home: Home) -> list[tuple[object, ...]]:
    conn = _raw(home)
    try:
        return [tuple(r) for r in conn.execute("SELECT * FROM audit_checkpoints ORDER BY id")]
    finally:
        conn.close()


def _edit_one_byte(home: Home, seq: int) -> None:
    """Change one digit of a stored payload: still JSON, so its hash is what breaks."""
    conn = _raw(home)
    try:
        with conn:
            (stored,) = conn.execute(
                "SELECT payload FROM audit_records WHERE seq = ?", (seq,)
            ).fetchone()
            data = Codec.load(conn).inflate(stored)  # the canonical bytes, however stored
            edited = data.replace(f'"d{seq}"'.encode(), b'"d9"', 1)
            assert len(edited) == len(data) and edited != data
            conn.execute("UPDATE audit_records SET payload = ? WHERE seq = ?", (edited, seq))
    finally:
        conn.close()


def _temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_checkpoint_verifies_below_the_latest_checkpoint(
    home: Home, log: AuditLog, tmp_path: Path
) -> None:
    log.checkpoint()
    stored = _checkpoint_rows(home)
    _edit_one_byte(home, 1)
    broken = _verify(home)
    assert (broken.reason, broken.first_broken_seq) == ("payload-hash-mismatch", 1)
    note = tmp_path / "cp.txt"
    with (
        AuditLog.open(home) as fresh,
        pytest.raises(AuditError, match=r"seq 1: payload-hash-mismatch"),
    ):
        fresh.checkpoint(export_to=note)
    assert _checkpoint_rows(home) == stored
    assert not note.exists() and _temp_files(tmp_path) == []


@pytest.mark.parametrize("name", list(TAMPERS), ids=list(TAMPERS))
def test_checkpoint_refuses_exactly_where_verify_reports(
    home: Home, log: AuditLog, name: str
) -> None:
    log.checkpoint()
    log.append_many([{"more": i} for i in range(3)], recorded_at=T1)
    stored = _checkpoint_rows(home)
    TAMPERS[name][0](home)
    result = _verify(home)
    assert not result
    with AuditLog.open(home) as fresh, pytest.raises(AuditError) as info:
        fresh.checkpoint()
    assert f"seq {result.first_broken_seq}: {result.reason}" in str(info.value)
    assert _checkpoint_rows(home) == stored


@pytest.mark.parametrize("note", ["garbage", "forged"])
def test_checkpoint_refuses_when_a_stored_checkpoint_fails(
    home: Home, log: AuditLog, note: str
) -> None:
    cp = log.checkpoint()
    text = "garbage" if note == "garbage" else _forge(cp, signing.generate()).to_text()
    _sql(home, "UPDATE audit_checkpoints SET note = ?", args=(text,))
    stored = _checkpoint_rows(home)
    assert _verify(home).reason == "checkpoint-signature-invalid"
    with (
        AuditLog.open(home) as fresh,
        pytest.raises(AuditError, match="a stored checkpoint: checkpoint-signature-invalid"),
    ):
        fresh.checkpoint()
    assert _checkpoint_rows(home) == stored


def test_checkpoint_refuses_a_signing_key_that_is_not_the_log_key(
    home: Home, log: AuditLog
) -> None:
    with (
        AuditLog(
            home.db_path,
            origin=log.origin,
            public_key=home.public_key(),
            private_key=signing.generate(),
        ) as other,
        pytest.raises(AuditError, match="signing key does not match"),
    ):
        other.checkpoint()
    assert _checkpoint_rows(home) == []


def test_failed_export_stores_nothing(home: Home, log: AuditLog, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "cp.txt"
    with pytest.raises(AuditError, match=r"cannot export the checkpoint to .*no/such/cp\.txt"):
        log.checkpoint(export_to=missing)
    assert _checkpoint_rows(home) == [] and not missing.parent.exists()

    # The temporary file is written; the rename over a directory fails inside the transaction.
    target = tmp_path / "a-directory"
    target.mkdir()
    with pytest.raises(AuditError, match="a-directory"):
        log.checkpoint(export_to=target)
    assert _checkpoint_rows(home) == []
    assert target.is_dir() and list(target.iterdir()) == [] and _temp_files(tmp_path) == []
    assert _verify(home).checkpoints_checked == 0


def test_failed_store_leaves_no_export(home: Home, log: AuditLog, tmp_path: Path) -> None:
    _sql(
        home,
        "CREATE TRIGGER no_checkpoints BEFORE INSERT ON audit_checkpoints "
        "BEGIN SELECT RAISE(ABORT, 'checkpoint refused'); END",
    )
    note = tmp_path / "cp.txt"
    with pytest.raises(StoreError, match="checkpoint refused"):
        log.checkpoint(export_to=note)
    assert not note.exists() and _temp_files(tmp_path) == []
    assert _checkpoint_rows(home) == []


def test_export_replaces_an_older_note_atomically(
    home: Home, log: AuditLog, tmp_path: Path
) -> None:
    note = tmp_path / "cp.txt"
    first = log.checkpoint(export_to=note)
    log.append_many([{"more": 1}], recorded_at=T1)
    second = log.checkpoint(export_to=note)
    assert read_checkpoint(note) == second and second.size == first.size + 1
    assert _temp_files(tmp_path) == []
    assert [row[1] for row in _checkpoint_rows(home)] == [N, N + 1]


def test_checkpoints_are_incremental_and_cover_what_was_verified(home: Home, log: AuditLog) -> None:
    first = log.checkpoint()
    log.append_many([{"more": i} for i in range(3)], recorded_at=T1)
    second = log.checkpoint()
    assert (first.size, second.size) == (N, N + 3)
    assert chain_head(second) == log.head()[1]  # the tree-root form names the head too
    assert second.head_hash == "sha256:" + log.tree_root(N + 3).hex()
    assert form(second) == form(first) == "tree-root"
    assert [c.size for c in log.checkpoints()] == [N, N + 3]
    assert log.verify().checkpoints_checked == 2


def test_checkpoint_files(tmp_path: Path, log: AuditLog) -> None:
    path = tmp_path / "cp.txt"
    cp = log.checkpoint(export_to=path)
    assert read_checkpoint(path) == cp
    path.write_text("not a checkpoint\n")
    with pytest.raises(CheckpointFormatError, match=r"cp\.txt"):
        read_checkpoint(path)
    with pytest.raises(InputError):
        read_checkpoint(tmp_path / "absent.txt")
    with pytest.raises(AuditError, match=r"no/such/dir\.txt"):
        log.checkpoint(export_to=tmp_path / "no" / "such" / "dir.txt")


def test_log_without_keys_verifies_but_cannot_checkpoint(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "bare.db", origin="rensei-routing/x/audit") as bare:
        bare.append({"a": 1}, recorded_at=T0)
        assert bare.verify()
        with pytest.raises(AuditError):
            bare.checkpoint()


# -- redaction on disk --------------------------------------------------------------------------


def _database_bytes(home: Home) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(home.path.glob("rensei.db*")))


def test_no_credential_reaches_the_database_files(home: Home) -> None:
    with AuditLog.open(home) as audit:
        for name, text, _secret, _label in CREDENTIALS:
            audit.append(
                {"case": name, "ctx": {"env": [{"value": f"x {text} y"}]}, "nested": [[text]]},
                recorded_at=T0,
            )
        audit.append_many(
            [{"batch": [{"deep": {"deeper": text}}]} for _n, text, _s, _l in CREDENTIALS],
            recorded_at=T1,
        )
        assert audit.verify().records_checked == 2 * len(CREDENTIALS)
        stored = [audit.get(i).payload for i in range(len(CREDENTIALS))]
    on_disk = _database_bytes(home)
    assert (home.path / "rensei.db-wal").exists() or len(on_disk) > 0
    for (_name, _text, secret, label), payload in zip(CREDENTIALS, stored, strict=True):
        assert secret.encode() not in on_disk, label
        assert f"[REDACTED:{label}]" in json.dumps(payload)


@pytest.mark.parametrize(("name", "text", "secret", "label"), CREDENTIALS, ids=IDS)
def test_each_credential_kind_alone_stays_off_disk(
    home: Home, name: str, text: str, secret: str, label: str
) -> None:
    with AuditLog.open(home) as audit:
        record = audit.append({"k": {"v": [text]}}, recorded_at=T0)
        assert audit.verify()
    assert secret.encode() not in _database_bytes(home)
    (stored,) = record.payload["k"]["v"]
    assert f"[REDACTED:{label}]" in stored and secret not in stored


# -- a record must parse, even with its hashes recomputed ---------------------------------------


def _rewrite(
    home: Home, seq: int, *, payload: bytes | None = None, stamp: str | None = None
) -> None:
    """Edit record ``seq`` and recompute every hash from it to the head, as an attacker who can
    write the database would for a tail no checkpoint pins yet."""
    conn = _raw(home)
    try:
        with conn:
            cols = "seq, recorded_at, prev_hash, payload"
            rows = list(
                conn.execute(
                    f"SELECT {cols} FROM audit_records WHERE seq >= ? ORDER BY seq", (seq,)
                )
            )
            prev = rows[0][2]
            inflate = Codec.load(conn).inflate  # the canonical bytes, however stored
            for s, at, _, stored in rows:
                data = inflate(stored)
                if s == seq:
                    at = stamp if stamp is not None else at
                    data = payload if payload is not None else data
                p_hash = payload_hash(bytes(data))
                r_hash = record_hash(s, prev, at, p_hash)
                conn.execute(
                    "UPDATE audit_records SET recorded_at = ?, prev_hash = ?, payload = ?, "
                    "payload_hash = ?, record_hash = ? WHERE seq = ?",
                    (at, prev, data, p_hash, r_hash, s),
                )
                prev = r_hash
    finally:
        conn.close()


UNPARSEABLE_PAYLOADS = {
    "not-utf8": b'{"a":"\xff"}',
    "not-json": b'{"decision_id": "d5"',
    "trailing-garbage": b'{"a":1} {"b":2}',
    "duplicate-key": b'{"outcome":"selected","outcome":"rejected"}',
    "nested-duplicate-key": b'{"e":[{"k":1,"k":1}]}',
    "nan": b'{"a":NaN}',
    "infinity": b'{"a":[-Infinity]}',
    "utf16": '{"a":1}'.encode("utf-16"),
    "too-deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize(
    "payload", list(UNPARSEABLE_PAYLOADS.values()), ids=list(UNPARSEABLE_PAYLOADS)
)
def test_a_rehashed_unparseable_payload_fails_verify_and_checkpoint(
    home: Home, log: AuditLog, payload: bytes
) -> None:
    _rewrite(home, 5, payload=payload)
    result = _verify(home)
    assert (result.reason, result.first_broken_seq, result.records_checked) == (
        "unparseable-record",
        5,
        5,
    ), result
    assert "\n" not in result.detail
    with AuditLog.open(home) as fresh:
        with pytest.raises(AuditError, match="seq 5: unparseable-record"):
            fresh.checkpoint()
        record = fresh.get(5)  # show and tail say the same as verify
    assert record.payload_error is not None and record.to_dict()["payload"] is None
    assert _checkpoint_rows(home) == []


@pytest.mark.parametrize(
    "stamp",
    [
        "2025-03-01 12:00:00Z",
        "2025-03-01T12:00:00+00:00",
        "2025-02-30T12:00:00Z",
        "2025-03-01T12:00:00.1234567Z",
        "yesterday",
        "",
        "2025-03-01T12:00:00Z\n",
    ],
)
def test_a_rehashed_bad_timestamp_fails_verify_and_checkpoint(
    home: Home, log: AuditLog, stamp: str
) -> None:
    _rewrite(home, 7, stamp=stamp)
    result = _verify(home)
    assert (result.reason, result.first_broken_seq) == ("unparseable-record", 7), result
    assert "recorded_at" in result.detail
    with AuditLog.open(home) as fresh, pytest.raises(AuditError, match="seq 7: unparseable"):
        fresh.checkpoint()
    assert _checkpoint_rows(home) == []


def test_a_rehashed_valid_edit_still_verifies(home: Home, log: AuditLog) -> None:
    """The control: what the checks above refuse is the form, not the recomputed hashes."""
    _rewrite(home, 5, payload=b'{"a":1}', stamp="2030-01-01T00:00:00Z")
    assert _verify(home)


# -- the parse is spared below a checkpoint made by checkpoint() ---------------------------------


def _record_rows(home: Home) -> list[tuple[object, ...]]:
    conn = _raw(home)
    try:
        return [tuple(r) for r in conn.execute("SELECT * FROM audit_records ORDER BY seq")]
    finally:
        conn.close()


@pytest.mark.parametrize(
    "payload", list(UNPARSEABLE_PAYLOADS.values()), ids=list(UNPARSEABLE_PAYLOADS)
)
def test_a_rehashed_unparseable_payload_below_a_checkpoint_is_named(
    home: Home, log: AuditLog, payload: bytes
) -> None:
    """Below a checkpoint the first walk does not parse: the rewritten record shows there only
    as a mismatch with the checkpoint, and the strict second walk names it."""
    cp = log.checkpoint()
    assert cp.extensions == (STRICT_PAYLOADS, HEAD_LINE + log.head()[1])
    log.append_many([{"more": i} for i in range(3)], recorded_at=T1)
    _rewrite(home, 5, payload=payload)
    before = _record_rows(home)
    result = _verify(home)
    assert (result.reason, result.first_broken_seq, result.records_checked) == (
        "unparseable-record",
        5,
        5,
    ), result
    assert "payload is not JSON" in result.detail
    assert _verify(home, stored=False) == result  # what a walk with nothing pinned reports
    with (
        AuditLog.open(home) as fresh,
        pytest.raises(AuditError, match="seq 5: unparseable-record"),
    ):
        fresh.checkpoint()
    assert _record_rows(home) == before  # verify and checkpoint only read
    assert len(_checkpoint_rows(home)) == 1


def test_a_rehashed_bad_timestamp_below_a_checkpoint_is_named(home: Home, log: AuditLog) -> None:
    log.checkpoint()
    _rewrite(home, 7, stamp="2025-03-01T12:00:00+00:00")
    result = _verify(home)
    assert (result.reason, result.first_broken_seq) == ("unparseable-record", 7), result
    assert "recorded_at" in result.detail


def test_a_checkpoint_without_the_strict_line_spares_no_parse(home: Home, log: AuditLog) -> None:
    """A release before the line signed without parsing: its notes vouch for hashes only."""
    _rewrite(home, 5, payload=b'{"outcome":"selected","outcome":"rejected"}')
    size, head = log.head()
    bare = Checkpoint(origin=log.origin, size=size, head_hash=head)
    old = _forge(bare, home.private_key())
    assert "payloads:" not in old.to_text()
    result = _verify(home, old)
    assert (result.reason, result.first_broken_seq) == ("unparseable-record", 5), result
    _sql(
        home,
        "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)",
        args=(size, head, old.to_text()),
    )
    result = _verify(home)
    assert (result.reason, result.first_broken_seq) == ("unparseable-record", 5), result
    # The same note with the line is its signer's word that it parsed them, and is taken: the
    # parse is spared (which is what makes verify fast; who may say so is the key's holder).
    strict = _forge(bare, home.private_key(), extensions=(STRICT_PAYLOADS,))
    assert _verify(home, strict, stored=False).ok


def test_a_strict_note_that_fails_its_signature_spares_no_parse(home: Home, log: AuditLog) -> None:
    _rewrite(home, 5, payload=b'{"a":NaN}')
    size, head = log.head()
    bare = Checkpoint(origin=log.origin, size=size, head_hash=head)
    ours = note_key_hash(log.origin, home.public_key().raw)
    forged = _forge(bare, signing.generate(), key_hash=ours, extensions=(STRICT_PAYLOADS,))
    result = _verify(home, forged)
    assert (result.reason, result.first_broken_seq) == ("checkpoint-signature-invalid", None)
    # the line is covered by the signature: added to a signed note, the note fails
    old = _forge(bare, home.private_key())
    added = Checkpoint(
        origin=old.origin,
        size=size,
        head_hash=head,
        extensions=(STRICT_PAYLOADS,),
        signatures=old.signatures,
    )
    assert _verify(home, added).reason == "checkpoint-signature-invalid"
    _sql(
        home,
        "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)",
        args=(size, head, added.to_text()),
    )
    assert _verify(home).reason == "checkpoint-signature-invalid"


def test_checkpoint_and_verify_parse_only_past_the_latest_checkpoint(
    home: Home, log: AuditLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[bytes] = []
    strict = _parse.is_strict_json

    def counting(data: bytes) -> bool:  # the walk's strict parse of one payload
        parsed.append(data)
        return strict(data)

    monkeypatch.setattr(_parse, "is_strict_json", counting)
    note = tmp_path / "cp.txt"
    first = log.checkpoint(export_to=note)
    assert len(parsed) == N
    assert note.read_text("utf-8").split("\n")[3] == "payloads: strict-json"
    assert read_checkpoint(note) == first
    log.append_many([{"more": i} for i in range(3)], recorded_at=T1)
    parsed.clear()
    assert _verify(home) and len(parsed) == 3
    parsed.clear()
    second = log.checkpoint()
    assert second.size == N + 3 and len(parsed) == 3
    parsed.clear()
    assert _verify(home) and parsed == []
    assert _verify(home, stored=False) and len(parsed) == N + 3  # nothing pinned: all parsed
    parsed.clear()
    assert _verify(home, first, stored=False) and len(parsed) == 3  # an exported note pins too


def test_export_to_the_database_is_refused_by_the_library_too(home: Home, log: AuditLog) -> None:
    before = log.count()
    for target in (home.db_path, home.private_key_path, home.path / "x.note"):
        with pytest.raises(AuditError, match="inside the home"):
            log.checkpoint(export_to=target)
    assert home.private_key_path.read_text().startswith("ed25519-private:")
    assert log.count() == before and _checkpoint_rows(home) == []
    # a log opened on a bare path still protects its database and companions
    with AuditLog(home.db_path, origin=log.origin, private_key=home.private_key) as bare:
        for name in ("rensei.db", "rensei.db-wal", "rensei.db-shm", "rensei.db-journal"):
            with pytest.raises(AuditError, match="refusing to export"):
                bare.checkpoint(export_to=home.path / name)


@pytest.mark.parametrize(
    "repo",
    [
        "AKIAQWERTYUIOP123456/widgets",
        "AKIAQWERTYUIOP123456-widgets",
        {"value": "ASIAZXCVBNMLKJHGFDSA/x"},
    ],
    ids=["canonical", "runtime-slug", "object"],
)
def test_a_credential_in_the_repo_is_redacted_though_the_repo_is_lowercased(
    home: Home, repo: object
) -> None:
    """The context lowercases the repo before it is recorded; redaction must still see the key
    (and ``.upper()`` must not restore it from the stored bytes)."""
    ctx = RouteContext.from_dict({"repo": repo, "principal_id": "implementer"})
    assert ctx.repo is not None and ctx.repo.value == ctx.repo.value.lower()
    decision = explain(ctx, PolicySnapshot.empty())
    with AuditLog.open(home) as audit:
        audit.append_many([decision], recorded_at=T0)
        stored = audit.get(0).payload
    on_disk = _database_bytes(home)
    for key in (b"QWERTYUIOP123456", b"ZXCVBNMLKJHGFDSA"):
        assert key not in on_disk.upper()
    assert stored["explanation"]["context"]["repo"]["value"].startswith(
        "[REDACTED:aws-access-key-id]"
    )


# -- stored decisions read back, redaction markers and all -----------------------------------

GHP = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s"


def _redacted_context() -> dict[str, object]:
    many = ";".join(f"password=p{i}" for i in range(20))  # 20 short secrets: grows 10x
    return {
        "repo": f"{GHP}/widgets",
        "principal_id": f"bot token={GHP}",
        "model_requirement": {"kind": "concrete_model", "value": "sk-proj-4f9c2b7e1a0d3c5b8e6f"},
        "accounts": [
            {"account_id": f"acct-{GHP}", "provider_binding": "anthropic"},
            {"account_id": "acct-ghp_" + "Z" * 30, "provider_binding": "anthropic"},
            {"account_id": many, "provider_binding": "zai-harness"},
        ],
        "legacy_route": {
            "provider_binding": "anthropic",
            "account_id": f"acct-{GHP}",
            "model": "password=hunter2",
        },
    }


@pytest.mark.parametrize("repo", [f"{GHP}/widgets", f"{GHP}-widgets"], ids=["canonical", "slug"])
def test_a_redacted_decision_reads_back_exactly(home: Home, repo: str) -> None:
    doc = {**_redacted_context(), "repo": repo}
    anywhere = PolicySnapshot.from_dict([{"id": "anywhere"}])
    decision = explain(RouteContext.from_dict(doc), anywhere, trace="full")
    with AuditLog.open(home) as audit:
        record = audit.append(decision, recorded_at=T0)
    payload = record.payload
    context = payload["explanation"]["context"]
    assert context["repo"]["value"] == "[REDACTED:github-token]" + repo[len(GHP) :].lower()
    ids = [a["account_id"] for a in context["accounts"]]
    assert ids[0] == ids[1] == "acct-[REDACTED:github-token]" and len(ids[2]) > 256
    with pytest.raises(MalformedError):  # input rules still refuse it by default
        RouteDecision.from_dict(payload)
    back = RouteDecision.from_dict(payload, redacted=True)
    assert back.to_dict() == payload
    assert back.canonical() == record.payload_bytes  # byte for byte what was stored
    assert back.explanation.context.repo is not None
    assert back.explanation.context.repo.value == context["repo"]["value"]


def test_read_back_mode_still_refuses_what_is_not_a_decision() -> None:
    doc = {**_redacted_context(), "repo": {"value": "not a repo", "version": "canonical"}}
    decision = explain(RouteContext.from_dict({"repo": "a/b"}), PolicySnapshot.empty())
    payload = decision.to_dict()
    payload["explanation"]["context"] = doc
    with pytest.raises(MalformedError, match=r"repo\.value"):
        RouteDecision.from_dict(payload, redacted=True)
    payload["explanation"]["context"] = {"accounts": [{"account_id": "x" * 300}]}
    with pytest.raises(MalformedError):
        RouteDecision.from_dict(payload, redacted=True)
