"""What ``GET /metrics`` reports (docs/operations.md "Metrics" has the table): the held
snapshot, this process's fetches and HTTP answers, and a home's durable figures (audit appends,
the latest checkpoint, claims, sessions, enforcement decisions) with a background verification.

Reads only: the audit log opened read-only, the sessions table, the host cache. Counters read
from the database are derived from durable state at every scrape, so they survive a restart;
the claim and enforcement counters are tallied over the audit records, each record read once
per process (a restart reads the log again, from its oldest record present). Process-local
counters (fetches, HTTP answers, verify runs) begin at zero when the process starts. Renders
through :mod:`.exposition`; the HTTP route is the server's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from ..control.server import SnapshotService
from ..core.enforce.bound import ANSWERS, TRIPPED
from ..core.enforce.records import DECISION_RECORD, TRIP_RECORD
from ..core.snapshot.envelope import RulesetSnapshot, compiled_moment
from ..core.snapshot.freshness import FreshnessPolicy, age_of
from ..errors import RenseiRoutingError, SnapshotError
from ..host.cache import HostCache
from ..host.claims import CLAIM_RECORD
from ..host.poll import PollCounts
from ..host.status import host_status_data
from ..store.audit.log import AuditLog
from ..store.db import close_quietly
from ..store.home import Home
from ..store.sessions import ENDED, EXPIRED, OPEN, SessionStore
from .exposition import Family, Sample, label_value, render

__all__ = [
    "DEFAULT_VERIFY_EVERY_S",
    "SNAPSHOT_STATES",
    "Collect",
    "HomeMetrics",
    "cache_families",
    "host_metrics",
    "poll_families",
    "request_families",
    "serve_metrics",
    "served_families",
]

#: Renders the exposition text, given this process's HTTP answers by (route, code).
Collect = Callable[[Mapping[tuple[str, str], int]], str]

#: Seconds between two background verifications of the audit log (the first runs at the
#: first scrape).
DEFAULT_VERIFY_EVERY_S: Final = 300.0
#: The states of the held snapshot (``rensei_snapshot_state``).
SNAPSHOT_STATES: Final = ("none", "fresh", "degraded", "expired", "refused", "damaged")
#: Distinct claim refusal reasons kept as labels; further ones are counted as ``other``.
MAX_REASONS: Final = 32
_VERIFY_RESULTS: Final = ("ok", "broken", "error")
_MARKS: Final = tuple(
    f'"record_type":"{kind}"'.encode() for kind in (CLAIM_RECORD, DECISION_RECORD, TRIP_RECORD)
)


def _snapshot_families(revision: int | None, age_s: float | None, state: str) -> list[Family]:
    out = [
        Family.by(
            "rensei_snapshot_state",
            "gauge",
            "The held snapshot's state: 1 for the current one.",
            "state",
            {s: float(s == state) for s in SNAPSHOT_STATES},
        )
    ]
    if revision is not None:
        out.append(
            Family.single(
                "rensei_snapshot_revision", "gauge", "The held snapshot's revision.", revision
            )
        )
    if age_s is not None:
        out.append(
            Family.single(
                "rensei_snapshot_age_seconds",
                "gauge",
                "Seconds since the held snapshot was compiled (its signed compiledAt).",
                age_s,
            )
        )
    out.append(
        Family.single(
            "rensei_snapshot_degraded",
            "gauge",
            "1 when the held snapshot is older than its degraded bound (or expired), else 0.",
            float(state in ("degraded", "expired")),
        )
    )
    return out


def served_families(
    snap: RulesetSnapshot | None, now: datetime, policy: FreshnessPolicy | None = None
) -> list[Family]:
    """The snapshot ``serve`` serves, aged at ``now`` by the default bounds."""
    if snap is None:
        return _snapshot_families(None, None, "none")
    bounds = policy or FreshnessPolicy()
    age = age_of(compiled_moment(snap), now)
    state = (
        "expired"
        if age > bounds.refuse_after
        else "degraded"
        if age > bounds.degraded_after
        else "fresh"
    )
    return _snapshot_families(snap.revision, age.total_seconds(), state)


def cache_families(cache: HostCache, now: datetime) -> list[Family]:
    """The host cache's snapshot at ``now`` (its state as ``host status`` says it)."""
    status = host_status_data(cache, now=now)
    entry = status["snapshot"]
    if entry is None:
        return _snapshot_families(None, None, "damaged" if status.get("damaged") else "none")
    try:
        snap = cache.load()
    except SnapshotError:
        snap = None
    age_ms = entry.get("snapshotAgeMs")
    return _snapshot_families(
        None if snap is None else snap.revision,
        None if age_ms is None else age_ms / 1000,
        str(entry["state"]),
    )


def poll_families(counts: PollCounts) -> list[Family]:
    """This process's polls (``host run``)."""
    fetches, adopted, refused = counts.read()
    return [
        Family.by(
            "rensei_snapshot_fetches_total",
            "counter",
            "Snapshot fetches by this process, by result (ok, not_modified, failed).",
            "result",
            fetches,
        ),
        Family.single(
            "rensei_snapshots_adopted_total",
            "counter",
            "Fetched snapshots adopted as newer by this process.",
            adopted,
        ),
        Family.by(
            "rensei_snapshots_refused_total",
            "counter",
            "Fetched snapshots refused by this process, by reason.",
            "reason",
            refused,
        ),
    ]


def request_families(counts: Mapping[tuple[str, str], int]) -> list[Family]:
    """HTTP answers of this process, by route and status code."""
    return [
        Family(
            name="rensei_http_requests_total",
            kind="counter",
            help="HTTP requests answered by this process, by route and status code.",
            samples=tuple(
                Sample((("route", route), ("code", code)), n)
                for (route, code), n in sorted(counts.items())
            ),
        )
    ]


@dataclass(slots=True)
class _Tally:
    """Claims and enforcement decisions counted over the audit records read so far."""

    next_seq: int = 0
    admitted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)

    def add(self, payload_bytes: bytes) -> None:
        if not any(mark in payload_bytes for mark in _MARKS):
            return
        try:
            payload = json.loads(payload_bytes)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        kind = payload.get("record_type")
        refused, outcomes = self.refused, self.outcomes
        if kind == CLAIM_RECORD:
            if payload.get("admitted") is True:
                self.admitted += 1
                return
            reason = label_value(str(payload.get("reason")))
            if reason not in refused and len(refused) >= MAX_REASONS:
                reason = "other"
            refused[reason] = refused.get(reason, 0) + 1
        elif kind == DECISION_RECORD:
            answer = payload.get("answer")
            key = answer if answer in ANSWERS else "other"
            outcomes[key] = outcomes.get(key, 0) + 1
        elif kind == TRIP_RECORD:
            outcomes[TRIPPED] = outcomes.get(TRIPPED, 0) + 1


class HomeMetrics:
    """A home's durable figures, read at each :meth:`families` call, and the verification of
    its audit log, run in the background at most every ``verify_every_s`` seconds (started by
    a scrape; a scrape never waits for it). Thread-safe: one scrape reads at a time."""

    def __init__(self, home: Path, *, verify_every_s: float = DEFAULT_VERIFY_EVERY_S) -> None:
        self._path = home
        self._verify_every_s = verify_every_s
        self._lock = threading.Lock()
        self._tally = _Tally()
        self._verify_lock = threading.Lock()
        self._verifier: threading.Thread | None = None
        self._next_verify = 0.0
        self._verify_runs = dict.fromkeys(_VERIFY_RESULTS, 0)
        self._last_verify: tuple[bool, float] | None = None

    def families(self, now: datetime) -> list[Family]:
        """The families at ``now``; ``rensei_store_up`` 0 (and nothing else from the database)
        when the home cannot be read (not initialised, or a store error)."""
        with self._lock:
            try:
                out = self._read(now)
                up = 1.0
            except RenseiRoutingError:
                out, up = [], 0.0
        up_family = Family.single(
            "rensei_store_up",
            "gauge",
            "1 when this home's database could be read for this scrape, else 0.",
            up,
        )
        if up:
            self._maybe_verify()
        return [up_family, *out, *self._verify_families()]

    def _read(self, now: datetime) -> list[Family]:
        home = Home(self._path)
        with AuditLog.open(home, read_only=True) as log:
            appended, _ = log.head()
            tally = self._tally
            for record in log.records(start=tally.next_seq):
                tally.add(record.payload_bytes)
                tally.next_seq = record.seq + 1
            tally.next_seq = max(tally.next_seq, appended)
            checkpoint = _latest_checkpoint(log, now)
        conn = home.connect()
        try:
            sessions = SessionStore(conn).counts_by_state(now_ms=_epoch_ms(now))
        finally:
            close_quietly(conn)
        return [
            Family.single(
                "rensei_audit_appends_total",
                "counter",
                "Records ever appended to this home's audit log (its next seq).",
                appended,
            ),
            *checkpoint,
            Family.single(
                "rensei_claims_admitted_total",
                "counter",
                "Claims admitted, from the claim records in the audit log.",
                tally.admitted,
            ),
            Family.by(
                "rensei_claims_refused_total",
                "counter",
                "Claims refused, by reason code, from the claim records in the audit log.",
                "reason",
                dict(tally.refused),
            ),
            Family.by(
                "rensei_sessions",
                "gauge",
                "Sessions by state (an open one whose lease lapsed counts as expired).",
                "state",
                {**dict.fromkeys((OPEN, ENDED, EXPIRED), 0), **sessions},
            ),
            Family.by(
                "rensei_enforcement_decisions_total",
                "counter",
                "Enforcement decisions by outcome (answers of enforced-decision records; "
                "tripped: trip records), from the audit log.",
                "outcome",
                {**dict.fromkeys((*ANSWERS, TRIPPED), 0), **tally.outcomes},
            ),
        ]

    def _maybe_verify(self) -> None:
        with self._verify_lock:
            moment = time.monotonic()
            busy = self._verifier is not None and self._verifier.is_alive()
            if busy or moment < self._next_verify:
                return
            self._next_verify = moment + self._verify_every_s
            self._verifier = threading.Thread(target=self._verify, name="verify", daemon=True)
            self._verifier.start()

    def _verify(self) -> None:
        try:
            with AuditLog.open(Home(self._path), read_only=True) as log:
                ok = bool(log.verify(workers=1))
            result = "ok" if ok else "broken"
        except RenseiRoutingError:
            ok, result = False, "error"
        with self._verify_lock:
            self._verify_runs[result] += 1
            self._last_verify = (ok, time.time())

    def wait_verified(self, timeout: float = 30.0) -> None:
        """Wait for a background verification to finish (tests, shutdown)."""
        verifier = self._verifier
        if verifier is not None:
            verifier.join(timeout)

    def _verify_families(self) -> list[Family]:
        with self._verify_lock:
            runs, last = dict(self._verify_runs), self._last_verify
        out = [
            Family.by(
                "rensei_audit_verify_runs_total",
                "counter",
                "Background verifications of the audit log by this process, by result.",
                "result",
                runs,
            )
        ]
        if last is not None:
            out += [
                Family.single(
                    "rensei_audit_verify_ok",
                    "gauge",
                    "1 when the last background verification passed, else 0.",
                    float(last[0]),
                ),
                Family.single(
                    "rensei_audit_verify_last_run_timestamp_seconds",
                    "gauge",
                    "When the last background verification ended (Unix time).",
                    last[1],
                ),
            ]
        return out


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _latest_checkpoint(log: AuditLog, now: datetime) -> list[Family]:
    """The latest checkpoint's size and the age of the newest record it covers."""
    try:
        stored = log.checkpoints()
    except RenseiRoutingError:
        return []
    if not stored:
        return []
    size = max(cp.size for cp in stored)
    out = [
        Family.single(
            "rensei_audit_checkpoint_size",
            "gauge",
            "Records covered by the latest signed checkpoint.",
            size,
        )
    ]
    try:
        newest = log.get(size - 1)
        covered = datetime.fromisoformat(newest.recorded_at[:-1] + "+00:00")
    except (RenseiRoutingError, ValueError):
        return out
    out.append(
        Family.single(
            "rensei_audit_checkpoint_age_seconds",
            "gauge",
            "Seconds since the newest record the latest checkpoint covers was recorded.",
            max((now - covered.astimezone(UTC)).total_seconds(), 0.0),
        )
    )
    return out


def serve_metrics(
    service: SnapshotService, home: HomeMetrics, clock: Callable[[], datetime]
) -> Collect:
    """What ``serve`` answers on ``/metrics``: the snapshot it serves (what a snapshot request
    would be answered now; the one held when that fails), its HTTP answers (the snapshot
    route's are the hosts' fetches by result) and its home's figures."""

    def served() -> RulesetSnapshot | None:
        try:
            return service.current().snapshot
        except RenseiRoutingError:
            return service.held()

    def collect(requests: Mapping[tuple[str, str], int]) -> str:
        now = clock()
        return render(
            [*served_families(served(), now), *request_families(requests), *home.families(now)]
        )

    return collect


def host_metrics(
    cache: HostCache, counts: PollCounts, home: HomeMetrics, clock: Callable[[], datetime]
) -> Collect:
    """What ``host run --listen`` answers on ``/metrics``: the cached snapshot, this process's
    polls and HTTP answers, and its home's figures."""

    def collect(requests: Mapping[tuple[str, str], int]) -> str:
        now = clock()
        return render(
            [
                *cache_families(cache, now),
                *poll_families(counts),
                *request_families(requests),
                *home.families(now),
            ]
        )

    return collect
