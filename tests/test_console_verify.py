"""The console's background verification (issue 29, M3 and L5): any change to the database is
verified again, not only a new head; an append alone is verified from the last verified head
(only the new records are walked); any other change walks the whole chain; a full walk also
comes on a schedule, and a passed verification older than a bound shows its age, not ``ok``.
Doctor's panel reruns on the same changes. Real homes (SQLite, WAL, Ed25519), real writers in
other connections; the clock is injected so the schedule needs no waiting."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import apsw
import pytest

from rensei_routing.console.context import Console
from rensei_routing.console.state import (
    FULL_EVERY_S,
    REWALK_DUTY,
    Doctor,
    Verifier,
    WhatIfJobs,
)
from rensei_routing.console.verdict import STALE_AFTER_S, chain_state
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.db import copy_database
from rensei_routing.store.home import Home

from .console_support import wait_for
from .shadow_support import home_with_policies, registry, spawn

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def _record(home: Home, n: int, hour: int = 10) -> None:
    stamp = f"2026-03-01T{hour:02d}:00:00.000000Z"
    with ShadowRecorder(home, registry(), clock=lambda: stamp) as rec:
        rec.record_many([Spawn.from_dict(spawn())] * n)


def _home(tmp_path: Path, n: int = 40) -> Home:
    home = home_with_policies(tmp_path)
    _record(home, n)
    return home


def _sql(home: Home, sql: str) -> None:
    """A write by another connection, as ``sqlite3 rensei.db "..."`` would make it."""
    conn = apsw.Connection(str(home.db_path))
    try:
        conn.execute(sql)
    finally:
        conn.close()


@pytest.fixture
def full_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every full walk of the chain made through the store (the real one, counted)."""
    calls: list[int] = []
    real = AuditLog.verify_segments

    def counted(self: AuditLog, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(AuditLog, "verify_segments", counted)
    return calls


def test_a_rewrite_below_the_head_is_verified_again(tmp_path: Path) -> None:
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    assert verifier.last is not None and verifier.last.result
    head = verifier.last.head
    # the head does not move: only a record below it is rewritten (tamper_mid.sh)
    _sql(home, "UPDATE audit_records SET recorded_at='2020-01-01T00:00:00.000000Z' WHERE seq=7")
    clock.advance(2)
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None
    assert not last.result
    assert (last.result.first_broken_seq, last.result.reason) == (7, "record-hash-mismatch")
    assert last.full
    status, text = chain_state(_console(home, clock, verifier), head)
    assert status == "fail" and "seq 7" in text


def test_a_deleted_record_and_a_forged_checkpoint_walk_in_full(tmp_path: Path) -> None:
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _sql(home, "DELETE FROM audit_records WHERE seq=3")
    verifier.step()
    assert verifier.last is not None and verifier.last.result is not None
    assert (verifier.last.result.first_broken_seq, verifier.last.result.reason) == (3, "seq-gap")
    # a stored checkpoint that no key signed: a change with no new record
    other = home_with_policies(tmp_path / "other")
    _record(other, 5)
    with AuditLog.open(other) as log:
        forged = log.checkpoint()
    home2, clock2 = _home(tmp_path / "second"), Clock()
    verifier2 = Verifier(home2, clock2, rewalk_duty=0)
    verifier2.step()
    assert verifier2.last is not None and verifier2.last.result
    conn = apsw.Connection(str(home2.db_path))
    try:
        conn.execute(
            "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)",
            (forged.size, forged.head_hash, forged.to_text()),
        )
    finally:
        conn.close()
    verifier2.step()
    assert verifier2.last is not None and verifier2.last.result is not None
    assert not verifier2.last.result
    assert verifier2.last.result.reason == "checkpoint-signature-invalid"


def test_an_append_walks_only_the_new_records(tmp_path: Path, full_walks: list[int]) -> None:
    home, clock = _home(tmp_path, 40), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    assert full_walks == [1]
    assert verifier.last is not None and verifier.last.walked == 40
    for round_ in range(3):
        _record(home, 5, hour=11 + round_)
        clock.advance(2)
        verifier.step()
        last = verifier.last
        assert last is not None and last.result
        assert (last.full, last.walked) == (False, 5)
        assert last.result.records_checked == 45 + 5 * round_
        assert full_walks == [1]  # no full walk for an append
    with AuditLog.open(home) as log:
        assert verifier.last.head == log.head()
    verifier.step()  # nothing changed: nothing walked
    assert full_walks == [1] and verifier.last.walked == 5
    # a checkpoint past the verified head (as auto-checkpointing writes) is checked, not walked
    with AuditLog.open(home) as log:
        log.checkpoint()  # (its own walk is the writer's, counted here too)
    _record(home, 2, hour=20)
    verifier.step()
    assert verifier.last is not None and verifier.last.result
    assert (verifier.last.full, verifier.last.walked) == (False, 2)
    assert verifier.last.result.checkpoints_checked == 1
    assert full_walks == [1, 1]


def test_an_append_over_a_rewrite_is_caught_by_the_scheduled_walk(
    tmp_path: Path, full_walks: list[int]
) -> None:
    """A rewrite that keeps the record at the verified head and lands with an append is
    verified as an append (the documented bound): the scheduled full walk names it."""
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _sql(home, "UPDATE audit_records SET recorded_at='2020-01-01T00:00:00.000000Z' WHERE seq=2")
    _record(home, 3, hour=11)
    clock.advance(FULL_EVERY_S)
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert (last.result.first_broken_seq, last.result.reason) == (2, "record-hash-mismatch")
    assert full_walks == [1, 1]


def test_a_rewrite_of_the_verified_head_walks_in_full(tmp_path: Path) -> None:
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    _sql(home, "UPDATE audit_records SET record_hash=printf('%064d', 0) WHERE seq=39")
    _record(home, 3, hour=11)
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert not last.result and last.result.first_broken_seq == 39


def test_a_replaced_database_walks_in_full(tmp_path: Path, full_walks: list[int]) -> None:
    """A copy with a rewritten record and a new append, moved over the database: the record at
    the verified head is the same, but the file is not the one verified."""
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    copy = tmp_path / "copy.db"
    source = home.connect(write=False)
    try:
        copy_database(source, copy, wal=True)
    finally:
        source.close()
    conn = apsw.Connection(str(copy))
    try:
        conn.execute(
            "UPDATE audit_records SET recorded_at='2020-01-01T00:00:00.000000Z' WHERE seq=4"
        )
    finally:
        conn.close()
    copy.replace(home.db_path)
    for suffix in ("-wal", "-shm"):  # the old file's: a stale WAL would be read over the new one
        Path(f"{home.db_path}{suffix}").unlink(missing_ok=True)
    _record(home, 2, hour=11)
    verifier.step()
    last = verifier.last
    assert last is not None and last.result is not None and last.full
    assert last.result.first_broken_seq == 4
    assert full_walks == [1, 1]


def test_an_old_verification_shows_its_age_not_ok(tmp_path: Path) -> None:
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=0)
    verifier.step()
    console = _console(home, clock, verifier)
    assert verifier.last is not None
    head = verifier.last.head
    status, text = chain_state(console, head)
    assert status == "ok" and "whole chain walked 0 s ago" in text
    clock.advance(STALE_AFTER_S + 60)
    status, text = chain_state(console, head)
    assert status == "warn"
    assert f"verified {int(STALE_AFTER_S + 60) // 60} min ago" in text
    verifier.step()  # the schedule walks again
    assert verifier.last.full and chain_state(console, head)[0] == "ok"


def test_a_rewrite_just_after_a_walk_is_walked_at_the_duty_bound(tmp_path: Path) -> None:
    """A database that keeps changing without appends (heartbeats) is walked at most about a
    tenth of the time: a rewrite right after a walk waits for the bound, then is named."""
    home, clock = _home(tmp_path), Clock()
    verifier = Verifier(home, clock, rewalk_duty=REWALK_DUTY)
    verifier.step()
    first = verifier.last
    assert first is not None and first.result
    _sql(home, "UPDATE audit_records SET recorded_at='2020-01-01T00:00:00.000000Z' WHERE seq=9")

    def named() -> bool:
        verifier.step()  # no further change: a postponed walk still comes
        last = verifier.last
        assert last is not None and last.result is not None
        if last is first:
            return False  # postponed: the verdict stands until the walk
        assert last.full and not last.result and last.result.first_broken_seq == 9
        return True

    wait_for(named, "the postponed walk", tries=600, pause=0.05)


def test_doctor_reruns_on_any_change_not_only_a_new_head(tmp_path: Path) -> None:
    home, clock = _home(tmp_path), Clock()
    doctor = Doctor(home, clock)
    doctor.step()
    assert doctor.checks is not None
    first = {c.name: c.status for c in doctor.checks}
    assert first["audit chain"] != "fail"
    at = doctor.at
    clock.advance(1)
    doctor.step()
    assert doctor.at == at  # nothing changed: not rerun
    _sql(home, "UPDATE audit_records SET recorded_at='2020-01-01T00:00:00.000000Z' WHERE seq=5")
    clock.advance(1)
    doctor.step()
    assert doctor.at != at
    assert {c.name: c.status for c in doctor.checks}["audit chain"] == "fail"


def _console(home: Home, clock: Clock, verifier: Verifier) -> Console:
    return Console(
        home=home,
        clock=clock,
        whatif_dir=None,
        verifier=verifier,
        doctor=Doctor(home, clock),
        whatif=WhatIfJobs(home, clock, DEFAULT_VOCABULARY),
    )
