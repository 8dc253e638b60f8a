"""Issue 29 H2, the forged anchor: a catalogue row of ``audit_segments`` is held to a statement
of its kind signed by the host key (a seal, or a prune statement naming the range, first link,
head and export digest), so one ``INSERT`` or ``UPDATE`` plus a ``DELETE`` can no longer hide a
deleted prefix of the chain from ``audit verify`` (even against a checkpoint kept off the host),
``doctor`` or ``backup``; a ``--checkpoint`` inside a pruned segment is unverifiable (exit 3),
not passed; counts are of the records present; and rows written by the release before are
re-attested only from their records or their export (``tests/data/v8_segments_home``).

Real homes, real rotations (``rotate_at_records``), real exports and prunes, the forgeries
written with apsw straight into ``rensei.db`` as the review did."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.audit.recovery import catalog_of
from rensei_routing.store.audit.segments import segments_dir
from rensei_routing.store.home import Home

T = "2026-12-02T12:00:00.000000Z"
DATA = Path(__file__).resolve().parent / "data"


def _run(runner: CliRunner, home: Path, *args: str) -> Result:
    result = runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])
    assert "Traceback" not in result.output
    return result


def _rotating_home(tmp_path: Path, every: int = 10) -> Home:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text(f"[audit]\nrotate_at_records = {every}\n")
    return home


def _append(home: Home, start: int, stop: int, batch: int = 5) -> None:
    """Records ``start..stop-1`` in batches of ``batch``, each its own write (so the
    automatic rotation seals the live segment after the batch that reaches its size)."""
    with AuditLog.open(home) as log:
        for lo in range(start, stop, batch):
            hi = min(stop, lo + batch)
            log.append_many([{"n": i, "pad": "x" * 40} for i in range(lo, hi)], recorded_at=T)


def _sql(path: Path, sql: str, args: tuple[Any, ...] = ()) -> None:
    conn = apsw.Connection(str(path))
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def _state(home: Home) -> tuple[Any, ...]:
    """What no check may change: the catalogue, the live records, the stored checkpoints and
    every segment file's bytes."""
    conn = apsw.Connection(str(home.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT * FROM audit_segments ORDER BY first_seq").fetchall()
        live = conn.execute("SELECT seq, record_hash FROM audit_records ORDER BY seq").fetchall()
        cps = conn.execute("SELECT size, note FROM audit_checkpoints ORDER BY id").fetchall()
    finally:
        conn.close()
    folder = segments_dir(home.db_path)
    files = sorted(
        (name, hashlib.sha256((folder / name).read_bytes()).hexdigest())
        for name in (os.listdir(folder) if folder.is_dir() else ())
        if name != ".lock"
    )
    return rows, live, cps, files


def _verify(runner: CliRunner, home: Home, *args: str) -> tuple[int, dict[str, Any]]:
    done = _run(runner, home.path, "audit", "verify", "--json", *args)
    return done.exit_code, json.loads(done.stdout)


def _checks_fail(runner: CliRunner, home: Home, tmp_path: Path, seq: int) -> None:
    """``doctor`` fails on the audit chain naming the seq, ``backup`` refuses and leaves no
    target, and neither (nor verify before them) wrote anything."""
    before = _state(home)
    doctor = _run(runner, home.path, "doctor")
    assert doctor.exit_code == 1, doctor.output
    chain = [line for line in doctor.stdout.splitlines() if "audit chain" in line]
    assert len(chain) == 1 and chain[0].startswith("fail")
    assert f"broken at seq {seq}: segment-unattested" in chain[0]
    target = tmp_path / "backup"
    backup = _run(runner, home.path, "backup", str(target))
    assert backup.exit_code == 1, backup.output
    assert backup.stderr == (
        f"Error: the audit chain of {home.path} does not verify (seq {seq}: segment-unattested)\n"
    )
    assert not target.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".backup")] == []
    assert _state(home) == before


# -- the review's two attacks ---------------------------------------------------------------------


def test_a_segment_marked_pruned_without_a_prune_statement_is_a_broken_chain(
    tmp_path: Path, runner: CliRunner
) -> None:
    """fake_prune.sh: the real file of sealed segment 0-9 deleted and its row flipped to pruned
    (no key, no export)."""
    home = _rotating_home(tmp_path)
    _append(home, 0, 5)
    cp = tmp_path / "cp5.txt"  # kept off the host, inside what is then deleted
    assert _run(runner, home.path, "audit", "checkpoint", "-o", str(cp)).exit_code == 0
    _append(home, 5, 33)
    with AuditLog.open(home) as log:
        assert [s.name for s in catalog_of(log)] == ["0-9", "10-19", "20-29"]
    assert _verify(runner, home, "--checkpoint", str(cp))[0] == 0
    os.unlink(segments_dir(home.db_path) / "0-9.db")
    _sql(
        home.db_path,
        "UPDATE audit_segments SET pruned = 1, export_sha256 = 'x' WHERE first_seq = 0",
    )
    before = _state(home)
    for args in ((), ("--checkpoint", str(cp))):
        code, doc = _verify(runner, home, *args)
        assert code == 1
        assert (doc["ok"], doc["first_broken_seq"], doc["reason"]) == (
            False,
            0,
            "segment-unattested",
        )
        assert "segment 0-9 is pruned" in doc["detail"] and "seal" in doc["detail"]
    text = _run(runner, home.path, "audit", "verify")
    assert text.stdout.startswith("broken at seq 0: segment-unattested: ")
    assert text.stderr == "Error: audit log does not verify (seq 0: segment-unattested)\n"
    assert _state(home) == before
    _checks_fail(runner, home, tmp_path, 0)


def test_a_segment_flipped_to_pruned_keeps_its_file_and_is_a_broken_chain(
    tmp_path: Path, runner: CliRunner
) -> None:
    """The flag flipped but the file left: no check (verify's reconciliation included) removes
    the file its records are in; and the chain is broken at the segment's first seq."""
    home = _rotating_home(tmp_path)
    _append(home, 0, 23)
    _sql(
        home.db_path,
        "UPDATE audit_segments SET pruned = 1, export_sha256 = 'x' WHERE first_seq = 10",
    )
    before = _state(home)
    assert "10-19.db" in [name for name, _ in before[3]]
    code, doc = _verify(runner, home)
    assert (code, doc["first_broken_seq"], doc["reason"]) == (1, 10, "segment-unattested")
    with AuditLog.open(home) as log:
        assert not log.verify()
    assert _state(home) == before
    _checks_fail(runner, home, tmp_path, 10)


def _forged_anchor(tmp_path: Path, runner: CliRunner) -> tuple[Home, Path]:
    """fake_anchor.sh on a home never rotated: the stored checkpoint of size 20 copied into a
    new pruned row, every record below it deleted; and an exported checkpoint of size 23."""
    home = Home(tmp_path / "h")
    home.init(org="acme")
    _append(home, 0, 20)
    assert _run(runner, home.path, "audit", "checkpoint").exit_code == 0  # stored, size 20
    _append(home, 20, 23)
    cp = tmp_path / "cp.txt"
    assert _run(runner, home.path, "audit", "checkpoint", "-o", str(cp)).exit_code == 0
    _sql(
        home.db_path,
        "INSERT INTO audit_segments(first_seq, last_seq, prev_hash, head_hash, note, pruned, "
        "export_sha256) SELECT 0, size - 1, 'sha256:' || printf('%064d', 0), head_hash, note, 1, "
        "'none' FROM audit_checkpoints WHERE size = 20",
    )
    _sql(home.db_path, "DELETE FROM audit_records WHERE seq < 20")
    return home, cp


def test_a_stored_checkpoint_cannot_pose_as_an_anchor_on_a_home_never_rotated(
    tmp_path: Path, runner: CliRunner
) -> None:
    home, cp = _forged_anchor(tmp_path, runner)
    before = _state(home)
    for args in ((), ("--checkpoint", str(cp))):
        code, doc = _verify(runner, home, *args)
        assert code == 1
        assert (doc["ok"], doc["first_broken_seq"], doc["reason"]) == (
            False,
            0,
            "segment-unattested",
        )
        assert "states no segment" in doc["detail"]
    with AuditLog.open(home) as log:
        assert not log.verify()
    assert _state(home) == before
    _checks_fail(runner, home, tmp_path, 0)


def test_the_console_shows_the_forged_anchor_as_broken(tmp_path: Path, runner: CliRunner) -> None:
    """The console's verification is the store's (``AuditLog.verify``): broken, not intact."""
    from .console_support import fetch, running_ui, wait_for

    home, _ = _forged_anchor(tmp_path, runner)
    before = _state(home)
    with running_ui(home.path, tmp_path / "ui.log") as base:

        def verified() -> bool:
            return b'chain-status">fail<' in fetch(base + "/")[1]

        wait_for(verified, "the console's verification")
        page = fetch(base + "/")[1].decode()
        assert "failed at seq 0: segment-unattested" in page
    assert _state(home) == before


# -- a genuine prune still verifies; copies of its statement do not -------------------------------


def _pruned_home(tmp_path: Path, runner: CliRunner) -> tuple[Home, Path, Path]:
    """0-9 pruned (genuinely: exported, then ``audit prune``), 10-19 and 20-29 sealed, 30-32
    live; an off-host checkpoint of size 5 (inside 0-9) and of size 10 (at the anchor)."""
    home = _rotating_home(tmp_path)
    _append(home, 0, 5)
    inside = tmp_path / "cp5.txt"
    assert _run(runner, home.path, "audit", "checkpoint", "-o", str(inside)).exit_code == 0
    _append(home, 5, 10)
    edge = tmp_path / "cp10.txt"
    assert _run(runner, home.path, "audit", "checkpoint", "-o", str(edge)).exit_code == 0
    _append(home, 10, 33)
    export = tmp_path / "all.jsonl"
    assert _run(runner, home.path, "audit", "export", str(export)).exit_code == 0
    pruned = _run(runner, home.path, "audit", "prune", "--before", "10", "--exported", str(export))
    assert pruned.exit_code == 0, pruned.output
    return home, inside, edge


def test_a_genuine_prune_verifies_anchored_and_every_count_is_of_records_present(
    tmp_path: Path, runner: CliRunner
) -> None:
    home, _, edge = _pruned_home(tmp_path, runner)
    text = _run(runner, home.path, "audit", "verify", "--checkpoint", str(edge))
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("intact: 23 records in 3 segments, seq 10..32, head ")
    assert text.stdout.rstrip().endswith("; anchored at seq 10 (pruned segments 0-9)")
    code, doc = _verify(runner, home, "--checkpoint", str(edge))
    assert (code, doc["records_present"], doc["first_seq"], doc["unverifiable"]) == (0, 23, 10, [])
    doctor = _run(runner, home.path, "doctor")
    chain = next(ln for ln in doctor.stdout.splitlines() if "audit chain" in ln)
    assert chain.split(None, 3)[3].startswith("23 records, ")
    backup = _run(runner, home.path, "backup", str(tmp_path / "b"))
    assert backup.exit_code == 0, backup.output
    assert ": 23 audit records (head " in backup.output
    manifest = json.loads((tmp_path / "b" / "rensei-backup.json").read_text())
    assert manifest["records"] == 23
    restored = runner.invoke(
        cli, ["--no-plugins", "--home", str(tmp_path / "r"), "restore", str(tmp_path / "b")]
    )
    assert restored.exit_code == 0, restored.output


def test_the_console_counts_the_records_present_after_a_genuine_prune(
    tmp_path: Path, runner: CliRunner
) -> None:
    """The overview's record count and its "N record(s) verified" are of the 23 records held
    (seq 10..32), not the next seq (33)."""
    from .console_support import fetch, running_ui, wait_for

    home, _, _ = _pruned_home(tmp_path, runner)
    with running_ui(home.path, tmp_path / "ui.log") as base:

        def verified() -> bool:
            return b'chain-status">ok<' in fetch(base + "/")[1]

        wait_for(verified, "the console's verification")
        page = fetch(base + "/")[1].decode()
    assert '<span id="chain-records">23</span> (seq 10..32: the records below were pruned' in page
    assert "23 record(s) verified at " in page
    assert "33 record(s)" not in page


def test_a_checkpoint_inside_a_pruned_segment_is_unverifiable_not_passed(
    tmp_path: Path, runner: CliRunner
) -> None:
    home, inside, _ = _pruned_home(tmp_path, runner)
    before = _state(home)
    text = _run(runner, home.path, "audit", "verify", "--checkpoint", str(inside))
    assert text.exit_code == 3, text.output
    assert text.stdout.startswith("intact: 23 records in 3 segments")  # what was proved
    assert text.stderr.count("\n") == 1
    assert text.stderr.startswith(
        "Error: could not verify the checkpoint of size 5: it lies inside pruned segment 0-9"
    )
    code, doc = _verify(runner, home, "--checkpoint", str(inside))
    assert (code, doc["ok"], doc["unverifiable"]) == (3, True, [{"size": 5, "segment": "0-9"}])
    # not counted among the checkpoints checked: the count is the plain verify's
    assert doc["checkpoints_checked"] == _verify(runner, home)[1]["checkpoints_checked"]
    # A backup asked to hold the copy to it refuses rather than pass it on its signature.
    from rensei_routing.errors import BackupError
    from rensei_routing.ops.backup import verify_home
    from rensei_routing.store.notes import read_checkpoint

    with pytest.raises(BackupError, match="inside pruned segment 0-9"):
        verify_home(home, created_at=T, source="x", checkpoints=[read_checkpoint(inside)])
    assert _state(home) == before


def _genuine(home: Home) -> dict[str, Any]:
    with AuditLog.open(home) as log:
        return {s.name: s for s in catalog_of(log)}


@pytest.mark.parametrize("forgery", ["digest", "copied-to-next", "widened", "seal-as-prune"])
def test_a_prune_statement_covers_only_its_own_range_and_export(
    tmp_path: Path, runner: CliRunner, forgery: str
) -> None:
    home, _, _ = _pruned_home(tmp_path, runner)
    rows = _genuine(home)
    anchor, nxt = rows["0-9"], rows["10-19"]
    assert anchor.pruned and not nxt.pruned
    seq = 10
    if forgery == "digest":  # the anchor's export digest changed
        _sql(
            home.db_path,
            "UPDATE audit_segments SET export_sha256 = ? WHERE first_seq = 0",
            ("sha256:" + "0" * 64,),
        )
        seq = 0
    elif forgery == "copied-to-next":  # 10-19 deleted behind a copy of 0-9's prune statement
        os.unlink(segments_dir(home.db_path) / "10-19.db")
        _sql(
            home.db_path,
            "UPDATE audit_segments SET pruned = 1, export_sha256 = ?, note = ? "
            "WHERE first_seq = 10",
            (anchor.export_sha256, anchor.note),
        )
    elif forgery == "widened":  # 0-9's row stretched over 10-19, whose row and file go
        os.unlink(segments_dir(home.db_path) / "10-19.db")
        _sql(home.db_path, "DELETE FROM audit_segments WHERE first_seq = 10")
        _sql(
            home.db_path,
            "UPDATE audit_segments SET last_seq = 19, head_hash = ? WHERE first_seq = 0",
            (nxt.head_hash,),
        )
        seq = 0
    else:  # 10-19 deleted, its genuine seal left to pose as a prune statement
        os.unlink(segments_dir(home.db_path) / "10-19.db")
        _sql(
            home.db_path,
            "UPDATE audit_segments SET pruned = 1, export_sha256 = ? WHERE first_seq = 10",
            (anchor.export_sha256,),
        )
    before = _state(home)
    code, doc = _verify(runner, home)
    assert code == 1
    assert (doc["ok"], doc["first_broken_seq"], doc["reason"]) == (False, seq, "segment-unattested")
    assert _state(home) == before
    _checks_fail(runner, home, tmp_path, seq)


# -- a home rotated and pruned by the release before ----------------------------------------------


@pytest.fixture
def v8(tmp_path: Path) -> Home:
    path = tmp_path / "v8"
    shutil.copytree(DATA / "v8_segments_home", path)
    # as the release left them (git keeps no modes): a private home, read-only segment files
    for folder in (path, path / "keys"):
        os.chmod(folder, 0o700)
    os.chmod(path / "keys" / "host.key", 0o600)
    for seg in segments_dir(path / "rensei.db").glob("*.db"):
        os.chmod(seg, 0o444)
    home = Home(path)
    home.init()  # a writer migrates it to this release's schema, as the upgrade path says
    return home


def test_rows_of_the_release_before_are_reattested_only_from_their_records_or_export(
    v8: Home, tmp_path: Path, runner: CliRunner
) -> None:
    export = DATA / "v8_segments_home.export.jsonl"
    # Never silently trusted: the old rows carry no statement of their kind.
    code, doc = _verify(runner, v8)
    assert (code, doc["first_broken_seq"], doc["reason"]) == (1, 0, "segment-unattested")
    assert "rensei audit reattest --exported FILE" in doc["detail"]
    # An export that does not hold the pruned segment is refused; nothing is written.
    bad = tmp_path / "bad.jsonl"
    lines = export.read_text().splitlines(keepends=True)
    bad.write_text("".join(lines[:5]))
    before = _state(v8)
    refused = _run(runner, v8.path, "audit", "reattest", "--exported", str(bad))
    assert refused.exit_code == 1 and refused.stderr.count("\n") == 1
    assert "refusing to prune" in refused.stderr or "does not hold" in refused.stderr
    assert _state(v8) == before
    # Without the export: the seals are re-derived from their records; the pruned row waits.
    done = _run(runner, v8.path, "audit", "reattest")
    assert done.exit_code == 1
    assert done.stdout == "re-attested segment(s) 10-14 (sealed), 15-19 (sealed)\n"
    assert done.stderr == (
        "Error: pruned segment(s) 0-9 still need the export that holds them: "
        "rensei audit reattest --exported FILE\n"
    )
    rows = _genuine(v8)
    assert "rensei-segment: sealed 10 14 " in rows["10-14"].note
    assert "rensei-segment:" not in rows["0-9"].note
    code, doc = _verify(runner, v8)
    assert (code, doc["first_broken_seq"], doc["reason"]) == (1, 0, "segment-unattested")
    # With the export: checked as a prune checks it, then signed.
    done = _run(runner, v8.path, "audit", "reattest", "--exported", str(export))
    assert done.exit_code == 0, done.output
    assert done.stdout == "re-attested segment(s) 0-9 (pruned)\n"
    digest = "sha256:" + hashlib.sha256(export.read_bytes()).hexdigest()
    assert _genuine(v8)["0-9"].export_sha256 == digest
    text = _run(runner, v8.path, "audit", "verify")
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("intact: 13 records in 3 segments, seq 10..22, head ")
    assert text.stdout.rstrip().endswith("; anchored at seq 10 (pruned segments 0-9)")
    again = _run(runner, v8.path, "audit", "reattest")
    assert (again.exit_code, again.stdout) == (
        0,
        "nothing to re-attest: every segment carries a statement of its kind\n",
    )
    # The home goes on: a new rotation and a prune of the re-sealed segment verify.
    with AuditLog.open(v8) as log:
        log.append_many([{"n": i} for i in range(23, 26)], recorded_at=T)
    assert _run(runner, v8.path, "audit", "rotate").exit_code == 0
    full = tmp_path / "e.jsonl"
    assert _run(runner, v8.path, "audit", "export", str(full)).exit_code == 0  # from seq 10
    pruned = _run(runner, v8.path, "audit", "prune", "--before", "15", "--exported", str(full))
    assert pruned.exit_code == 0, pruned.output
    assert _verify(runner, v8)[0] == 0


def test_reattest_signs_no_row_it_cannot_check(v8: Home, tmp_path: Path, runner: CliRunner) -> None:
    # A record of an old sealed segment altered: its seal cannot be re-derived.
    seg = segments_dir(v8.db_path) / "15-19.db"
    os.chmod(seg, 0o644)
    _sql(seg, "UPDATE audit_records SET recorded_at = ? WHERE seq = 17", (T[:-2] + "1Z",))
    before = _state(v8)
    refused = _run(runner, v8.path, "audit", "reattest")
    assert refused.exit_code == 1 and refused.stderr.count("\n") == 1
    assert "refusing to re-seal segment 15-19: its records do not verify (seq 17" in refused.stderr
    assert _state(v8) == before
    # A forged row whose note is a checkpoint of another size: nothing can re-derive it.
    os.chmod(seg, 0o644)
    shutil.copyfile(DATA / "v8_segments_home" / "audit" / "segments" / "15-19.db", seg)
    with AuditLog.open(v8) as log:
        other = catalog_of(log)[1].note  # 10-14's old seal: size 15
    _sql(v8.db_path, "UPDATE audit_segments SET note = ? WHERE first_seq = 0", (other,))
    before = _state(v8)
    export = DATA / "v8_segments_home.export.jsonl"
    refused = _run(runner, v8.path, "audit", "reattest", "--exported", str(export))
    assert refused.exit_code == 1 and refused.stderr.count("\n") == 1
    assert "segment 0-9: its note does not end at the segment's head" in refused.stderr
    assert _state(v8) == before
