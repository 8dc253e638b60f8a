"""``rensei fleet ingest`` checks a host's new checkpoint against the one it holds by a
consistency proof (``NAME.consistency`` beside the export, written by ``rensei audit
consistency`` in the host's home), on a real PostgreSQL database and real homes. Two
checkpoints of the host that are not one history are a fork (alarm, host refused, nothing
loaded); a missing or mismatched proof is a plain refusal that marks nothing."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.audit.note import Checkpoint, NoteSignature, note_key_hash
from rensei_routing.core.audit.tlog import parse_add_checkpoint
from rensei_routing.errors import FleetForkError, FleetIngestRefusedError
from rensei_routing.store.home import Home
from rensei_routing.store.notes import read_checkpoint

from .shadow_support import installed_seams
from .test_fleet import export, make_host, ok, record, trust

__all__ = ["installed_seams"]

pytest.importorskip("psycopg")
import psycopg

pytestmark = pytest.mark.usefixtures("installed_seams")


def _state(url: str) -> tuple[Any, ...]:
    """What an ingest may change: the host row, the records held, the alarms."""
    with psycopg.connect(url) as conn:
        host = conn.execute(
            "SELECT size, head_hash, forked_seq, checkpoint FROM fleet_hosts"
        ).fetchall()
        records = conn.execute("SELECT count(*), max(seq) FROM fleet_records").fetchone()
        alarms = conn.execute("SELECT host_id, kind, seq, file FROM fleet_alarms").fetchall()
    return host[0], records, alarms


def _ingest_file(url: str, path: Path) -> Any:
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.ingest import ingest_file

    with connect(url) as conn:
        return ingest_file(conn, path)


def _resigned(home: Path, cp: Checkpoint, root: bytes) -> Checkpoint:
    """``cp`` with another tree root (its chain head line kept), signed by the host's own key:
    what a host that shows two histories signs."""
    key = Home(home).private_key()
    forged = replace(cp, head_hash="sha256:" + root.hex(), signatures=())
    sig = NoteSignature(
        name=cp.origin,
        key_hash=note_key_hash(cp.origin, key.public_key.raw),
        signature=key.sign(forged.body),
    )
    return forged.with_signature(sig)


@pytest.fixture
def host(tmp_path: Path, runner: CliRunner, pg_url: str) -> Path:
    """host-a, trusted, its first export (12 records, a tree-root checkpoint) ingested."""
    home = make_host(runner, tmp_path, "a", 0, 12)
    ok(trust(runner, pg_url, "host-a", home))
    first = export(runner, home, tmp_path / "1" / "a")
    _ingest_file(pg_url, first)
    return home


def test_a_proven_extension_is_ingested_and_its_checkpoint_held(
    host: Path, runner: CliRunner, pg_url: str, tmp_path: Path
) -> None:
    record(runner, host, 100, 4)
    grown = export(runner, host, tmp_path / "2" / "a")
    proof = parse_add_checkpoint(grown.with_suffix(".consistency").read_bytes())
    assert proof.old_size == 12 and proof.checkpoint.size == 16 and proof.proof
    result = _ingest_file(pg_url, grown)
    assert (result.added, result.held) == (4, 16)
    assert _state(pg_url)[0][3] == read_checkpoint(grown.with_suffix(".checkpoint")).to_text()
    # An older export needs no proof: the chain check covers it; the held checkpoint stays.
    older = tmp_path / "1" / "a.jsonl"
    older.with_suffix(".consistency").unlink(missing_ok=True)
    assert _ingest_file(pg_url, older).added == 0
    assert _state(pg_url)[0][3] == read_checkpoint(grown.with_suffix(".checkpoint")).to_text()


@pytest.mark.parametrize("case", ["missing", "other-size", "other-checkpoint", "not-a-proof"])
def test_a_missing_or_mismatched_proof_is_refused_and_marks_nothing(
    case: str, host: Path, runner: CliRunner, pg_url: str, tmp_path: Path
) -> None:
    record(runner, host, 100, 4)
    grown = export(runner, host, tmp_path / "2" / "a")
    proof = grown.with_suffix(".consistency")
    good = proof.read_bytes()
    cp = grown.with_suffix(".checkpoint")
    if case == "missing":
        proof.unlink()
    elif case == "other-size":
        args = ["--home", str(host), "audit", "consistency", "5", str(cp), "-o", str(proof)]
        ok(runner.invoke(cli, args))
    elif case == "other-checkpoint":
        record(runner, host, 200, 1)
        ok(runner.invoke(cli, ["--home", str(host), "audit", "checkpoint"]))
        args = ["--home", str(host), "audit", "consistency", "12", "17", "-o", str(proof)]
        ok(runner.invoke(cli, args))
    else:
        proof.write_bytes(b"old 12\nnot base64\n\n" + cp.read_bytes())
    before = _state(pg_url)
    result = runner.invoke(cli, ["fleet", "ingest", "--to", pg_url, str(grown)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "FORK" not in result.output and "consistency" in result.output
    with pytest.raises(FleetIngestRefusedError) as refused:
        _ingest_file(pg_url, grown)
    assert not isinstance(refused.value, FleetForkError)
    if case in ("missing", "other-size"):
        assert "rensei audit consistency 12 NAME.checkpoint" in str(refused.value)
    assert _state(pg_url) == before
    proof.write_bytes(good)  # the right proof: the same export goes in
    assert _ingest_file(pg_url, grown).added == 4


def test_another_root_at_the_size_held_is_a_fork(host: Path, pg_url: str, tmp_path: Path) -> None:
    cp_file = tmp_path / "1" / "a.checkpoint"
    cp = read_checkpoint(cp_file)
    before = _state(pg_url)
    cp_file.write_text(_resigned(host, cp, hashlib.sha256(b"another tree").digest()).to_text())
    with pytest.raises(FleetForkError) as fork:
        _ingest_file(pg_url, tmp_path / "1" / "a.jsonl")
    assert (fork.value.host_id, fork.value.seq) == ("host-a", 11)
    assert "conflict" in str(fork.value)
    host_row, records, alarms = _state(pg_url)
    assert (host_row[0], host_row[1], host_row[3]) == (before[0][0], before[0][1], before[0][3])
    assert host_row[2] == 11 and records == before[1]
    assert alarms == [("host-a", "fork", 11, str(tmp_path / "1" / "a.jsonl"))]


def test_a_larger_checkpoint_the_proof_does_not_join_is_a_fork(
    host: Path, runner: CliRunner, pg_url: str, tmp_path: Path
) -> None:
    """The host signs a checkpoint of 16 whose root is not its tree's (its chain head line is
    right, so the chain check holds): the real proof from 12 cannot join it."""
    record(runner, host, 100, 4)
    grown = export(runner, host, tmp_path / "2" / "a")
    cp_file, proof_file = grown.with_suffix(".checkpoint"), grown.with_suffix(".consistency")
    forged = _resigned(host, read_checkpoint(cp_file), hashlib.sha256(b"elsewhere").digest())
    cp_file.write_text(forged.to_text())
    body = parse_add_checkpoint(proof_file.read_bytes())
    proof_file.write_text(replace(body, checkpoint=forged).to_text())
    before = _state(pg_url)
    result = runner.invoke(cli, ["fleet", "ingest", "--to", pg_url, str(grown)])
    assert result.exit_code == 1 and "ALARM" in result.output and "Traceback" not in result.output
    host_row, records, alarms = _state(pg_url)
    assert records == before[1] and host_row[:2] == before[0][:2] and host_row[3] == before[0][3]
    assert host_row[2] == 11
    assert alarms == [("host-a", "fork", 11, str(grown))]
    with pytest.raises(FleetIngestRefusedError, match="forked at seq 11"):
        _ingest_file(pg_url, grown)
