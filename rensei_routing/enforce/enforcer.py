"""The Enforcer: what a spawn seam asks before it spawns, over one home. Answers ``NotGoverned``
(the spawn runs exactly as before), an ``EnforcedRoute`` (the route policy chose, or the
spawn's own route when no policy claims it, with the lineage of its decision), or raises
``EnforcementRefused`` (held, rejected, tripped) before the caller obtains any credential.

Every governed answer, refusals included, is an audit record committed before it is returned;
the trip's count of the canary's decisions commits with it (``store.enforcement``). With
nothing armed, a call reads one byte of a mapped file and nothing else: no database, no policy,
no snapshot. Holds no rule (``core.enforce`` decides); not for several threads at once.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Callable, Iterable
from contextlib import closing
from typing import Any, Final

import apsw

from ..core.audit.chain import encode_payload
from ..core.enforce.bound import (
    HELD,
    NOTHING_ARMED,
    REJECTED,
    REPO_NOT_ARMED,
    TRIPPED,
    Canary,
    NotGoverned,
    bound_of,
    transport_bound,
)
from ..core.enforce.records import (
    RecordTemplate,
    decision_template,
    encode_decision_record,
    trip_record,
)
from ..core.enforce.route import ENFORCED, LEGACY_COMPATIBLE, EnforcedRoute
from ..core.enforce.trip import (
    DEFAULT_TRIP_WINDOW_S,
    POLICY_STORE_CORRUPT,
    TRIP_REFUSAL_RATE,
    TripRule,
)
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.context import RouteContext
from ..core.routing.decision import (
    SELECTED,
    SOURCE_MANAGED,
    STATE_CORRUPT,
    STATE_OK,
    RouteDecision,
)
from ..core.routing.ids import ScanMemo
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import RECORD_TRACE, explain
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.compare import ActualRoute, Stage
from ..core.shadow.facts import micros_of
from ..core.shadow.spawn import Spawn, spawn_route
from ..errors import EnforcementRefused, NotFoundError, StoreError
from ..plugins.manager import SeamRegistry, safe_classify
from ..shadow.recorder import utc_now
from ..shadow.seam import SeamService
from ..store import enforcement as state
from ..store.db import store_error
from ..store.home import Home
from ..store.policies import PolicyStore

__all__ = ["Enforcer"]

logger: Final = logging.getLogger("rensei_routing.enforce")

_NOTHING_ARMED: Final = NotGoverned(NOTHING_ARMED)
#: A closed Enforcer's hint: "something may be armed", so a call reaches the check that refuses.
_CLOSED: Final = b"\x01"
#: A canary re-armed or disarmed between the read and the write: read again, this many times.
_RETRIES: Final = 3
#: The trip window's rows older than any window still asked about are deleted at one decision
#: in this many of an Enforcer's (its first included), and at every refusal (before the window
#: is counted); the count only reads rows inside the window, so the ones left are never counted.
FORGET_EVERY: Final = 64
#: The most questions (a spawn and the stage its seam's classifier named) an Enforcer keeps
#: the route and decisions of (all forgotten when it is full).
ASKED_LIMIT: Final = 256

#: A kept decision: the decision, its answer, account and model, and its record's template
#: (``None``: the record takes the plain path) and the fields the record is written from.
_Made = tuple[RouteDecision, str, str | None, str | None, RecordTemplate | None, dict[str, Any]]


class _Asked:
    """One question asked before: the seam it was routed at, its context and actual route
    (:func:`spawn_route` of the spawn, that seam and the deciding stage), and the decisions
    made on it, by pin (repository, revision, policy hash)."""

    __slots__ = ("actual", "context", "made", "seam")

    def __init__(self, seam: object, context: RouteContext, actual: ActualRoute) -> None:
        self.seam = seam
        self.context = context
        self.actual = actual
        self.made: dict[tuple[str, int, str], _Made] = {}


class _Outcome:
    """What the write transaction found: whether the canary was still the one decided under,
    and whether the decision tripped it."""

    __slots__ = ("stale", "trip")

    def __init__(self) -> None:
        self.stale = False
        self.trip: str | None = None


class Enforcer(SeamService):
    """Answers spawns of one initialised home against its armed canaries, live: an arm, disarm
    or trip by any process applies from the next call. Opens the database only when the hint
    says something may be armed; keeps its connections, the pinned revisions it loaded, and
    per question asked (a spawn and the stage its seam's classifier named) the route, the
    decision under each pin and that decision's record but its time.

    Raises (constructor):
        HomeError: the home is not initialised.
        StoreError: the database cannot be read (only when the hint file must be created).
        OSError: the hint file cannot be created or mapped.
    """

    __slots__ = ("_armed", "_asked", "_hint", "_loaded", "_noted", "_scan")

    def __init__(
        self,
        home: Home,
        registry: SeamRegistry,
        *,
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redactor: Redactor = DEFAULT_REDACTOR,
        clock: Callable[[], str] = utc_now,
    ) -> None:
        super().__init__(home, registry, vocabulary, redactor, clock)
        self._loaded: dict[tuple[int, str], PolicySnapshot | None] = {}
        #: The armed canaries as last read (``None``: read them): a governed answer decided
        #: under one is written only if its write transaction finds that canary still armed
        #: (the same arm), so only an answer of "not governed" needs them read afresh.
        self._armed: dict[str, Canary] | None = None
        self._noted = 0  # the decisions this Enforcer has recorded
        #: The questions asked before, by spawn and deciding stage (see :meth:`_route`).
        self._asked: dict[tuple[Spawn, Stage], _Asked] = {}
        self._scan = ScanMemo(redactor)  # the redaction pre-check of its records' strings
        home.info()
        armed_now = False
        if not (home.path / state.HINT_FILE).exists():
            with closing(home.connect()) as conn:
                armed_now = bool(_read_armed(conn, home))
        self._hint: mmap.mmap | bytes = state.map_hint(home, armed_now=armed_now)

    # -- the answer ---------------------------------------------------------------------------

    def enforce(self, spawn: Spawn) -> EnforcedRoute | NotGoverned:
        """The canary's answer for ``spawn`` (the same value shadow recording takes).

        Raises:
            EnforcementRefused: ``held`` or ``rejected`` by the pinned revision, or ``tripped``
                (this decision, or a corrupt policy store, disarmed the canary); its record is
                committed.
            UnknownSeamError: the spawn's seam is not registered.
            HomeError, StoreError: the home or its database cannot be used (nothing recorded;
                the caller decides, and should not spawn a governed spawn it could not record).
        """
        if not self._hint[0]:  # the whole cost of a call with nothing armed
            return _NOTHING_ARMED
        return self._governed(spawn)

    def _governed(self, spawn: Spawn) -> EnforcedRoute | NotGoverned:
        if self._hint is _CLOSED:
            raise StoreError("this Enforcer is closed")
        routed: _Asked | None = None
        reads = 0
        while True:
            armed = self._armed
            if armed is None:
                if reads == _RETRIES:  # armed and disarmed under us, again and again
                    return NotGoverned(REPO_NOT_ARMED)
                armed = self._armed = _read_armed(self._reader(), self._home)
                reads += 1
            bound = bound_of(spawn.repo, armed)
            if isinstance(bound, NotGoverned):
                if not reads:  # the canaries as last read: one may have been armed since
                    self._armed = None
                    continue
                return bound
            if routed is None:
                routed = self._route(spawn)
            outside = transport_bound(routed.actual.transport)
            if outside is not None:
                if not reads:  # answered only from canaries read for this call
                    self._armed = None
                    continue
                return outside
            answer = self._decide(spawn, bound, routed)
            if answer is not None:
                return answer
            self._armed = None  # the canary changed before the write: read them again

    def _route(self, spawn: Spawn) -> _Asked:
        """:meth:`route` of ``spawn``, kept: the seam's classifier runs at every call (a
        plugin's), and its context and actual route (pure functions of the spawn, the seam and
        the stage the classifier named) are the ones kept for the same question at the same
        seam.

        Raises:
            UnknownSeamError: the spawn's seam is not registered.
        """
        seam = self._registry.get(spawn.seam)
        deciding = safe_classify(self._registry, seam.name, spawn.resolved_stages(seam))
        key = (spawn, deciding)
        try:
            asked = self._asked.get(key)
        except TypeError:  # a value built by hand that does not hash: nothing kept
            return _Asked(seam, *spawn_route(spawn, seam, deciding))
        if asked is None or asked.seam is not seam:
            asked = _Asked(seam, *spawn_route(spawn, seam, deciding))
            if len(self._asked) >= ASKED_LIMIT:
                self._asked.clear()
            self._asked[key] = asked
        return asked

    def _decide(self, spawn: Spawn, canary: Canary, asked: _Asked) -> EnforcedRoute | None:
        """Decide under the pinned revision and record it; ``None`` when the canary changed
        before the record could be written (nothing written: the caller reads again)."""
        actual = asked.actual
        snapshot = self._pinned(canary)
        # Deciding is pure (the context, the pinned snapshot, this Enforcer's vocabulary and
        # redactor), and so is the record but its time: the same question under the same pin
        # is answered and written from what the first one left.
        pin = (canary.repo, canary.revision, canary.policy_hash)
        made = None if snapshot is None else asked.made.get(pin)
        if made is None:
            made = self._make(spawn, canary, snapshot, asked.context, actual)
            if snapshot is not None:
                if len(asked.made) >= ASKED_LIMIT:
                    asked.made.clear()
                asked.made[pin] = made
        decision, answer, account, model, template, fields = made
        recorded_at = self._clock()
        encoded = None if template is None else template.encode(self._redactor, recorded_at)
        if encoded is None:
            encoded = encode_decision_record(
                self._redactor, self._scan, recorded_at=recorded_at, **fields
            )
        outcome = _Outcome()
        refused = answer in (HELD, REJECTED)
        build = self._writer(
            canary, recorded_at, encoded, outcome, refused=refused, corrupt=snapshot is None
        )
        result = self._audit().append_stamped(build, own=True)  # its encode_payload, byte for byte
        if outcome.stale:
            return None
        seq = result.first_seq
        if outcome.trip is not None:
            self._armed = None  # this canary is disarmed
            self._clear_hint()
            raise EnforcementRefused(
                TRIPPED,
                f"the canary of {canary.repo} tripped ({outcome.trip}) and is disarmed; "
                f"decision {decision.decision_id} is audit record {seq}",
                decision_id=decision.decision_id,
                seq=seq,
            )
        if refused:
            raise EnforcementRefused(
                answer,
                f"{decision.reason}: revision {canary.revision} {answer} this spawn of "
                f"{canary.repo}; decision {decision.decision_id} is audit record {seq}",
                decision_id=decision.decision_id,
                seq=seq,
            )
        return EnforcedRoute(
            kind=answer,
            provider=actual.provider,
            account_id=account,
            model=model,
            policy_id=decision.policy_id,
            revision=canary.revision,
            policy_hash=canary.policy_hash,
            decision_id=decision.decision_id,
            seq=seq,
        )

    def _make(
        self,
        spawn: Spawn,
        canary: Canary,
        snapshot: PolicySnapshot | None,
        context: RouteContext,
        actual: ActualRoute,
    ) -> _Made:
        """The decision on ``context`` under the pinned ``snapshot`` (``None``: it does not
        load), its answer, and its record's template (``None``: the record takes the plain
        path, see :func:`decision_template`)."""
        decision = explain(
            context,
            PolicySnapshot.empty() if snapshot is None else snapshot,
            snapshot_state=STATE_CORRUPT if snapshot is None else STATE_OK,
            vocabulary=self._vocabulary,
            redactor=self._redactor,
            trace=RECORD_TRACE,
        )
        answer, account, model = _answer(decision, actual)
        # Written here, not in the append's builder: the builder runs in the write transaction,
        # which the appends of every thread share (a commit's leader runs them one after another).
        fields: dict[str, Any] = {
            "seam": spawn.seam,
            "principal_id": spawn.principal_id,
            "repo": canary.repo,
            "answer": answer,
            "provider": actual.provider,
            "account_id": account,
            "model": model,
            "revision": canary.revision,
            "policy_hash": canary.policy_hash,
            "decision": decision,
        }
        template = decision_template(self._redactor, self._scan, **fields)
        return decision, answer, account, model, template, fields

    def _writer(
        self,
        canary: Canary,
        recorded_at: str,
        encoded: bytes,
        outcome: _Outcome,
        *,
        refused: bool,
        corrupt: bool,
    ) -> Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]]:
        """The append's builder: checks the canary is still the one decided under, counts the
        decision in the trip's window, applies the trip rule, and yields the records."""
        redactor = self._redactor
        at_us = micros_of(recorded_at)
        counted = refused or corrupt  # the window is counted, so it is trimmed first
        forget = counted or self._noted % FORGET_EVERY == 0
        self._noted += 1

        def build(conn: apsw.Connection, first: int, head: str) -> Iterable[tuple[str, bytes]]:
            window_s = canary.trip_window_s or DEFAULT_TRIP_WINDOW_S
            since_us = at_us - window_s * 1_000_000  # the rows start at the arm (put_armed)
            # One statement checks the canary is still the one decided under and counts the
            # decision (each statement of the shared write transaction is a GIL hand-off).
            if not state.note_decision(
                conn,
                canary.repo,
                first,
                at_us,
                refused or corrupt,
                since_us if forget else None,
                arm_seq=canary.arm_seq,
            ):
                outcome.stale = True
                return []
            # Only a refusal can newly trip the rate (an answer that is not one adds a decision
            # and no refusal), so the window is counted only then, or for a trip's record.
            decisions = refusals = 0
            if corrupt or (refused and canary.trip_rate is not None):
                decisions, refusals = state.window_counts(conn, canary.repo, since_us)
            if corrupt:
                outcome.trip = POLICY_STORE_CORRUPT
            elif refused and canary.trip_rate is not None:
                rule = TripRule(rate=canary.trip_rate, window_s=window_s)
                if rule.trips(decisions, refusals):
                    outcome.trip = TRIP_REFUSAL_RATE
            pairs = [(recorded_at, encoded)]
            if outcome.trip is not None:
                state.end(
                    conn, canary.repo, at=recorded_at, seq=first + 1, trip_reason=outcome.trip
                )
                trip = trip_record(
                    recorded_at=recorded_at,
                    repo=canary.repo,
                    reason=outcome.trip,
                    revision=canary.revision,
                    armed_by=canary.actor,
                    arm_seq=canary.arm_seq,
                    decision_seq=first,
                    decisions=decisions,
                    refusals=refusals,
                    trip_rate=canary.trip_rate,
                    trip_window_s=canary.trip_window_s,
                    detail=None if not corrupt else "the pinned revision does not load",
                )
                pairs.append((recorded_at, encode_payload(trip, redactor)))
            return pairs  # a list: the append links it at once

        return build

    def _pinned(self, canary: Canary) -> PolicySnapshot | None:
        """The pinned revision's snapshot, or ``None`` when it does not load or no longer has
        the pinned hash (a corrupt policy store: the canary trips)."""
        key = (canary.revision, canary.policy_hash)
        if key in self._loaded:
            return self._loaded[key]
        snapshot: PolicySnapshot | None
        try:
            loaded = PolicyStore(self._reader(), vocabulary=self._vocabulary).load(canary.revision)
        except NotFoundError:
            snapshot = None
        else:
            ok = bool(loaded) and loaded.snapshot.content_hash == canary.policy_hash
            snapshot = loaded.snapshot if ok else None
        if snapshot is not None:  # a corrupt read is read again next time (it may be repaired)
            self._loaded[key] = snapshot
        return snapshot

    # -- resources ----------------------------------------------------------------------------

    def _clear_hint(self) -> None:
        try:
            state.clear_hint_if_idle(self._home)
        except (StoreError, OSError) as e:  # the hint stays set: safe, only slower
            logger.warning("enforcement hint not cleared after a trip: %s", e)

    def close(self) -> None:
        """Close what this Enforcer opened (idempotent); it answers nothing afterwards."""
        super().close()
        if isinstance(self._hint, mmap.mmap):
            self._hint.close()
        self._hint = _CLOSED
        self._loaded.clear()
        self._asked.clear()
        self._armed = None


def _read_armed(conn: apsw.Connection, home: Home) -> dict[str, Canary]:
    try:
        return state.armed(conn)
    except apsw.Error as e:
        raise store_error("cannot read the enforcement state", e, home.db_path) from e


def _answer(decision: RouteDecision, actual: ActualRoute) -> tuple[str, str | None, str | None]:
    """``(answer, account, model)``: a managed policy's route, the spawn's own (no policy
    claims it), or the refusal code of a held or rejected decision."""
    if decision.outcome != SELECTED:
        return decision.outcome, None, None
    if decision.policy_source == SOURCE_MANAGED:
        return ENFORCED, decision.account_id, decision.effective_model or actual.model
    return LEGACY_COMPATIBLE, actual.account_id, actual.model
