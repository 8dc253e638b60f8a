"""The CLI's access to a home's store: open it, read the current snapshot, record decisions.
The store is read with the invocation's plugin vocabulary and written with its redactor, and
``decision_recorded`` observers hear about each record after it is committed."""

from __future__ import annotations

import datetime as dt
import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..core.audit.chain import AuditRecord
from ..core.routing.decision import STATE_ABSENT, RouteDecision
from ..core.routing.policy import PolicySnapshot
from ..core.snapshot.freshness import StampedDecision
from ..errors import HomeError
from ..plugins.manager import has_observers, notify_recorded
from ..store.audit import AuditLog
from ..store.db import close_quietly
from ..store.home import Home
from ..store.policies import PolicyStore
from ._output import note
from ._session import session


def now_rfc3339() -> str:
    """The current UTC time, RFC 3339 with microseconds (the CLI is the layer that reads clocks)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic collector off for a bulk build of acyclic values (a revision's policies),
    then as it was. The CLI is an edge, and its process runs one command: reading 10,000
    policies builds ~300,000 objects, and the collections they set off took two thirds of the
    load (1.10 s -> 0.35 s; ``python -m benchmarks --only policy-revisions`` measures the
    library's load, which leaves the collector alone)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def open_policy_store(home: Path, *, write: bool) -> Iterator[PolicyStore]:
    """A policy store over the home's database, closed on exit.

    Raises:
        HomeError: the home is not initialised (``rensei init``).
    """
    vocabulary = session().vocabulary()
    conn = Home(home).connect(write=write)
    try:
        yield PolicyStore(conn, vocabulary=vocabulary)
    finally:
        close_quietly(conn)


def load_current_snapshot(home: Path) -> tuple[PolicySnapshot, str]:
    """The current revision and its load state. A home that does not exist yet is ``absent``
    (said on stderr, so a mistyped --home is visible), never an error."""
    try:
        Home(home).info()
    except HomeError:
        note(f"note: no store at {home}; resolving against the empty snapshot (absent)")
        return PolicySnapshot.empty(), STATE_ABSENT
    with open_policy_store(home, write=False) as store, collector_paused():
        loaded = store.load()
    if loaded.detail:
        note(f"warning: {loaded.detail}")
    return loaded.snapshot, loaded.state


def open_audit_log(home: Path) -> AuditLog:
    """The home's audit log, redacting with the built-in and plugin patterns.

    Raises:
        HomeError: the home is not initialised.
        PluginError: a plugin's redaction pattern is unusable.
    """
    return AuditLog.open(Home(home), redactor=session().redactor())


def notify_observers(records: Iterable[AuditRecord]) -> None:
    """Tell every ``decision_recorded`` observer about records already committed; an observer
    that raises gets one warning line on stderr and never fails the command."""
    for failure in notify_recorded(session().pm, records):
        note(f"warning: {failure}")


def record_decisions(home: Path, decisions: Sequence[RouteDecision | StampedDecision]) -> None:
    """Append each decision to the home's audit log in one transaction, then notify observers."""
    pm = session().pm
    records: list[AuditRecord] = []
    with open_audit_log(home) as log:
        appended = log.append_many(decisions, recorded_at=now_rfc3339())
        if has_observers(pm):
            records = [log.get(seq) for seq in appended.seqs]
    notify_observers(records)
