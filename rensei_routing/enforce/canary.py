"""Arming, disarming and reading canaries: the service behind ``rensei enforce arm``, ``disarm``
and ``status``. An arm runs the gate first (its verdict is appended even when the arm is then
refused) and arms only on ``pass``, or on an override with a reason; the arm's row, its record
and the hint commit together. A disarm is one action: the row and its record in one
transaction, then the hint cleared if nothing else is armed. Refusals write nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ..core.audit.chain import encode_payload
from ..core.enforce.bound import Canary
from ..core.enforce.gate import DEFAULT_BAR, PASS, GateBar
from ..core.enforce.records import arm_record, disarm_record
from ..core.enforce.trip import DEFAULT_TRIP_WINDOW_S
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.edits import credential_label
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.facts import micros_of
from ..core.timestamps import format_timestamp
from ..errors import EnforcementError, InputError
from ..store import enforcement as state
from ..store.audit import AuditLog
from ..store.db import store_error
from ..store.home import Home
from ..store.policies import PolicyStore
from .gate import GateRun, canonical_repo, run_gate

__all__ = [
    "BAD_TRIP",
    "EVIDENCE_UNREADABLE_CODE",
    "GATE_REFUSED",
    "MAX_REASON",
    "NOT_ARMED",
    "OVERRIDE_WITHOUT_REASON",
    "Armed",
    "arm",
    "disarm",
    "status",
]

OVERRIDE_WITHOUT_REASON: Final = "override-without-reason"
NOT_ARMED: Final = "not-armed"
#: An arm refused by its gate: ``gate-fail`` or ``gate-inconclusive``.
GATE_REFUSED: Final = "gate-"
EVIDENCE_UNREADABLE_CODE: Final = "evidence-unreadable"
BAD_TRIP: Final = "bad-trip-rule"
MAX_REASON: Final = 1024
_TEXT: Final = re.compile(r"[^\x00-\x1f\x7f]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class Armed:
    """An arm that succeeded: the gate run it rests on and the canary now stored."""

    gate: GateRun
    canary: Canary
    prior_revision: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "armed": True,
            "canary": self.canary.to_dict(),
            "prior_revision": self.prior_revision,
            "gate": self.gate.to_dict(),
        }


def _check_reason(override: bool, reason: str | None, redactor: Redactor) -> str | None:
    if reason is not None and not override:
        raise EnforcementError(
            OVERRIDE_WITHOUT_REASON, "--reason goes with --override; nothing was written"
        )
    if not override:
        return None
    if reason is None or not reason.strip():
        raise EnforcementError(
            OVERRIDE_WITHOUT_REASON,
            "--override needs --reason TEXT saying why the gate is overridden; nothing was written",
        )
    if len(reason) > MAX_REASON or not _TEXT.fullmatch(reason):
        raise InputError(
            f"--reason must be 1..{MAX_REASON} printable characters; nothing was written"
        )
    label = credential_label(reason, redactor)
    if label is not None:
        raise InputError(f"--reason holds a value shaped like a {label}; nothing was written")
    return reason


def _check_trip(rate: float | None, window_s: int | None) -> None:
    if rate is None:
        if window_s is not None:
            raise EnforcementError(BAD_TRIP, "--trip-window goes with --trip-rate")
        return
    if not 0.0 <= rate < 1.0:
        raise EnforcementError(BAD_TRIP, "--trip-rate must be a fraction, at least 0, below 1")
    if window_s is not None and window_s <= 0:
        raise EnforcementError(BAD_TRIP, "--trip-window must be longer than 0 seconds")


def arm(
    home: Home,
    repo: str,
    *,
    now: dt.datetime,
    actor: str,
    bar: GateBar = DEFAULT_BAR,
    revision: int | None = None,
    trip_rate: float | None = None,
    trip_window_s: int | None = None,
    override: bool = False,
    reason: str | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> Armed:
    """Gate, then arm ``repo``'s canary on the revision the gate judged (``revision``, else the
    current one), replacing any earlier pin. ``actor`` is already resolved (the actor rule).

    Raises:
        EnforcementError: ``non-canonical-repo``, ``override-without-reason``,
            ``bad-trip-rule``, ``no-policy-revision``, ``policy-store-corrupt``,
            ``evidence-unreadable`` (nothing written); ``gate-fail``, ``gate-inconclusive``
            (the verdict was appended, ``verdict_seq``; no arm state written).
        InputError, HomeError, StoreError: nothing written.
    """
    key = canonical_repo(repo)
    why = _check_reason(override, reason, redactor)
    _check_trip(trip_rate, trip_window_s)
    if trip_rate is not None and trip_window_s is None:
        trip_window_s = DEFAULT_TRIP_WINDOW_S
    run = run_gate(
        home,
        key,
        now=now,
        actor=actor,
        bar=bar,
        revision=revision,
        vocabulary=vocabulary,
        redactor=redactor,
    )
    if run.seq is None:
        raise EnforcementError(
            EVIDENCE_UNREADABLE_CODE,
            "the audit chain does not verify (rensei audit verify): the evidence cannot be "
            f"read, so {key} is not armed, override or not; nothing was written",
        )
    if run.verdict.verdict != PASS and why is None:
        failed = ", ".join(run.verdict.failed)
        raise EnforcementError(
            f"{GATE_REFUSED}{run.verdict.verdict}",
            f"the gate for {key} under revision {run.revision} says {run.verdict.verdict} "
            f"({failed}; audit record {run.seq}); {key} is not armed "
            "(--override --reason TEXT arms anyway)",
            verdict_seq=run.seq,
        )
    gate_seq = run.seq
    at = format_timestamp(now)
    holder: list[Canary | None] = [None, None]

    def build(conn: apsw.Connection, first: int, head: str) -> Any:
        prior = state.canary(conn, key)
        holder[1] = prior if prior is not None and prior.armed else None
        canary = Canary(
            repo=key,
            armed=True,
            revision=run.revision,
            policy_hash=run.policy_hash,
            gate_seq=gate_seq,
            arm_seq=first,
            override=why is not None,
            trip_rate=trip_rate,
            trip_window_s=trip_window_s,
            armed_at=at,
            armed_at_us=micros_of(at),
            actor=actor,
        )
        state.put_armed(conn, canary)
        state.set_hint(home, True, durable=True)  # before the commit: never a stale "nothing"
        holder[0] = canary
        record = arm_record(
            recorded_at=at,
            actor=actor,
            repo=key,
            revision=run.revision,
            policy_hash=run.policy_hash,
            gate_seq=gate_seq,
            verdict=run.verdict.verdict,
            override_reason=why,
            trip_rate=trip_rate,
            trip_window_s=trip_window_s,
            prior_revision=None if holder[1] is None else holder[1].revision,
        )
        return iter([(at, encode_payload(record, redactor))])

    with AuditLog.open(home, redactor=redactor) as log:
        log.append_stamped(build)
    canary, prior = holder
    assert canary is not None
    return Armed(gate=run, canary=canary, prior_revision=None if prior is None else prior.revision)


def disarm(
    home: Home,
    repo: str,
    *,
    now: dt.datetime,
    actor: str,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> Canary:
    """Disarm ``repo``'s armed canary (one transaction: its row and the ``enforce-disarm``
    record), then clear the hint if nothing else is armed. Returns the canary as it was.

    Raises:
        EnforcementError: ``non-canonical-repo``, ``not-armed`` (never armed, disarmed or
            tripped already): nothing written.
        HomeError, StoreError: nothing written.
    """
    key = canonical_repo(repo)
    at = format_timestamp(now)
    holder: list[Canary] = []

    def build(conn: apsw.Connection, first: int, head: str) -> Any:
        canary = state.canary(conn, key)
        if canary is None or not canary.armed:
            what = "was never armed" if canary is None else f"is already {canary.state}"
            raise EnforcementError(NOT_ARMED, f"{key} {what}; nothing was written")
        state.end(conn, key, at=at, seq=first)
        holder.append(canary)
        record = disarm_record(
            recorded_at=at, actor=actor, repo=key, revision=canary.revision, arm_seq=canary.arm_seq
        )
        return iter([(at, encode_payload(record, redactor))])

    with AuditLog.open(home, redactor=redactor) as log:
        log.append_stamped(build)
    state.clear_hint_if_idle(home)
    return holder[0]


def status(
    home: Home, *, now: dt.datetime, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> dict[str, Any]:
    """Every canary ever armed, with the current revision beside each pin (``ahead``: a newer
    revision is saved and waits for a gate), the decisions and refusals in its trip window,
    and the hint as the file holds it.

    Raises:
        HomeError, StoreError: the database cannot be read.
    """
    now_us = micros_of(format_timestamp(now))
    with closing(home.connect()) as conn:
        try:
            head = PolicyStore(conn, vocabulary=vocabulary).head()
            rows = []
            for c in state.canaries(conn):
                window_s = c.trip_window_s or DEFAULT_TRIP_WINDOW_S
                since = now_us - window_s * 1_000_000  # rows start at the arm
                decisions, refusals = state.window_counts(conn, c.repo, since)
                current = None if head is None else head[0]
                rows.append(
                    c.to_dict()
                    | {
                        "current_revision": current,
                        "ahead": current is not None and current > c.revision,
                        "window": {
                            "seconds": window_s,
                            "decisions": decisions,
                            "refusals": refusals,
                        },
                    }
                )
        except apsw.Error as e:
            raise store_error("cannot read the enforcement state", e, home.db_path) from e
    hint, counter = state.read_hint(home)
    return {
        "armed": sorted(r["repo"] for r in rows if r["state"] == "armed"),
        "canaries": rows,
        "hint": {"may_be_armed": hint, "changes": counter},
    }
