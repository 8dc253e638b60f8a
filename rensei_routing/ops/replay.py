"""``rensei audit replay``: a log that proves its decisions, not only its bytes.

Every recorded routing decision is resolved again from its stored context against the policy
revision it cites, and must agree on outcome, reason, policy, account, model and decision id;
every recorded claim's grant check is run again against the snapshot it cites. Where the policies
come from: a decision stamped with a ``rulesetRev`` was resolved against a cached ruleset
snapshot, so its policy bundle is looked up in the snapshots this home holds (the host cache's,
the control side's history); an unstamped one against the home's policy revision history. A
revision that is present but no longer the one the record cites (another content hash) or no
longer loads is a mismatch, since the history changed under the record; so is a revision this
home never held (no decision recorded here can cite one: ``explain --record`` refuses
``--policies FILE``). A snapshot the home no longer holds is ``unreplayable: snapshot R absent``
(a host keeps only its newest); a record that disagrees only because redaction removed an input
its decision read (:func:`~rensei_routing.core.audit.replay.decisive_redaction`) is
``unreplayable: redacted input``, never a match. A marker in a field the decision does not read
changes nothing: such a record matches or mismatches like any other.

Never writes. Memory stays flat: records stream in pages, each policy set has one resolver
stream (its memos warm for the whole replay), and bounded caches keep what repeats (a repeated
payload is counted as it was the first time, unread: recognised by its stored bytes before it
is decompressed; a repeated context is resolved once).
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final

import orjson

from ..core._parse import QUICK_MIN_RECURSION_LIMIT, STRICT_DECODER
from ..core.audit.replay import (
    CLAIM,
    CLAIM_FIELDS,
    DECISION,
    DECISION_FIELDS,
    ReplaySummary,
    claim_of,
    decision_of,
    decisive_redaction,
    first_difference,
    quick_decision,
)
from ..core.redact import DEFAULT_REDACTOR, MARKER_PREFIX, Redactor
from ..core.routing._quick_members import Memo
from ..core.routing.context import RouteContext, quick_context
from ..core.routing.decision import SNAPSHOT_STATES, STATE_OK
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain_iter
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.whatif import stored_context_text
from ..core.snapshot.envelope import RulesetSnapshot
from ..core.snapshot.postures import ClaimGate
from ..errors import InputError, NotFoundError, RenseiRoutingError
from ..host.cache import HostCache
from ..store.audit import AuditLog
from ..store.backends import open_control_store
from ..store.codec import Codec
from ..store.home import Home

__all__ = ["CACHE_BYTES", "CACHE_SIZE", "Sources", "replay_chain"]

#: Replayed decisions kept for repeated contexts, and outcomes for repeated payloads.
CACHE_SIZE: Final = 20_000
#: The payload bytes the outcomes of repeated payloads may hold at most.
CACHE_BYTES: Final = 64 * 1024 * 1024

_ABSENT: Final = object()


@dataclass(frozen=True, slots=True)
class _Found:
    """A policy set to replay against, or why there is none (``problem``: a mismatch field, or
    an unreplayable reason)."""

    snapshot: PolicySnapshot | None
    state: str = "ok"
    mismatch: str | None = None
    unreplayable: str | None = None


class Sources:
    """Where a home's policy revisions and ruleset snapshots are looked up (read-only)."""

    def __init__(self, home: Home, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> None:
        self._home = home
        self._vocabulary = vocabulary
        self._found: dict[tuple[str, int, str, Any], _Found] = {}
        self._snapshots: dict[str, RulesetSnapshot | None] = {}

    def policies(
        self, revision: int, content_hash: str, ruleset_rev: str | None, state: Any = STATE_OK
    ) -> _Found:
        """The policy set a decision cites (its revision, its ``snapshot_hash`` and, for the
        empty revision 0, its ``snapshot_state``)."""
        key = (ruleset_rev or "", revision, content_hash, state)
        found = self._found.get(key)
        if found is None:
            found = self._lookup(revision, content_hash, ruleset_rev, state)
            self._found[key] = found
        return found

    def _lookup(
        self, revision: int, content_hash: str, ruleset_rev: str | None, state: Any
    ) -> _Found:
        empty = PolicySnapshot.empty()
        if revision == 0 and empty.content_hash == content_hash:
            # Nothing stored yet (absent) or a current revision that did not load (corrupt,
            # reported as revision 0): the empty set, in the state the record names.
            return _Found(empty, state if state in SNAPSHOT_STATES else STATE_OK)
        if ruleset_rev is not None:
            snap = self.snapshot(ruleset_rev)
            if snap is None:
                return _Found(None, unreplayable=f"snapshot {ruleset_rev} absent")
            try:
                bundle = PolicySnapshot.from_dict(
                    snap.sections.get("policyBundle"),
                    path="policyBundle",
                    vocabulary=self._vocabulary,
                )
            except InputError:
                return _Found(None, mismatch="policy_revision")
            if (bundle.revision, bundle.content_hash) != (revision, content_hash):
                return _Found(None, mismatch="snapshot_hash")
            return _Found(bundle, bundle.state())
        try:
            with closing(open_control_store(self._home, vocabulary=self._vocabulary)) as store:
                loaded = store.load_policies(revision)
        except NotFoundError:
            # Every decision recorded here cites a revision this home holds (``explain
            # --record`` refuses ``--policies FILE``): one citing another was not decided here.
            return _Found(None, mismatch="policy_revision")
        if loaded.state != "ok":
            return _Found(None, mismatch="policy_revision")  # the stored revision was damaged
        if loaded.snapshot.content_hash != content_hash:
            return _Found(None, mismatch="snapshot_hash")  # the history changed under the record
        return _Found(loaded.snapshot)

    def snapshot(self, ruleset_rev: str) -> RulesetSnapshot | None:
        """The verified ruleset snapshot ``ruleset_rev`` this home holds: the host cache's copy
        or the control side's stored one."""
        if ruleset_rev in self._snapshots:
            return self._snapshots[ruleset_rev]
        found: RulesetSnapshot | None = None
        try:
            held = HostCache(self._home.path / "host").load()
        except RenseiRoutingError:
            held = None
        if held is not None and held.ruleset_rev == ruleset_rev:
            found = held
        else:
            found = self._control_snapshot(ruleset_rev)
        self._snapshots[ruleset_rev] = found
        return found

    def _control_snapshot(self, ruleset_rev: str) -> RulesetSnapshot | None:
        org, _, rev = ruleset_rev.rpartition("@")
        if not rev.isdigit():
            return None
        try:
            info = self._home.info()
            if info.org != org:
                return None
            with closing(open_control_store(self._home)) as store:
                return store.load_snapshot(int(rev), lookup=self._home.snapshot_lookup())
        except RenseiRoutingError:
            return None


class _Resolver:
    """One resolver stream (:func:`explain_iter`) per policy set, fed one context at a time, so
    its memos stay warm across the whole replay."""

    def __init__(self, found: _Found, vocabulary: Vocabulary, redactor: Redactor) -> None:
        assert found.snapshot is not None
        self._slot: list[RouteContext] = []
        self._stream = explain_iter(
            self._feed(),
            found.snapshot,
            snapshot_state=found.state,
            vocabulary=vocabulary,
            redactor=redactor,
        )

    def _feed(self) -> Iterator[RouteContext]:
        while True:
            yield self._slot.pop()

    def decide(self, context: RouteContext) -> tuple[dict[str, Any], Any, bool]:
        """The replayed decision's compared fields, its policy source, and whether a policy
        was applied (the accounts were read)."""
        self._slot.append(context)
        decision = next(self._stream)
        fields = {name: getattr(decision, name) for name in DECISION_FIELDS}
        return fields, decision.policy_source, decision.policy_id is not None


def replay_chain(
    log: AuditLog,
    sources: Sources,
    *,
    since: int = 0,
    stop: int | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    redactor: Redactor = DEFAULT_REDACTOR,
    progress: Callable[[int], None] | None = None,
    repeats: bool = True,
) -> ReplaySummary:
    """Replay every record with ``since <= seq < stop`` (to the end by default), across the
    log's segments; ``progress(seq)`` every 1,000 records.

    A record's outcome is a function of its payload bytes alone (the policy sets and snapshots
    are looked up once, a context resolves to one decision), so a payload seen before is
    counted as it was then without being read again, recognised by its stored bytes under the
    same dictionaries (:meth:`.AuditLog.stored_payloads`) before any decompression;
    ``repeats=False`` reads and decides every one through the SQL function (the plain path,
    which tests compare this against).

    Raises:
        StoreError: the log cannot be read.
    """
    summary = ReplaySummary()
    replay = _Replay(sources, vocabulary, redactor)
    if not repeats:
        for record in log.records(start=since, stop=stop):
            if progress is not None and record.seq % 1_000 == 0:
                progress(record.seq)
            _tally(summary, record.seq, replay.outcome(record.seq, record.payload_bytes))
        return summary
    # Per distinct stored bytes under one codec: the outcome of the payload they read as
    # (bounded in count and bytes, oldest dropped first). A repeated record is recognised
    # before it is decompressed: the same stored bytes read through the same dictionaries are
    # the same payload.
    outcomes: OrderedDict[bytes, _Outcome] = OrderedDict()
    held = 0
    reading: Codec | None = None
    # Matches per kind, added to the summary at the end (a match names no record).
    matched: dict[str, int] = {}
    for codec, rows in log.stored_payloads(start=since, stop=stop):
        if codec is not reading:
            reading = codec
            outcomes.clear()
            held = 0
        get = outcomes.get
        for seq, stored in rows:
            if progress is not None and seq % 1_000 == 0:
                progress(seq)
            outcome = get(stored)
            if outcome is None:
                outcome = replay.outcome(seq, bytes(codec.inflate(stored)))
                outcomes[stored] = outcome
                held += len(stored)
                while len(outcomes) > CACHE_SIZE or held > CACHE_BYTES:
                    held -= len(outcomes.popitem(last=False)[0])
            if outcome[0] is _MATCH:
                kind = outcome[1]
                matched[kind] = matched.get(kind, 0) + 1
            else:
                _tally(summary, seq, outcome)
    for kind, count in matched.items():
        summary.matched += count
        summary.by_kind[kind] = summary.by_kind.get(kind, 0) + count
    return summary


#: A payload's outcome: ``(_MATCH, kind)``, ``(_MISMATCH, kind, field)``, ``(_CANNOT, reason)``
#: or ``(_SKIP,)``; counted against a record by :func:`_tally`.
_Outcome = tuple[str, ...]
_MATCH: Final = "match"
_MISMATCH: Final = "mismatch"
_CANNOT: Final = "cannot"
_SKIP: Final = ("skip",)


def _tally(summary: ReplaySummary, seq: int, outcome: _Outcome) -> None:
    verb = outcome[0]
    if verb is _MATCH:
        summary.match(outcome[1])
    elif verb is _MISMATCH:
        summary.mismatch(seq, outcome[1], outcome[2])
    elif verb is _CANNOT:
        summary.cannot(seq, outcome[1])
    else:
        summary.skipped += 1


class _Replay:
    """What one replay keeps across its records: one resolver stream per policy set, the
    decisions replayed per stored context, parsed decision texts."""

    def __init__(self, sources: Sources, vocabulary: Vocabulary, redactor: Redactor) -> None:
        self._sources = sources
        self._vocabulary = vocabulary
        self._redactor = redactor
        # Per context text: the replayed fields, and whether the stored context lost an input
        # that decision read to redaction.
        self._replayed: OrderedDict[tuple[int, str], tuple[dict[str, Any], bool]] = OrderedDict()
        self._resolvers: dict[int, _Resolver] = {}
        self._memo: Memo = {}

    def outcome(self, seq: int, data: bytes) -> _Outcome:
        """The outcome of the record ``seq`` whose payload bytes are ``data`` (``seq`` only
        names the record in an error path; the outcome never depends on it)."""
        text = _text(data)
        recorded = _recorded(text, self._sources)
        if not isinstance(recorded, _Decision):
            return recorded
        assert text is not None
        kind, fields, found = recorded.kind, recorded.fields, recorded.found
        # The context's stored text keys the cache, found without parsing it (a repeated
        # context is neither parsed nor resolved again); a payload whose text does not show it
        # (not canonical) is keyed by the parsed context's own canonical text.
        context_text = stored_context_text(text)
        marked = MARKER_PREFIX in (text if context_text is None else context_text)
        key = (id(found), context_text or "")
        replayed = self._replayed
        cached = replayed.get(key) if context_text is not None else None
        if cached is None:
            context_doc = _context_doc(fields, context_text)
            marked = marked and isinstance(context_doc, Mapping)
            vocabulary = self._vocabulary
            try:
                context = None if marked else quick_context(context_doc, vocabulary, self._memo)
                context = context or RouteContext.from_dict(
                    context_doc,
                    path=f"audit[{seq}].context",
                    vocabulary=vocabulary,
                    redacted=marked,
                )
            except InputError:
                return (_CANNOT, "unreadable context")
            resolver = self._resolvers.get(id(found))
            if resolver is None:
                resolver = self._resolvers[id(found)] = _Resolver(found, vocabulary, self._redactor)
            decided, source, applied = resolver.decide(context)
            lost = marked and decisive_redaction(context_doc, policy_source=source, applied=applied)
            cached = (decided, lost)
            if context_text is not None:
                replayed[key] = cached
                if len(replayed) > CACHE_SIZE:
                    replayed.popitem(last=False)
        decided, redacted = cached
        field_name = first_difference(fields, decided, DECISION_FIELDS)
        if field_name is None:
            return (_MATCH, kind)
        if redacted:
            return (_CANNOT, "redacted input")
        return (_MISMATCH, kind, field_name)


@dataclass(frozen=True, slots=True)
class _Decision:
    """A record's decision to replay: its kind, its recorded fields, the policy set it cites."""

    kind: str
    fields: Mapping[str, Any]
    found: _Found


def _recorded(text: str | None, sources: Sources) -> _Decision | _Outcome:
    """The record's decision (kind, its fields, the policy set it cites), or the record's
    outcome when it is counted otherwise (a claim replayed, skipped, unreadable,
    unreplayable)."""
    if text is None:
        return (_CANNOT, "unreadable payload")
    quick = quick_decision(text)
    fields: Mapping[str, Any]
    if quick is not None:
        kind, head, tail = quick
        first, last = _loads(head), _loads(tail)
        if not (isinstance(first, dict) and isinstance(last, dict)):
            return (_CANNOT, "unreadable payload")
        fields = {**first, **last}
        ruleset_rev = fields.get("rulesetRev") if kind == DECISION else None
    else:
        payload = _loads(text)
        if payload is _ABSENT:
            return (_CANNOT, "unreadable payload")
        claim = claim_of(payload)
        if claim is not None:
            return _replay_claim(claim, sources)
        found_decision = decision_of(payload)
        if found_decision is None:
            return _SKIP
        kind, fields = found_decision
        ruleset_rev = payload.get("rulesetRev") if kind == DECISION else None
    revision, content_hash = fields.get("policy_revision"), fields.get("snapshot_hash")
    if not (isinstance(revision, int) and isinstance(content_hash, str)):
        return (_CANNOT, "no policy revision")
    found = sources.policies(
        revision,
        content_hash,
        ruleset_rev if isinstance(ruleset_rev, str) else None,
        fields.get("snapshot_state", STATE_OK),
    )
    if found.unreplayable is not None:
        return (_CANNOT, found.unreplayable)
    if found.mismatch is not None:
        return (_MISMATCH, kind, found.mismatch)
    return _Decision(kind, fields, found)


def _context_doc(recorded: Mapping[str, Any], context_text: str | None) -> Any:
    """The stored context as a document: from the record's explanation when it was parsed,
    else from its stored text (strictly)."""
    explanation = recorded.get("explanation")
    if isinstance(explanation, Mapping):
        return explanation.get("context")
    if context_text is None:
        return None
    found = _proven(context_text)
    if found is not _ABSENT:
        return found
    try:
        return STRICT_DECODER.decode(context_text)
    except (ValueError, RecursionError):
        return None


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _loads(text: str) -> Any:
    """The stored payload (or a decision's own fields) as JSON. Stored payloads are canonical
    JSON and ``verify`` holds each to the strict reading (no duplicate keys, no constants), so
    replay reads them with the fast decoder: replay proves decisions, verify proves bytes."""
    found = _proven(text)
    if found is not _ABSENT:
        return found
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _ABSENT


def _proven(text: str) -> Any:
    """The value of ``text`` read by orjson, when orjson writes that value back as ``text``
    byte for byte; else ``_ABSENT`` (the caller reads it its own way).

    Such a text is a JSON writer's output (the quick proof of
    :func:`~rensei_routing.core._parse.is_strict_json`): no duplicate key, no constant, 64-bit
    integers, nested at most 254 deep, so both the strict decoder and ``json.loads`` read it,
    to this same value. A stored canonical payload's pieces are such texts."""
    if sys.getrecursionlimit() < QUICK_MIN_RECURSION_LIMIT:
        return _ABSENT
    try:
        data = text.encode("utf-8")
        value = orjson.loads(data)
        if orjson.dumps(value) == data:
            return value
    except (ValueError, TypeError):  # a lone surrogate; orjson.JSONDecodeError, JSONEncodeError
        pass
    return _ABSENT


def _replay_claim(
    claim: tuple[str, str | None, str, Mapping[str, Any]], sources: Sources
) -> _Outcome:
    pool, project, ruleset_rev, recorded = claim
    snap = sources.snapshot(ruleset_rev)
    if snap is None:
        return (_CANNOT, f"snapshot {ruleset_rev} absent")
    result = ClaimGate(snap.sections).check(pool, project)
    replayed = {"allowed": result.admitted, "reason": result.reason}
    field_name = first_difference(recorded, replayed, CLAIM_FIELDS)
    if field_name is None:
        return (_MATCH, CLAIM)
    return (_MISMATCH, CLAIM, field_name)
