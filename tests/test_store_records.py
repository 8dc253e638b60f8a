"""Streaming the audit log (AuditLog.records) and the policy store's head, on real SQLite files."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

STAMP = "2026-01-01T00:00:00Z"


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    out = AuditLog(tmp_path / "audit.db", origin="rensei-routing/test/audit")
    out.append_many([{"n": i} for i in range(10)], recorded_at=STAMP)
    return out


@pytest.mark.parametrize("batch", [1, 3, 10, 1_000])
def test_records_stream_every_record_in_order(log: AuditLog, batch: int) -> None:
    with closing(log):
        assert [r.payload["n"] for r in log.records(batch=batch)] == list(range(10))
        assert [r.seq for r in log.records(newest_first=True, batch=batch)] == list(
            range(9, -1, -1)
        )
        assert [r.seq for r in log.records(stop=4, batch=batch)] == [0, 1, 2, 3]
        assert [r.seq for r in log.records(stop=4, newest_first=True, batch=batch)] == [3, 2, 1, 0]
        assert list(log.records(stop=0, batch=batch)) == []


def test_records_see_the_chain_as_stored(log: AuditLog) -> None:
    with closing(log):
        streamed = list(log.records(batch=4))
        assert streamed == list(log.tail(10))
        assert streamed[0].recorded_at == STAMP


def test_policy_head_names_the_current_revision(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init()
    with closing(home.connect(write=True)) as conn:
        store = PolicyStore(conn)
        assert store.head() is None
        saved = store.save(PolicySnapshot.from_dict([{"id": "a"}]).policies, saved_at=STAMP)
        assert store.head() == (1, saved.content_hash)
        again = store.save((), saved_at=STAMP)
        assert store.head() == (2, again.content_hash) != (1, saved.content_hash)
