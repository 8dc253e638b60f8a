"""Automatic checkpoints on the default write path (issue 21 part 2): after the write
transaction that puts ``[audit] checkpoint_every`` records past the latest checkpoint, the
appending process signs and stores a checkpoint of the head, as ``rensei audit checkpoint``
does; verify uses it; damage below it is still named at its own seq with a single strict
walk's reason; several processes appending store one checkpoint per head. Real homes, real
processes, real keys."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import (
    STRICT_PAYLOADS,
    Checkpoint,
    note_key_hash,
    payload_hash,
    record_hash,
    verify_chain,
)
from rensei_routing.errors import HomeError
from rensei_routing.store.audit import AuditLog, attest, autocheckpoint
from rensei_routing.store.db import connect
from rensei_routing.store.home import Home

T = "2025-03-01T12:00:00.000000Z"

#: A child process: append ``batches`` batches of ``size`` payloads to the home through the
#: default path, each batch its own ``AuditLog.open`` (a fresh process-level log), and print
#: the failures of the automatic checkpoint it noted (none expected).
_CHILD = """
import json, sys
from pathlib import Path
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
home, tag, batches, size = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
errors = []
for b in range(batches):
    with AuditLog.open(Home(home)) as log:
        log.append_many(
            [{"w": tag, "b": b, "i": i, "pad": "x" * 30} for i in range(size)],
            recorded_at="2025-03-01T12:00:00.000000Z",
        )
        if log.auto_checkpoint_error:
            errors.append(log.auto_checkpoint_error)
print(json.dumps(errors))
"""


def _home(tmp_path: Path, every: int | None) -> Home:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    if every is not None:
        home.config_path.write_text(f"[audit]\ncheckpoint_every = {every}\n")
    return home


def _children(home: Home, jobs: list[tuple[str, int, int]]) -> None:
    """Run one child process per job (tag, batches, size) at once; each must succeed."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(home.path), tag, str(n), str(size)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag, n, size in jobs
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out) == [], out


def _stored(home: Home) -> list[tuple[int, str, str]]:
    with closing(connect(home.db_path)) as conn:
        rows = conn.execute("SELECT size, head_hash, note FROM audit_checkpoints ORDER BY size")
        return [(int(s), str(h), str(n)) for s, h, n in rows]


def _hash_at(home: Home, seq: int) -> str:
    with closing(connect(home.db_path)) as conn:
        return str(conn.execute("SELECT record_hash FROM audit_records WHERE seq = ?", (seq,)).get)


def _signature_ok(home: Home, origin: str) -> Any:
    public = home.public_key()

    def ok(cp: Checkpoint) -> bool:
        sig = cp.signature_by(origin, note_key_hash(origin, public.raw))
        return sig is not None and signing.check(public, cp.body, sig)

    return ok


def test_the_setting_defaults_and_refuses_bad_values(tmp_path: Path) -> None:
    home = _home(tmp_path, None)
    assert autocheckpoint.checkpoint_every(home) == autocheckpoint.DEFAULT_CHECKPOINT_EVERY
    home.config_path.write_text("[audit]\ncheckpoint_every = 0\n")
    assert autocheckpoint.checkpoint_every(home) is None
    for bad in ("-1", "1.5", '"many"', "true", str(2**63)):
        home.config_path.write_text(f"[audit]\ncheckpoint_every = {bad}\n")
        with pytest.raises(HomeError, match="checkpoint_every"):
            autocheckpoint.checkpoint_every(home)
        with pytest.raises(HomeError, match="checkpoint_every"):
            AuditLog.open(home)


def test_a_bad_setting_is_a_one_line_cli_error_and_nothing_is_written(tmp_path: Path) -> None:
    home = _home(tmp_path, None)
    home.config_path.write_text("[audit]\ncheckpoint_every = -5\n")
    result = CliRunner().invoke(cli, ["--no-plugins", "--home", str(home.path), "audit", "verify"])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "checkpoint_every" in lines[0]
    assert _stored(home) == []


def test_the_checkpoint_appears_after_the_write_that_reaches_the_threshold(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, 50)
    _children(home, [("a", 2, 20)])  # 40 records: below the threshold
    assert _stored(home) == []
    _children(home, [("a", 1, 20)])  # 60: the batch is never cut, the head is checkpointed
    assert [s for s, _, _ in _stored(home)] == [60]
    _children(home, [("a", 3, 20)])  # 80, 100: 20 and 40 past the latest; 120: 60 past it
    sizes = [s for s, _, _ in _stored(home)]
    assert sizes == [60, 120]
    info = home.info()
    origin = f"rensei-routing/{info.org}/audit"
    key = home.private_key()
    with AuditLog.open(home) as log:
        roots = {size: log.tree_root(size) for size in sizes}
    for size, head, note in _stored(home):
        assert head == _hash_at(home, size - 1)
        # exactly the note `rensei audit checkpoint` signs for that head: the tree's root
        want = attest.sign(key, origin, size, head, STRICT_PAYLOADS, roots[size])
        assert note == want.to_text()
    with AuditLog.open(home) as log:
        result = log.verify()
        assert result.ok and result.records_checked == 120 and result.checkpoints_checked == 2
        assert log.auto_checkpoint_error is None


def test_zero_never_checkpoints_and_a_log_without_a_key_never_tries(tmp_path: Path) -> None:
    home = _home(tmp_path, 0)
    _children(home, [("a", 3, 20)])
    assert _stored(home) == []
    with AuditLog(tmp_path / "bare.db", origin="o", checkpoint_every=5) as log:
        log.append_many([{"i": i} for i in range(20)], recorded_at=T)
        assert log.auto_checkpoint_error is None
    with closing(connect(tmp_path / "bare.db")) as conn:
        assert conn.execute("SELECT count(*) FROM audit_checkpoints").get == 0


def test_verify_uses_it_and_damage_below_it_is_named_as_a_single_walk_names_it(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, 50)
    _children(home, [("a", 4, 20)])  # checkpoint at 60; 20 records past it
    assert [s for s, _, _ in _stored(home)] == [60]
    origin = f"rensei-routing/{home.info().org}/audit"
    cases = (
        ("payload", "UPDATE audit_records SET payload = ? WHERE seq = 17", (b'{"n":1}',)),
        ("not json", "UPDATE audit_records SET payload = ? WHERE seq = 23", (b"\xff\xfe",)),
        ("redated", "UPDATE audit_records SET recorded_at = ? WHERE seq = 31", ("bad",)),
    )
    pristine = home.db_path.read_bytes()
    for _, sql, args in cases:
        home.db_path.write_bytes(pristine)
        with closing(connect(home.db_path, write=True)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute(sql, args)
        with AuditLog.open(home) as log:
            got = log.verify()
            cps = log.checkpoints()
            with closing(connect(home.db_path)) as conn:
                rows = conn.execute(
                    "SELECT seq, recorded_at, prev_hash, payload_hash, record_hash, "
                    "rensei_payload(payload) FROM audit_records ORDER BY seq"
                ).fetchall()
        single = verify_chain(
            rows, checkpoints=cps, origin=origin, signature_ok=_signature_ok(home, origin)
        )  # no rows_again: every payload parsed, one walk
        assert not got.ok and not single.ok
        assert (got.first_broken_seq, got.reason, got.detail) == (
            single.first_broken_seq,
            single.reason,
            single.detail,
        )
        assert got.first_broken_seq in (17, 23, 31)


def test_a_failed_automatic_checkpoint_does_not_fail_the_committed_append(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, 30)
    _children(home, [("a", 1, 20)])
    with closing(connect(home.db_path, write=True)) as conn:  # damage past any checkpoint
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 5", (b'{"a":1,"a":2}',))
    with AuditLog.open(home) as log:
        done = log.append_many([{"i": i} for i in range(20)], recorded_at=T)
        assert done.count == 20 and done.first_seq == 20
        assert log.auto_checkpoint_error is not None
        assert "seq 5" in log.auto_checkpoint_error
        log.append_many([{"i": i} for i in range(20)], recorded_at=T)  # stops trying here
        assert log.count() == 60
    assert _stored(home) == []


def test_the_same_head_is_checkpointed_once(tmp_path: Path) -> None:
    home = _home(tmp_path, 10)
    with AuditLog.open(home) as log:
        log.append_many([{"i": i} for i in range(25)], recorded_at=T)
        assert [s for s, _, _ in _stored(home)] == [25]
        log._checkpointed = 0  # as a second writer that decided on the same head would
        with closing(connect(home.db_path, write=True)) as conn:
            conn.execute("DELETE FROM audit_checkpoints")
        first = autocheckpoint.checkpoint_if_due(log, 25, 10)
        log._checkpointed = 0
        with closing(connect(home.db_path, write=True)) as conn:
            conn.execute(  # a checkpoint of the same size stored meanwhile by the other one
                "INSERT INTO audit_checkpoints(size, head_hash, note) "
                "SELECT size, head_hash, note FROM audit_checkpoints"
            )
            conn.execute(
                "DELETE FROM audit_checkpoints WHERE rowid = (SELECT max(rowid) "
                "FROM audit_checkpoints)"
            )
        again = autocheckpoint.checkpoint_if_due(log, 25, 10)
        assert first is not None and again is None
    assert [s for s, _, _ in _stored(home)] == [25]


def test_concurrent_writers_store_one_checkpoint_per_head_and_the_chain_verifies(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, 40)
    _children(home, [(f"w{k}", 12, 7) for k in range(4)])  # 336 records, 4 processes
    stored = _stored(home)
    sizes = [s for s, _, _ in stored]
    assert sizes and sizes == sorted(set(sizes))  # one checkpoint per head
    for size, head, _ in stored:
        assert head == _hash_at(home, size - 1)
    assert 336 - sizes[-1] < 40 + 3 * 7  # the latest lags the head by at most a few batches
    with AuditLog.open(home) as log:
        result = log.verify()
    assert result.ok and result.records_checked == 336
    assert result.checkpoints_checked == len(stored)


def test_its_own_batches_are_spared_only_while_their_head_is_the_one_it_wrote(
    tmp_path: Path,
) -> None:
    """The appending process need not parse its own canonical batches again, but a batch of
    its own rewritten after the append (non-strict bytes, every hash recomputed after it, as
    an attacker without the key can) no longer ends at the head it wrote: nothing is signed."""
    home = _home(tmp_path, 30)
    with AuditLog.open(home) as log:
        log.append_many([{"i": i} for i in range(20)], recorded_at=T)  # its own, 0..19
        assert log._vouched and log._vouched[0][:2] == (0, 19)
        with closing(connect(home.db_path, write=True)) as conn, conn:
            rows = conn.execute(
                "SELECT seq, recorded_at, prev_hash FROM audit_records ORDER BY seq"
            ).fetchall()
            prev = str(rows[5][2])
            for seq, at, _ in rows[5:]:
                data = b'{"i":5,"i":6}' if seq == 5 else f'{{"i":{seq}}}'.encode()
                p_hash = payload_hash(data)
                r_hash = record_hash(seq, prev, at, p_hash)
                conn.execute(
                    "UPDATE audit_records SET payload = ?, payload_hash = ?, prev_hash = ?, "
                    "record_hash = ? WHERE seq = ?",
                    (data, p_hash, prev, r_hash, seq),
                )
                prev = r_hash
        # the decision right after that batch (as with a threshold of 20): refused
        assert autocheckpoint.checkpoint_if_due(log, 20, 20) is None
        assert log.auto_checkpoint_error is not None and "record 19" in log.auto_checkpoint_error
        assert _stored(home) == []
        log._checkpoint_every, log.auto_checkpoint_error = 30, None
        log.append_many([{"i": i} for i in range(20)], recorded_at=T)  # 40: due, refused
        assert log.auto_checkpoint_error is not None and "seq" in log.auto_checkpoint_error
        assert log.count() == 40
        result = log.verify()
        assert not result.ok and result.first_broken_seq == 5
        assert result.reason == "unparseable-record"
    assert _stored(home) == []


@pytest.mark.parametrize("damage", ["truncated", "flipped", "unknown dictionary"])
def test_verify_reads_damaged_frames_as_the_sql_function_reads_them(
    tmp_path: Path, damage: str
) -> None:
    """The walk inflates stored payloads in Python (store/parallel.py), not through
    ``rensei_payload()``: a damaged stored frame gets the very verdict it gets when the rows
    are read through the SQL function."""
    home = _home(tmp_path, 0)
    with AuditLog.open(home) as log:
        log.append_many([{"i": i, "pad": "abc" * 40} for i in range(30)], recorded_at=T)
    with closing(connect(home.db_path, write=True)) as conn:
        stored = bytes(conn.execute("SELECT payload FROM audit_records WHERE seq = 12").get)
        assert stored.startswith(b"\x28\xb5\x2f\xfd")  # a zstd frame
        changed: Any = {
            "truncated": stored[:-3],
            "flipped": stored[:-2] + bytes([stored[-2] ^ 0xFF]) + stored[-1:],
            "unknown dictionary": stored[:6] + bytes([stored[6] ^ 0x55]) + stored[7:],
        }[damage]
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 12", (changed,))
    origin = f"rensei-routing/{home.info().org}/audit"
    with AuditLog.open(home) as log:
        got = log.verify(workers=1)
        with closing(connect(home.db_path)) as conn:
            rows = conn.execute(
                "SELECT seq, recorded_at, prev_hash, payload_hash, record_hash, "
                "rensei_payload(payload) FROM audit_records ORDER BY seq"
            ).fetchall()
    single = verify_chain(rows, origin=origin)
    assert not got.ok and got.first_broken_seq == 12
    assert (got.first_broken_seq, got.reason, got.detail) == (
        single.first_broken_seq,
        single.reason,
        single.detail,
    )
