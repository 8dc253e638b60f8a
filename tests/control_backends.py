"""Shared helpers of the dual-backend control-store tests: a control home on SQLite or on a
PostgreSQL database of the session's throwaway cluster, its stored state read afresh, and small
policy and org-data sets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import apsw

from rensei_routing.core.routing.policy import RoutingPolicy
from rensei_routing.core.snapshot.org import OrgData
from rensei_routing.store.backends import attach_postgres, open_control_store
from rensei_routing.store.control import ControlStore
from rensei_routing.store.home import Home

BACKENDS = ("sqlite", "postgresql")
T = "2026-11-29T12:00:00.000000Z"
_SQLITE_TABLES = (
    "policy_revisions",
    "org_data",
    "ruleset_snapshots",
    "control_events",
    "meta",
    "audit_records",
)
_PG_TABLES = (
    "control_orgs",
    "control_policy_revisions",
    "control_org_data",
    "control_snapshots",
    "control_events",
    "control_policy_mutations",
)


@dataclass(frozen=True)
class ControlHome:
    """One control home and where its control data lives (``url`` ``None``: its SQLite file)."""

    home: Home
    url: str | None

    def open(self, *, write: bool = True) -> ControlStore:
        return open_control_store(self.home, write=write)

    def state(self) -> str:
        """A digest of every stored control row, read on a new connection."""
        h = hashlib.sha256()
        if self.url is None:
            conn = apsw.Connection(str(self.home.db_path), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                for table in _SQLITE_TABLES:
                    for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid'):
                        h.update(repr(row).encode())
            finally:
                conn.close()
            return h.hexdigest()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            for table in _PG_TABLES:
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
                    h.update(repr(row).encode())
        return h.hexdigest()


def control_home(root: Path, backend: str, url: str | None, *, org: str = "acme") -> ControlHome:
    """A new home for ``org``; on ``postgresql`` its control data in ``url``."""
    home = Home(root)
    home.init(org=org)
    if backend == "postgresql":
        assert url is not None
        attach_postgres(home, url)
        return ControlHome(home, url)
    return ControlHome(home, None)


def replica_of(first: ControlHome, root: Path) -> ControlHome:
    """A second home of ``first``'s org and database with the same keys (a replica)."""
    import shutil

    root.mkdir(parents=True)
    shutil.copytree(first.home.keys_dir, root / "keys")
    home = Home(root)
    home.init(org=first.home.info().org)
    assert first.url is not None
    attach_postgres(home, first.url)
    return ControlHome(home, first.url)


def policies(*ids: str) -> list[RoutingPolicy]:
    return [RoutingPolicy.from_dict({"id": i, "match": {"repo_ids": [f"acme/{i}"]}}) for i in ids]


EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def org_data(variant: str = "") -> OrgData:
    """The shipped example org; a ``variant`` makes its content differ (the first profile's
    description), so that each load is a new revision (an identical load is a no-op)."""
    import json

    doc = json.loads((EXAMPLES / "org.json").read_text())
    if variant:
        doc["capacityProfiles"]["profiles"][0]["description"] += f" ({variant})"
    return OrgData.from_dict(doc)
