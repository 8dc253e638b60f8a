"""The sessions' lapsed-lease check (issue 24's heartbeat bar): a heartbeat writes one page (the
session row's), because the index the check reads holds a lower bound of each expiry
(``lapse_floor_ms``) that a heartbeat moves once per half lease; and that bound never changes
what is expired, when, or what is counted (a model of the plain rule, "an open session whose
expiry is before now is expired by the next write", checked step by step)."""

from __future__ import annotations

import random
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest

from rensei_routing.core.snapshot.authz import AuthorizationEngine
from rensei_routing.errors import ReceiptError
from rensei_routing.host.claims import claim_payload, claim_request, decide_cached
from rensei_routing.host.sessions import epoch_ms
from rensei_routing.store import db
from rensei_routing.store.sessions import SessionStore

from .test_host_sessions import NOW, Host


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path / "h")


LEASE = timedelta(minutes=10)  # Host.claim's lease


def _wal_frames(host: Host, change: object) -> int:
    """How many pages the commit(s) of ``change()`` wrote to the WAL (emptied first)."""
    with closing(host.home.connect(write=True)) as conn:
        conn.pragma("wal_checkpoint", "TRUNCATE")
        page = int(conn.pragma("page_size"))
    wal = Path(str(host.home.db_path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    change()  # type: ignore[operator]
    size = wal.stat().st_size
    return (size - 32) // (page + 24)


def _floor(host: Host, session_id: str) -> tuple[int, int]:
    with closing(host.home.connect()) as conn:
        row = conn.execute(
            "SELECT lapse_floor_ms, expires_ms FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_heartbeat_writes_the_session_row_page_only(host: Host) -> None:
    rows = [host.sessions.start(host.claim(), now=NOW)[0] for _ in range(40)]
    target = rows[17].session_id
    host.sessions.heartbeat(target, now=NOW)  # the writer connection and memos warm
    for minutes in (1, 2, 3, 4, 5):  # within half a lease of the floor: the floor stays
        at = NOW + timedelta(minutes=minutes)
        assert _wal_frames(host, lambda at=at: host.sessions.heartbeat(target, now=at)) == 1
    assert _floor(host, target) == (epoch_ms(NOW + LEASE), epoch_ms(NOW + LEASE) + 5 * 60_000)
    # past half a lease, the floor moves to the new expiry (the index entry is rewritten)
    later = NOW + timedelta(minutes=6)
    assert _wal_frames(host, lambda: host.sessions.heartbeat(target, now=later)) > 1
    assert _floor(host, target) == (epoch_ms(later + LEASE),) * 2


def test_a_floor_that_passed_is_tightened_not_expired(host: Host) -> None:
    silent = host.sessions.start(host.claim(), now=NOW)[0].session_id
    busy = host.sessions.start(host.claim(), now=NOW)[0].session_id
    host.sessions.heartbeat(silent, now=NOW + timedelta(minutes=1))  # floor stays at 10 min
    host.sessions.heartbeat(busy, now=NOW + timedelta(minutes=6))  # floor moves to 16 min
    assert _floor(host, silent) == (epoch_ms(NOW + LEASE), epoch_ms(NOW + LEASE) + 60_000)
    past_floor = NOW + LEASE + timedelta(milliseconds=1)
    assert host.sessions.open_count(now=past_floor) == 2  # the floor passed, not the lease
    beat = host.sessions.heartbeat(busy, now=past_floor)
    assert beat.action == "continue"
    assert {r.session_id: r.state for r in host.sessions.sessions()} == {
        silent: "open",
        busy: "open",
    }
    assert not [r for r in host.records() if r.get("reason") == "lease-lapsed"]
    assert _floor(host, silent) == (epoch_ms(NOW + LEASE) + 60_000,) * 2  # tightened
    # the check passes again: the next heartbeat is the one-page renewal
    again = past_floor + timedelta(seconds=30)
    assert _wal_frames(host, lambda: host.sessions.heartbeat(busy, now=again)) == 1
    lapsed = NOW + timedelta(minutes=11, milliseconds=1)
    host.sessions.heartbeat(busy, now=lapsed)
    expiry = [r for r in host.records() if r.get("reason") == "lease-lapsed"]
    assert [r["session_id"] for r in expiry] == [silent]


def test_the_lapse_floor_decides_as_the_plain_expiry_rule(host: Host) -> None:
    """Random heartbeats, ends and starts at times that jump forward and back: after every
    step, each session's state, expiry and the open count are the plain rule's."""
    rng = random.Random(2024)
    lease_ms = int(LEASE.total_seconds() * 1000)
    decision = decide_cached(
        host.cache, claim_request("pool-a", None), NOW, lambda: AuthorizationEngine(())
    )
    model: dict[str, tuple[str, int]] = {}  # session -> (state, expires_ms)
    clock = NOW

    def settle(now_ms: int) -> None:
        for sid, (state, expires) in model.items():
            if state == "open" and expires < now_ms:
                model[sid] = ("expired", expires)

    for step in range(160):
        clock += timedelta(seconds=rng.choice((-90, 5, 30, 120, 240, 330, 400, 700)))
        now_ms = epoch_ms(clock)
        op = rng.random()
        if op < 0.15 or not model:
            receipt = host.sessions.issue(
                decision, pool="pool-a", project=None, admitted_at=clock, lease_ms=lease_ms
            )
            host.sessions.record_claim(claim_payload(decision, "pool-a", None), clock, receipt)
            row = host.sessions.start(receipt, now=clock)[0]
            settle(now_ms)
            model[row.session_id] = ("open", now_ms + lease_ms)
        else:
            sid = rng.choice(sorted(model))
            ending = op < 0.25
            try:
                if ending:
                    host.sessions.end(sid, now=clock)
                else:
                    host.sessions.heartbeat(sid, now=clock)
            except ReceiptError as e:
                settle(now_ms)
                assert e.reason == "ended" and model[sid][0] != "open", step
            else:
                settle(now_ms)
                assert model[sid][0] == "open", step
                if ending:
                    model[sid] = ("ended", model[sid][1])
                else:
                    model[sid] = ("open", now_ms + lease_ms)
        stored = {r.session_id: (r.state, r.expires_ms) for r in host.sessions.sessions()}
        assert stored == model, step
        probe = epoch_ms(clock + timedelta(seconds=rng.choice((0, 200, 500, 650))))
        live = sum(1 for state, expires in model.values() if state == "open" and expires >= probe)
        assert host.sessions.open_count(now=clock + timedelta(milliseconds=probe - now_ms)) == live
    with closing(host.home.connect()) as conn:  # the bound holds for every stored row
        assert (
            conn.execute("SELECT count(*) FROM sessions WHERE lapse_floor_ms > expires_ms").get == 0
        )


def test_the_lease_floor_migration_sets_each_floor_to_its_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database with sessions written before the floor existed (schema 4) migrates with
    every floor at its session's expiry, and its lapsed sessions still expire."""
    path = tmp_path / "r.db"
    five = db.MIGRATIONS
    monkeypatch.setattr(db, "MIGRATIONS", five[:4])
    monkeypatch.setattr(db, "SCHEMA_VERSION", 4)
    with closing(db.connect(path, write=True)) as conn, conn:
        for n, expires in enumerate((10, 15)):
            conn.execute(
                "INSERT INTO receipts VALUES (?, 'pool-a', NULL, 'org_a@1', 0, 600000, x'')",
                (f"rcpt_{n}",),
            )
            conn.execute(
                "INSERT INTO sessions VALUES (?, ?, 'pool-a', NULL, 'org_a@1', 'open', 'finish',"
                " 0, 0, 600000, ?, NULL, NULL, NULL)",
                (f"sess_{n}", f"rcpt_{n}", expires * 60_000),
            )
    monkeypatch.setattr(db, "MIGRATIONS", five)
    monkeypatch.setattr(db, "SCHEMA_VERSION", len(five))
    with closing(db.connect(path, write=True)) as conn:
        floors = conn.execute(
            "SELECT session_id, lapse_floor_ms, expires_ms FROM sessions ORDER BY session_id"
        ).fetchall()
        assert floors == [("sess_0", 600_000, 600_000), ("sess_1", 900_000, 900_000)]
        store = SessionStore(conn)
        with conn:
            assert [r.session_id for r in store.lapsed(12 * 60_000)] == ["sess_0"]
            assert store.renew_if_none_lapsed("sess_1", now_ms=12 * 60_000) is None
        with conn:
            assert store.renew_if_none_lapsed("sess_1", now_ms=9 * 60_000) is not None
