"""A home written by the release before issue 11 (schema 2, ``tests/data/v2_home``, made by
``tests/data/make_v2_home.py``) opens, migrates through ``user_version`` and still verifies;
its decision ids and payload hashes are unchanged; new records are stored compressed and the
chain stays one chain. Also: the stored form of a compressed record, and damage to it."""

from __future__ import annotations

import json
import shutil
from contextlib import closing
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.routing.ids import record_decision_id
from rensei_routing.errors import SchemaVersionError
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import ZSTD_MAGIC, Codec
from rensei_routing.store.db import SCHEMA_VERSION, connect
from rensei_routing.store.home import Home

DATA = Path(__file__).resolve().parent / "data"
EXPECTED = json.loads((DATA / "v2_home.expected.json").read_text())
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


@pytest.fixture
def v2(tmp_path: Path) -> Home:
    path = tmp_path / "v2"
    shutil.copytree(DATA / "v2_home", path)
    return Home(path)


def _user_version(home: Home) -> int:
    conn = apsw.Connection(str(home.db_path))
    try:
        value = conn.pragma("user_version")
    finally:
        conn.close()
    assert isinstance(value, int)
    return value


def test_the_kept_home_is_the_old_schema(v2: Home) -> None:
    assert _user_version(v2) == 2 < SCHEMA_VERSION
    with pytest.raises(SchemaVersionError, match="migrate"):
        connect(v2.db_path)  # a reader never migrates


def test_a_v2_home_migrates_and_verifies_with_its_ids_unchanged(v2: Home) -> None:
    closing_conn = connect(v2.db_path, write=True)  # the writer migrates
    closing_conn.close()
    assert _user_version(v2) == SCHEMA_VERSION
    with AuditLog.open(v2) as log:
        result = log.verify()
        assert result, result
        assert result.records_checked == EXPECTED["records"]
        assert result.head_hash == EXPECTED["head_hash"]
        assert result.checkpoints_checked == 1
        records = list(log.records())
    assert [r.payload["decision_id"] for r in records] == EXPECTED["decision_ids"]
    assert [r.payload_hash for r in records] == EXPECTED["payload_hashes"]
    # a decision id computed before this issue is the one computed now, from the record
    assert [record_decision_id(r.payload) for r in records] == EXPECTED["decision_ids"]


def test_new_records_on_a_migrated_home_are_compressed_and_chain_on(
    v2: Home, runner: CliRunner
) -> None:
    home = ["--home", str(v2.path)]
    assert runner.invoke(cli, ["init", *home]).exit_code == 0  # migrates
    batch = runner.invoke(
        cli, ["explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record", *home]
    )
    assert batch.exit_code == 0, batch.output
    assert runner.invoke(cli, ["audit", "verify", *home]).exit_code == 0
    n = EXPECTED["records"]
    with closing(apsw.Connection(str(v2.db_path))) as conn:
        stored = [
            bytes(p) for (p,) in conn.execute("SELECT payload FROM audit_records ORDER BY seq")
        ]
    assert len(stored) == n + 6
    assert not any(p.startswith(ZSTD_MAGIC) for p in stored[:n])  # old rows as they were
    assert all(p.startswith(ZSTD_MAGIC) for p in stored[n:])  # new rows compressed
    shown = runner.invoke(cli, ["audit", "show", str(n), "--json", *home])
    assert json.loads(shown.stdout)["payload"] == json.loads(batch.stdout.splitlines()[0])
    with AuditLog.open(v2) as log:
        record = log.get(n)
    assert Codec({}).inflate(stored[n]) == stored[n]  # no dictionary: left as stored
    assert len(stored[n]) < len(record.payload_bytes) / 3


def test_a_damaged_frame_is_an_unparseable_record(v2: Home, runner: CliRunner) -> None:
    home = ["--home", str(v2.path)]
    runner.invoke(cli, ["init", *home])
    runner.invoke(cli, ["explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record", *home])
    seq = EXPECTED["records"] + 2
    with closing(apsw.Connection(str(v2.db_path))) as conn, conn:
        (data,) = conn.execute("SELECT payload FROM audit_records WHERE seq = ?", (seq,)).fetchone()
        damaged = bytes(data[:-6]) + bytes(6)
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = ?", (damaged, seq))
    with AuditLog.open(v2) as log:
        result = log.verify()
    assert not result
    assert (result.first_broken_seq, result.reason) == (seq, "unparseable-record")


def test_a_frame_declaring_more_than_the_cap_is_not_inflated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import zstandard

    from rensei_routing.store import codec as codec_module

    body = codec_module.shipped_dictionary()
    codec = Codec({zstandard.ZstdCompressionDict(body).dict_id(): body})
    payload = json.dumps({"k": "v" * 500}).encode()
    frame = codec.compress(payload)
    assert frame.startswith(ZSTD_MAGIC) and codec.inflate(frame) == payload
    monkeypatch.setattr(codec_module, "MAX_PAYLOAD_BYTES", len(payload) - 1)
    assert codec.inflate(frame) == frame  # declared size over the cap: left as stored
    plain = zstandard.ZstdCompressor().compress(payload)  # no dictionary this home holds
    assert codec.inflate(plain) == plain
