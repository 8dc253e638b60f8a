"""The strongest attacker without the key: a middle segment replaced by a coherent forged
chain. Its records are rewritten with their hashes recomputed, every later record re-linked, the
catalogue row edited to the new head and the tree rebuilt from the forged chain by a writer. The
signed seals and tree-root checkpoints still hold the original roots, so verify, doctor and
backup name the first forged record, and verify writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import closing
from pathlib import Path
from typing import Any

import apsw
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import record_hash
from rensei_routing.store.audit import AuditLog, rotation
from rensei_routing.store.audit.segments import segments_dir
from rensei_routing.store.home import Home

T = "2026-12-02T12:00:00.000000Z"


def _run(home: Home, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--no-plugins", "--home", str(home.path), *args])
    assert "Traceback" not in result.output
    return result


def _three_segments(tmp_path: Path) -> Home:
    """Seqs 0..9 and 10..14 sealed, 15..17 live."""
    home = Home(tmp_path / "h")
    home.init(org="acme")
    for lo, hi in ((0, 10), (10, 15), (15, 18)):
        with AuditLog.open(home) as log:
            log.append_many([{"n": i} for i in range(lo, hi)], recorded_at=T)
            if hi < 18:
                assert rotation.rotate(log) is not None
    return home


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(
            "SELECT seq, recorded_at, prev_hash, payload_hash, record_hash, payload "
            "FROM audit_records ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def _rewrite(path: Path, rows: list[tuple[Any, ...]]) -> None:
    os.chmod(path, 0o644)
    conn = apsw.Connection(str(path))
    try:
        with conn:
            for seq, _at, prev, p_hash, r_hash, payload in rows:
                conn.execute(
                    "UPDATE audit_records SET prev_hash = ?, payload_hash = ?, record_hash = ?,"
                    " payload = ? WHERE seq = ?",
                    (prev, p_hash, r_hash, payload, seq),
                )
    finally:
        conn.close()


def _forge(home: Home) -> None:
    segment = segments_dir(home.db_path) / "10-14.db"
    middle, live = _rows(segment), _rows(home.db_path)
    prev = middle[0][2]  # seq 9's hash: the forged chain joins the genuine one there
    forged: list[tuple[Any, ...]] = []
    for seq, at, _, _, _, payload in middle + live:
        if seq < 15:
            payload = json.dumps({"n": seq, "forged": True}, separators=(",", ":")).encode()
        p_hash = "sha256:" + hashlib.sha256(payload).hexdigest()
        r_hash = record_hash(seq, prev, at, p_hash)
        forged.append((seq, at, prev, p_hash, r_hash, payload))
        prev = r_hash
    _rewrite(segment, forged[:5])
    _rewrite(home.db_path, forged[5:])
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            conn.execute(
                "UPDATE audit_segments SET head_hash = ? WHERE first_seq = 10", (forged[4][4],)
            )
            conn.execute("DELETE FROM audit_tree")
    finally:
        conn.close()
    with AuditLog.open(home) as log:
        log.append({"after": "forgery"}, recorded_at=T)  # a writer rebuilds the tree, forged


def _state(home: Home) -> tuple[Any, ...]:
    with closing(home.connect()) as conn:
        return (
            conn.execute("SELECT * FROM audit_segments ORDER BY first_seq").fetchall(),
            conn.execute("SELECT seq, record_hash FROM audit_records ORDER BY seq").fetchall(),
            conn.execute("SELECT * FROM audit_tree ORDER BY chunk").fetchall(),
            conn.execute("SELECT count(*) FROM audit_checkpoints").fetchall(),
            sorted(os.listdir(segments_dir(home.db_path))),
        )


def test_a_middle_segment_replaced_by_a_coherent_forged_chain_is_named(tmp_path: Path) -> None:
    home = _three_segments(tmp_path)
    assert _run(home, "audit", "verify").exit_code == 0
    _forge(home)
    before = _state(home)
    result = _run(home, "audit", "verify", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert 10 <= doc["first_broken_seq"] <= 14, doc
    assert _state(home) == before
    doctor = _run(home, "doctor")
    assert doctor.exit_code != 0 and "audit" in doctor.output
    backup = _run(home, "backup", str(tmp_path / "backup"))
    assert backup.exit_code != 0
    assert not (tmp_path / "backup").exists()
    assert _state(home) == before
