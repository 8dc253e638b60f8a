"""The CLI's access to a home's store: open it, read the current snapshot, record decisions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from ..core.decision import STATE_ABSENT, RouteDecision
from ..core.policy import PolicySnapshot
from ..errors import HomeError
from ..store.audit import AuditLog
from ..store.home import Home
from ..store.policies import PolicyStore
from ._output import note


def now_rfc3339() -> str:
    """The current UTC time, RFC 3339 with microseconds (the CLI is the layer that reads clocks)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@contextmanager
def open_policy_store(home: Path, *, write: bool) -> Iterator[PolicyStore]:
    """A policy store over the home's database, closed on exit.

    Raises:
        HomeError: the home is not initialised (``rensei init``).
    """
    with closing(Home(home).connect(write=write)) as conn:
        yield PolicyStore(conn)


def load_current_snapshot(home: Path) -> tuple[PolicySnapshot, str]:
    """The current revision and its load state. A home that does not exist yet is ``absent``
    (said on stderr, so a mistyped --home is visible), never an error."""
    try:
        Home(home).info()
    except HomeError:
        note(f"note: no store at {home}; resolving against the empty snapshot (absent)")
        return PolicySnapshot.empty(), STATE_ABSENT
    with open_policy_store(home, write=False) as store:
        loaded = store.load()
    if loaded.detail:
        note(f"warning: {loaded.detail}")
    return loaded.snapshot, loaded.state


def record_decisions(home: Path, decisions: Sequence[RouteDecision]) -> None:
    """Append each decision to the home's audit log, in one transaction."""
    with AuditLog.open(Home(home)) as log:
        log.append_many(decisions, recorded_at=now_rfc3339())
