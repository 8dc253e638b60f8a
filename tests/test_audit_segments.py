"""The audit chain cut into segments (issue 21 part 1): ``audit rotate`` seals the live segment
into a read-only, self-contained file and the chain continues from its head; ``audit verify``
walks every segment and checks the seams; ``audit prune`` removes exported segments and keeps
their anchors; every reader reads across segments. Real homes, real SQLite files, real keys."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import GENESIS_HASH
from rensei_routing.errors import HomeError, SegmentError
from rensei_routing.store.audit import AuditLog, attest, rotation
from rensei_routing.store.audit.recovery import catalog_of
from rensei_routing.store.audit.segments import segments_dir
from rensei_routing.store.db import connect
from rensei_routing.store.home import Home

T = "2025-03-01T12:00:00.000000Z"


def _run(runner: CliRunner, home: Path, *args: str) -> Result:
    result = runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])
    assert "Traceback" not in result.output
    return result


def _home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    return home


def _append(home: Home, start: int, stop: int) -> None:
    with AuditLog.open(home) as log:
        log.append_many([{"n": i, "pad": "x" * 40} for i in range(start, stop)], recorded_at=T)


def _rotate(home: Home) -> rotation.Rotation:
    with AuditLog.open(home) as log:
        done = rotation.rotate(log)
    assert done is not None
    return done


def _three_segments(home: Home) -> None:
    """Seqs 0..9 and 10..14 sealed, 15..17 live."""
    _append(home, 0, 10)
    _rotate(home)
    _append(home, 10, 15)
    _rotate(home)
    _append(home, 15, 18)


def _sql(path: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    os.chmod(path, 0o644)
    conn = apsw.Connection(str(path))
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def _state(home: Home) -> tuple[Any, ...]:
    """Everything a refused operation must leave as it was."""
    files = sorted(os.listdir(segments_dir(home.db_path)))
    with closing(home.connect()) as conn:
        rows = conn.execute("SELECT * FROM audit_segments ORDER BY first_seq").fetchall()
        live = conn.execute("SELECT seq, record_hash FROM audit_records ORDER BY seq").fetchall()
    return files, rows, live


# -- rotation -------------------------------------------------------------------------------------


def test_rotate_seals_a_read_only_self_contained_segment_and_the_chain_continues(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    _append(home, 0, 10)
    with AuditLog.open(home) as log:
        log.checkpoint()
        before = [r.record_hash for r in log.records()]
    done = _rotate(home)
    seg = done.segment
    assert (seg.name, seg.first_seq, seg.last_seq, seg.prev_hash) == ("0-9", 0, 9, GENESIS_HASH)
    assert seg.head_hash == before[-1]
    assert done.path == home.path / "audit" / "segments" / "0-9.db"
    assert stat.S_IMODE(os.stat(done.path).st_mode) == 0o444
    with pytest.raises(apsw.ReadOnlyError):  # opened read-only
        conn = connect(done.path, write=False)
        try:
            conn.execute("DELETE FROM audit_records")
        finally:
            conn.close()
    # Self-contained: its records, its checkpoints (the one made before and the seal), the
    # dictionaries; it verifies on its own with the home's key, no home needed.
    alone = AuditLog(done.path, origin="rensei-routing/acme/audit", public_key=home.public_key())
    with alone:
        verdict = alone.verify()
        assert verdict.ok and verdict.records_checked == 10 and verdict.checkpoints_checked == 2
        assert [r.record_hash for r in alone.records()] == before
    with closing(connect(done.path)) as conn:
        assert conn.pragma("journal_mode") == "delete"
        dicts = conn.execute("SELECT id FROM audit_dictionaries").fetchall()
    with closing(home.connect()) as conn:
        assert conn.execute("SELECT id FROM audit_dictionaries").fetchall() == dicts
        assert conn.execute("SELECT count(*) FROM audit_records").get == 0
        assert conn.execute("SELECT count(*) FROM audit_checkpoints").get == 0
    assert sorted(os.listdir(done.path.parent)) == [".lock", "0-9.db"]  # no -wal, -shm, temp
    # The live segment continues the chain: seq 10 links to the sealed head.
    with AuditLog.open(home) as log:
        assert log.head() == (10, seg.head_hash)
        record = log.append({"n": 10}, recorded_at=T)
        assert (record.seq, record.prev_hash) == (10, seg.head_hash)
        assert log.verify().ok


def test_reads_go_across_segments(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    with AuditLog.open(home) as log:
        assert [r.payload["n"] for r in log.records()] == list(range(18))
        assert [r.seq for r in log.records(newest_first=True, batch=4)] == list(range(17, -1, -1))
        assert [r.seq for r in log.records(start=8, stop=16, batch=3)] == list(range(8, 16))
        assert [r.seq for r in log.tail(5)] == [13, 14, 15, 16, 17]
        assert log.get(3).payload["n"] == 3 and log.get(12).payload["n"] == 12
        assert log.count() == 18 and log.head()[0] == 18
        links = list(log.records())
        assert all(b.prev_hash == a.record_hash for a, b in itertools.pairwise(links))


def test_rotating_an_empty_live_segment_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _append(home, 0, 3)
    _rotate(home)
    before = _state(home)
    with AuditLog.open(home) as log, pytest.raises(SegmentError, match="holds no records"):
        rotation.rotate(log)
    refused = _run(runner, home.path, "audit", "rotate")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "holds no records" in refused.stderr
    assert _state(home) == before


def test_a_broken_live_segment_is_not_sealed(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _append(home, 0, 5)
    _sql(home.db_path, "UPDATE audit_records SET recorded_at = ? WHERE seq = 2", (T[:-2] + "1Z",))
    os.chmod(home.db_path, 0o600)
    with AuditLog.open(home) as log, pytest.raises(SegmentError, match="seq 2"):
        rotation.rotate(log)
    assert os.listdir(segments_dir(home.db_path)) == [".lock"]
    with closing(home.connect()) as conn:
        assert conn.execute("SELECT count(*) FROM audit_records").get == 5
        assert conn.execute("SELECT count(*) FROM audit_segments").get == 0


# -- automatic rotation ---------------------------------------------------------------------------


def test_rotation_happens_after_the_write_that_reaches_the_size(tmp_path: Path) -> None:
    home = _home(tmp_path)
    home.config_path.write_text("[audit]\nrotate_at_records = 5\n")
    with AuditLog.open(home) as log:
        for i in range(12):
            log.append({"n": i}, recorded_at=T)
        log.append_many([{"n": i} for i in range(12, 20)], recorded_at=T)  # one batch of 8
        names = [s.name for s in catalog_of(log)]
        assert names == ["0-4", "5-9", "10-19"]  # a batch is never cut: it is sealed whole
        assert [r.payload["n"] for r in log.records()] == list(range(20))
        assert log.verify().ok


def test_the_default_size_and_a_bad_setting(tmp_path: Path) -> None:
    home = _home(tmp_path)
    assert rotation.rotate_at_records(home) == 5_000_000
    home.config_path.write_text("[audit]\nrotate_at_records = 0\n")
    assert rotation.rotate_at_records(home) is None
    for bad in ('"many"', "-1", "true", "1.5"):
        home.config_path.write_text(f"[audit]\nrotate_at_records = {bad}\n")
        with pytest.raises(HomeError, match="rotate_at_records"):
            rotation.rotate_at_records(home)


# -- verify ---------------------------------------------------------------------------------------


def test_verify_reports_every_segment(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    with AuditLog.open(home) as log:
        head = log.head()[1]
    text = _run(runner, home.path, "audit", "verify")
    assert text.exit_code == 0, text.output
    assert text.stdout == (
        f"intact: 18 records in 3 segments, seq 0..17, head {head}, 2 checkpoint(s) checked\n"
    )
    doc = json.loads(_run(runner, home.path, "audit", "verify", "--json").stdout)
    assert (doc["ok"], doc["records_checked"], doc["head_hash"], doc["segments"]) == (
        True,
        18,
        head,
        3,
    )
    assert doc["sealed"] == ["0-9", "10-14"] and doc["anchor"] is None


@pytest.mark.parametrize(
    ("damage", "seq", "reason"),
    [
        ("record", 12, "record-hash-mismatch"),
        ("missing", 10, "truncated-below-checkpoint"),
        ("seal", 10, "segment-unattested"),  # no seal by this host's key covers the row
        ("live-link", 15, "prev-hash-mismatch"),
        ("catalog-link", 10, "prev-hash-mismatch"),
    ],
)
def test_verify_catches_damage_in_and_between_segments(
    tmp_path: Path, runner: CliRunner, damage: str, seq: int | None, reason: str
) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    second = segments_dir(home.db_path) / "10-14.db"
    other = signing.generate()
    if damage == "record":
        _sql(second, "UPDATE audit_records SET recorded_at = ? WHERE seq = 12", (T[:-2] + "1Z",))
    elif damage == "missing":
        os.unlink(second)
    elif damage == "seal":  # a seal re-signed with another key
        with AuditLog.open(home) as log:
            seg = catalog_of(log)[1]
        forged = attest.sign(other, "rensei-routing/acme/audit", 15, seg.head_hash).to_text()
        _sql(home.db_path, "UPDATE audit_segments SET note = ? WHERE first_seq = 10", (forged,))
    elif damage == "live-link":
        _sql(home.db_path, "UPDATE audit_records SET prev_hash = ? WHERE seq = 15", (GENESIS_HASH,))
    else:
        _sql(
            home.db_path, "UPDATE audit_segments SET prev_hash = ? WHERE first_seq = 10",
            (GENESIS_HASH,),
        )  # fmt: skip
    os.chmod(home.db_path, 0o600)
    result = _run(runner, home.path, "audit", "verify", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert (doc["ok"], doc["first_broken_seq"], doc["reason"]) == (False, seq, reason)


# -- prune ----------------------------------------------------------------------------------------


def test_prune_after_export_keeps_the_anchor_and_verify_starts_there(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    export = tmp_path / "all.jsonl"
    assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
    with AuditLog.open(home) as log:
        first, second = catalog_of(log)
        head = log.head()[1]
    pruned = _run(runner, home.path, "audit", "prune", "--before", "15", "--exported", str(export))
    assert pruned.exit_code == 0, pruned.output
    assert "pruned segment(s) 0-9, 10-14 (15 records)" in pruned.stdout
    assert os.listdir(segments_dir(home.db_path)) == [".lock"]
    with AuditLog.open(home) as log:
        kept = catalog_of(log)
        assert [(s.name, s.pruned, s.head_hash) for s in kept] == [
            ("0-9", True, first.head_hash),
            ("10-14", True, second.head_hash),
        ]
        assert kept[0].export_sha256 is not None and kept[0].export_sha256.startswith("sha256:")
        # Each seal is replaced by a prune statement naming its range, link, head and export.
        for seg, was in zip(kept, (first, second), strict=True):
            assert f"rensei-segment: sealed {was.first_seq} {was.last_seq}" in was.note
            assert (
                f"rensei-segment: pruned {seg.first_seq} {seg.last_seq} {seg.prev_hash} "
                f"{seg.export_sha256}\n"
            ) in seg.note
        assert [r.seq for r in log.records()] == [15, 16, 17]
        log.append({"n": 18}, recorded_at=T)
    text = _run(runner, home.path, "audit", "verify")
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("intact: 4 records in 1 segments, seq 15..18, head ")
    assert text.stdout.rstrip().endswith("; anchored at seq 15 (pruned segments 0-9, 10-14)")
    doc = json.loads(_run(runner, home.path, "audit", "verify", "--json").stdout)
    assert doc["first_seq"] == 15 and doc["anchor"]["seq"] == 15
    assert doc["anchor"]["head_hash"] == second.head_hash and doc["records_checked"] == 19
    assert head != doc["head_hash"]
    # An export from below the anchor is refused, not silently shortened.
    below = _run(runner, home.path, "audit", "export", str(tmp_path / "x.jsonl"), "--since", "3")
    assert below.exit_code == 1 and "below the anchor" in below.stderr
    # The anchor is held to its signature: a forged anchor breaks verify.
    forged = attest.sign(signing.generate(), "rensei-routing/acme/audit", 15, second.head_hash)
    _sql(
        home.db_path, "UPDATE audit_segments SET note = ? WHERE first_seq = 10", (forged.to_text(),)
    )
    os.chmod(home.db_path, 0o600)
    broken = json.loads(_run(runner, home.path, "audit", "verify", "--json").stdout)
    assert (broken["ok"], broken["reason"]) == (False, "segment-unattested")
    assert broken["first_broken_seq"] == 10


@pytest.mark.parametrize("case", ["none", "short", "tampered", "other-chain", "nothing-below"])
def test_prune_is_refused_and_deletes_nothing(tmp_path: Path, runner: CliRunner, case: str) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    export = tmp_path / "e.jsonl"
    args = ["--before", "15", "--exported", str(export)]
    if case == "none":
        export = tmp_path / "absent.jsonl"
        args[-1] = str(export)
    elif case == "short":  # holds 0..9 only: segment 10-14 is not in it
        full = tmp_path / "full.jsonl"
        assert _run(runner, home.path, "audit", "export", str(full)).exit_code == 0
        export.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:10]))
    elif case == "tampered":
        assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
        lines = export.read_text().splitlines(keepends=True)
        lines[12] = lines[12].replace('"pad"', '"pAd"')
        export.write_text("".join(lines))
    elif case == "other-chain":  # a chain of its own, not this one
        other = Home(tmp_path / "other")
        other.init(org="acme")
        with AuditLog.open(other) as log:
            log.append_many([{"other": i} for i in range(20)], recorded_at=T)
        assert _run(runner, other.path, "audit", "export", str(export)).exit_code == 0
    else:
        assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
        args[1] = "9"  # no segment lies entirely below seq 9
    before = _state(home)
    result = _run(runner, home.path, "audit", "prune", *args)
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert _state(home) == before
    with AuditLog.open(home) as log, pytest.raises(SegmentError):
        rotation.prune(log, before=int(args[1]), exported=[export])
    assert _state(home) == before
    assert _run(runner, home.path, "audit", "verify").exit_code == 0


# -- readers across segments ----------------------------------------------------------------------


def test_export_covers_every_segment_and_verifies_offline(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    export = tmp_path / "all.jsonl"
    assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert [r["seq"] for r in rows] == list(range(18))
    offline = runner.invoke(cli, ["audit", "verify", "--file", str(export)])
    assert offline.exit_code == 0 and offline.stdout.startswith("intact: 18 records")
    part = tmp_path / "part.jsonl"
    assert _run(runner, home.path, "audit", "export", str(part), "--since", "8").exit_code == 0
    assert [json.loads(x)["seq"] for x in part.read_text().splitlines()] == list(range(8, 18))


def test_backup_and_restore_carry_the_segments(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    with AuditLog.open(home) as log:
        head = log.head()
    backup = tmp_path / "b"
    done = _run(runner, home.path, "backup", str(backup))
    assert done.exit_code == 0, done.output
    assert sorted(os.listdir(backup / "audit" / "segments")) == ["0-9.db", "10-14.db"]
    target = tmp_path / "restored"
    restored = runner.invoke(cli, ["--no-plugins", "--home", str(target), "restore", str(backup)])
    assert restored.exit_code == 0, restored.output
    with AuditLog.open(Home(target)) as log:
        assert log.verify().ok and log.head() == head
        assert [r.seq for r in log.records()] == list(range(18))


@pytest.mark.parametrize("damage", [None, 12, 16])
def test_segments_checked_in_worker_processes_reach_the_one_walks_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: int | None
) -> None:
    from rensei_routing.store import parallel

    monkeypatch.setattr(parallel, "PARALLEL_MIN_RECORDS", 1)  # ranges in workers at any size
    monkeypatch.setattr(parallel, "MIN_RANGE_RECORDS", 2)
    home = _home(tmp_path)
    _three_segments(home)
    if damage is not None:  # in the sealed segment 10-14, or in the live table
        where = segments_dir(home.db_path) / "10-14.db" if damage < 15 else home.db_path
        _sql(
            where, "UPDATE audit_records SET recorded_at = ? WHERE seq = ?", (T[:-2] + "1Z", damage)
        )
        os.chmod(home.db_path, 0o600)
    seen: list[int] = []
    with AuditLog.open(home) as log:
        one = log.verify(workers=1)
        many = log.verify(workers=2, progress=seen.append)
    assert many == one
    if damage is None:  # progress runs up through every segment as one walk's would
        assert seen == sorted(seen) and seen[-1] == 18 and seen[0] <= 10
    assert one.ok is (damage is None) and one.first_broken_seq == damage


def test_newest_first_reads_stop_at_the_anchor(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _three_segments(home)
    export = tmp_path / "all.jsonl"
    assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
    pruned = _run(runner, home.path, "audit", "prune", "--before", "10", "--exported", str(export))
    assert pruned.exit_code == 0, pruned.output  # 0-9 pruned, 10-14 sealed, 15-17 live
    script = (
        "import sys; from pathlib import Path\n"
        "from rensei_routing.store.audit import AuditLog\n"
        "from rensei_routing.store.home import Home\n"
        "with AuditLog.open(Home(Path(sys.argv[1]))) as log:\n"
        "    print([r.seq for r in log.records(newest_first=True, batch=3)])\n"
        "    print([r.seq for r in log.tail(100)], [r.seq for r in log.records(start=3)])\n"
    )
    done = subprocess.run(  # a reader that never ends fails here instead of hanging the suite
        [sys.executable, "-c", script, str(home.path)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        str(list(range(17, 9, -1))),
        f"{list(range(10, 18))} {list(range(10, 18))}",
    ]


def test_doctor_counts_the_seals_as_checkpoints(tmp_path: Path) -> None:
    from rensei_routing.ops.doctor import _chain

    home = _home(tmp_path)
    _three_segments(home)
    check = _chain(home)
    assert (check.status, check.detail) == ("ok", "18 records, 2 checkpoint(s)")
    with AuditLog.open(home) as log:
        assert [c.size for c in log.checkpoints()] == [10, 15]
