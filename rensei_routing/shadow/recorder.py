"""Shadow recording at a spawn seam (document 001 §D6, §D7, Consequences): explain what policy
would have chosen for a spawn, beside the route it actually took, and append one audit record.

Adapter over the home (its policy store, audit log and kill switch) and the seam registry. It
must never change, delay beyond its own append, or return a route: :func:`record_route_shadow`
returns the record or ``None``. Recording is off unless the switch ``is True`` (a truthy mock or
the string ``"true"`` cannot enable it); sink I/O errors (disk full, read-only home, a lock held
past the busy timeout) are logged and swallowed, every other error propagates.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from typing import Final

import apsw

from ..core.audit.chain import encode_payload, format_timestamp
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.decision import STATE_ABSENT
from ..core.routing.ids import ScanMemo
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import Trace, explain, explain_batch, record_trace
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.compare import (
    RECORD_KEYS,
    ShadowDecision,
    record_may_redact,
    shadow_decision,
)
from ..core.shadow.spawn import Spawn
from ..errors import StoreError
from ..plugins.manager import SeamRegistry
from ..store import shadow_index
from ..store.audit import AppendResult
from ..store.home import Home
from ..store.policies import PolicyStore
from ..store.settings import SHADOW_ENABLED, read_flag, write_flag
from .seam import SeamService

__all__ = [
    "SINK_ERRORS",
    "ShadowRecorder",
    "record_route_shadow",
    "set_shadow_enabled",
    "shadow_enabled",
    "utc_now",
]

logger: Final = logging.getLogger("rensei_routing.shadow")

#: What a sink can plausibly raise: the store failed (full disk, read-only or missing home,
#: a lock held past the busy timeout, an unreadable database) or the OS refused the I/O.
SINK_ERRORS: Final = (StoreError, OSError)


def utc_now() -> str:
    """The current time as an audit ``recorded_at`` (RFC 3339 UTC, microseconds)."""
    return format_timestamp(dt.datetime.now(dt.UTC))


def shadow_enabled(home: Home) -> bool:
    """The home's shadow-recording switch: on unless an operator turned it off.

    Raises:
        HomeError: the home is not initialised.
        MalformedError: the stored switch is neither true nor false.
        StoreError: the database cannot be read.
    """
    with closing(home.connect()) as conn:
        stored = read_flag(conn, SHADOW_ENABLED)
    return stored is not False


def set_shadow_enabled(home: Home, enabled: bool) -> None:
    """Turn the home's shadow-recording switch on or off.

    Raises:
        HomeError: the home is not initialised.
        StoreError: the database cannot be written.
    """
    with closing(home.connect(write=True)) as conn:
        write_flag(conn, SHADOW_ENABLED, enabled)


class ShadowRecorder(SeamService):
    """Records spawns of one home against its current policy revision. Opens nothing until the
    first record (so a missing or read-only home is a sink error of that call, not of the
    caller's start-up); keeps its connections for repeated calls, and reloads the policies only
    when the current revision or its hash changed. Not for use by several threads at once.

    ``trace``: the proposed decision's explanation in each record; ``auto`` (the default) and
    ``compact`` store the compact one (the full trace is re-derived on demand, ``rensei audit
    show SEQ --full``), ``full`` stores every policy's line.
    """

    __slots__ = ("_head", "_loaded", "_store", "_trace")

    def __init__(
        self,
        home: Home,
        registry: SeamRegistry,
        *,
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redactor: Redactor = DEFAULT_REDACTOR,
        clock: Callable[[], str] = utc_now,
        trace: Trace = "auto",
    ) -> None:
        super().__init__(home, registry, vocabulary, redactor, clock)
        self._trace: Trace = record_trace(trace)  # auto: the compact explanation
        self._store: PolicyStore | None = None
        self._head: tuple[int, str] | None = None
        self._loaded: tuple[PolicySnapshot, str] | None = None

    # -- resources ----------------------------------------------------------------------------

    def _policies(self) -> PolicyStore:
        if self._store is None:
            self._store = PolicyStore(self._reader(), vocabulary=self._vocabulary)
        return self._store

    def close(self) -> None:
        """Close what this recorder opened (idempotent)."""
        super().close()
        self._store = None
        self._loaded = self._head = None

    def snapshot(self) -> tuple[PolicySnapshot, str]:
        """The current revision and its load state (``ok``, ``absent`` or ``corrupt``), reloaded
        only when the stored revision or its hash moved.

        Raises:
            HomeError: the home is not initialised.
            StoreError: the database cannot be read.
        """
        store = self._policies()
        head = store.head()
        if self._loaded is None or head != self._head:
            if head is None:
                self._loaded = (PolicySnapshot.empty(), STATE_ABSENT)
            else:
                loaded = store.load()
                self._loaded = (loaded.snapshot, loaded.state)
            self._head = head
        return self._loaded

    # -- building -----------------------------------------------------------------------------

    def build_many(
        self,
        spawns: Iterable[Spawn],
        snapshot: PolicySnapshot,
        state: str,
        *,
        recorded_at: str,
    ) -> list[ShadowDecision]:
        """Shadow records for ``spawns`` against one snapshot (nothing is written).

        Raises:
            UnknownSeamError: a spawn's seam is not registered.
        """
        items = list(spawns)
        routes = [self.route(s) for s in items]
        decisions = explain_batch(
            [c for c, _ in routes],
            snapshot,
            snapshot_state=state,
            vocabulary=self._vocabulary,
            trace=self._trace,
            redactor=self._redactor,  # the log's own: a stored id is over what is stored
        )
        return [
            shadow_decision(
                recorded_at=recorded_at,
                seam=spawn.seam,
                principal_id=spawn.principal_id,
                actual=actual,
                proposed=decision,
            )
            for spawn, (_, actual), decision in zip(items, routes, decisions, strict=True)
        ]

    # -- recording ----------------------------------------------------------------------------

    def record(self, spawn: Spawn) -> ShadowDecision:
        """Explain one spawn against the current revision and append its record (one durable
        transaction). Ignores the kill switch: see :func:`record_route_shadow`.

        Raises:
            UnknownSeamError: the spawn's seam is not registered.
            HomeError, StoreError: the home or its database cannot be used (nothing written).
        """
        snapshot, state = self.snapshot()
        context, actual = self.route(spawn)
        decision = explain(
            context,
            snapshot,
            snapshot_state=state,
            vocabulary=self._vocabulary,
            trace=self._trace,
            redactor=self._redactor,  # the log's own: a stored id is over what is stored
        )
        recorded_at = self._clock()
        record = shadow_decision(
            recorded_at=recorded_at,
            seam=spawn.seam,
            principal_id=spawn.principal_id,
            actual=actual,
            proposed=decision,
        )
        encoded = encode_payload(record, self._redactor)
        # Encoded here with the log's redactor, as ``append`` would: the log need not re-read it.
        self._audit().append_stamped(_indexed(recorded_at, [record], [encoded]), own=True)
        return record

    def record_many(
        self,
        spawns: Iterable[Spawn],
        *,
        snapshot: tuple[PolicySnapshot, str] | None = None,
    ) -> tuple[list[ShadowDecision], AppendResult]:
        """Explain a batch of spawns against one revision (``snapshot``, else the current one)
        and append their records in one transaction (all or nothing), in order.

        Raises:
            UnknownSeamError: a spawn's seam is not registered (nothing written).
            HomeError, StoreError: the home or its database cannot be used (nothing written).
        """
        snap, state = self.snapshot() if snapshot is None else snapshot
        recorded_at = self._clock()
        records = self.build_many(spawns, snap, state, recorded_at=recorded_at)
        # Each distinct string checked once per batch: a record with nothing credential-shaped
        # is stored as its canonical bytes (exactly what ``encode_payload`` would return).
        scan = ScanMemo(self._redactor)
        keys_suspect = self._redactor.might_match(" ".join(RECORD_KEYS))
        encoded = [
            encode_payload(r, self._redactor)
            if keys_suspect or record_may_redact(scan, r)
            else r.canonical()
            for r in records
        ]
        result = self._audit().append_stamped(_indexed(recorded_at, records, encoded), own=True)
        return records, result


def _indexed(
    recorded_at: str, records: Sequence[ShadowDecision], encoded: Sequence[bytes]
) -> Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]]:
    """The ``append_stamped`` builder of ``records`` (stored as ``encoded``): they join the
    shadow index in the transaction that appends them (see :mod:`..store.shadow_index`)."""

    def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
        shadow_index.extend(conn, first, recorded_at, records)
        return iter([(recorded_at, e) for e in encoded])

    return build


def record_route_shadow(
    spawn: Spawn, *, enabled: object, recorder: ShadowRecorder
) -> ShadowDecision | None:
    """Record a spawn's shadow decision, or do nothing.

    Off unless ``enabled is True`` (identity, not truthiness). Returns the record appended, or
    ``None`` when off or when the sink failed (the failure is logged on the
    ``rensei_routing.shadow`` logger). It never returns, changes or delays a route beyond its
    own append; the caller's spawn goes ahead whatever happens here.

    Raises:
        UnknownSeamError: the spawn's seam is not registered (a wiring bug: it propagates, as
            does any other programming error).
    """
    if enabled is not True:
        return None
    try:
        return recorder.record(spawn)
    except SINK_ERRORS as e:
        logger.warning("shadow record not written (seam %s): %s", spawn.seam, e)
        return None
