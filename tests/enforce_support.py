"""Shared helpers for the enforcement tests: a home with policies and recorded gateway evidence,
gateway spawns, a fixed clock, and readers of the stored state (rows and chain)."""

from __future__ import annotations

import datetime as dt
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .shadow_support import home_with_policies, registry, spawn

REPO = "acme/widgets"
STAMP = "2026-02-03T04:05:06.000007Z"
#: When the gates and arms of these tests run: an hour after the evidence was recorded.
NOW = dt.datetime(2026, 2, 3, 5, 5, 6, tzinfo=dt.UTC)
ANTHROPIC_ONLY = [{"account_id": "anthropic-primary", "provider_binding": "anthropic"}]

#: Policies claiming acme/widgets: its spawns on anthropic (the route they already take).
KEEP: dict[str, Any] = {
    "policies": [
        {
            "id": "widgets-on-anthropic",
            "priority": 10,
            "match": {"repo_ids": [REPO]},
            "action": {"provider_lock": "anthropic"},
        }
    ]
}


def locked_to_zai(on_unavailable: str = "hold") -> dict[str, Any]:
    """A set locking acme/widgets to zai-harness: a spawn with only an Anthropic account is
    held (or rejected) for want of an eligible account."""
    return {
        "policies": [
            {
                "id": "widgets-on-zai",
                "priority": 10,
                "match": {"repo_ids": [REPO]},
                "action": {"provider_lock": "zai-harness", "on_unavailable": on_unavailable},
            }
        ]
    }


#: A set claiming nothing of acme/widgets (only another repository).
ELSEWHERE: dict[str, Any] = {
    "policies": [
        {
            "id": "gadgets-only",
            "priority": 10,
            "match": {"repo_ids": ["acme/gadgets"]},
            "action": {"provider_lock": "anthropic"},
        }
    ]
}


def gateway_doc(**fields: Any) -> dict[str, Any]:
    """A spawn document on the gateway for acme/widgets (unless ``fields`` say otherwise)."""
    base: dict[str, Any] = {
        "stages": [{"mechanism": "default", "provider": "gateway"}],
        "accounts": ANTHROPIC_ONLY,
    }
    return spawn(**(base | fields))


def gateway_spawn(**fields: Any) -> Spawn:
    return Spawn.from_dict(gateway_doc(**fields))


def make_home(tmp_path: Path, policies: dict[str, Any] = KEEP, *, evidence: int = 60) -> Home:
    """An initialised home with ``policies`` saved as revision 1 and ``evidence`` gateway
    spawns of acme/widgets recorded in shadow mode at :data:`STAMP`."""
    home = home_with_policies(tmp_path, policies)
    record(home, [gateway_spawn()] * evidence)
    return home


def record(home: Home, spawns: list[Spawn]) -> None:
    if spawns:
        with ShadowRecorder(home, registry(), clock=lambda: STAMP) as rec:
            rec.record_many(spawns)


def save(home: Home, policies: dict[str, Any]) -> int:
    """Save ``policies`` as the next revision; returns its number."""
    snapshot = PolicySnapshot.from_dict(policies)
    with closing(home.connect(write=True)) as conn:
        saved = PolicyStore(conn).save(snapshot.policies, saved_at=STAMP)
    return saved.revision


def chain(home: Home) -> list[tuple[int, str, bytes]]:
    """Every record as stored: ``(seq, record_hash, payload bytes)``."""
    with AuditLog.open(home) as log:
        return [(r.seq, r.record_hash, r.payload_bytes) for r in log.records()]


def payloads(home: Home, record_type: str) -> list[Any]:
    with AuditLog.open(home) as log:
        return [
            r.payload
            for r in log.records()
            if isinstance(r.payload, dict) and r.payload.get("record_type") == record_type
        ]


def rows(home: Home) -> tuple[list[Any], list[Any]]:
    """The enforcement tables as stored: canaries, then decisions."""
    with closing(home.connect()) as conn:
        canaries = conn.execute("SELECT * FROM enforce_canaries ORDER BY repo").fetchall()
        decisions = conn.execute("SELECT * FROM enforce_decisions ORDER BY seq").fetchall()
    return canaries, decisions


def hint(home: Home) -> bytes:
    path = home.path / "enforce.state"
    return path.read_bytes() if path.exists() else b""
