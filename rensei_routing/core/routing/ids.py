"""Decision ids: the digest of a decision's nine documented fields, over their redacted form.

Pure: no I/O, no clock. The id is ``sha256:`` + SHA-256 of the RFC 8785 form of::

    {"account_id", "context", "effective_model", "outcome", "policy_id",
     "policy_revision", "reason", "snapshot_hash", "snapshot_state"}

with every string in it passed through a :class:`~rensei_routing.core.redact.Redactor` first
(the one the audit log uses; the default unless the host extends it). So the id is computed
from exactly what a recorded decision stores: anyone holding the record recomputes the id
(:func:`record_decision_id`), and nobody can use the id to test guesses of a redacted secret.
A preimage with nothing to redact (the redactor's trigger gates find nothing in it) is hashed as
it is, so such ids are the ones earlier versions computed. One ``decision_id`` call scans the
preimage's canonical text once; ``explain_batch`` passes a :class:`ScanMemo`, which checks each
distinct string of a batch once (accounts, repos, principals repeat) for the same answer.

Not supported: a redactor whose ``secret_keys`` name one of the id's own field names (say
``account_id``): the audit log would then redact such a field wholesale or not depending on
whether anything else in the record trips a trigger, so no id could follow it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring as _e
from operator import attrgetter
from typing import Any, Final

from .. import _parse as p
from ..canonical import SHA256_PREFIX, canonical_bytes
from ..canonical import json_string as _s
from ..redact import DEFAULT_REDACTOR, Redactor
from .context import CONTEXT_FIELDS, RouteContext
from .decision import DECISION_FIELDS, STAMP_FIELDS, RouteDecision
from .explanation import COMPACT, EXPLANATION_MEMBERS, UNMATCHED, full_context
from .members import Account, LegacyRoute, id_head, id_tail, id_tail_end, question_texts, repo_json

__all__ = [
    "ID_FIELDS",
    "LEGACY_VALUE",
    "MEMO_LIMIT",
    "RECORD_KEYS",
    "IdPieces",
    "ScanMemo",
    "decision_id",
    "id_head",
    "id_question",
    "id_tail",
    "record_decision_id",
]

#: The decision fields the id covers (``context`` is the explanation's).
ID_FIELDS: Final = (
    "account_id",
    "context",
    "effective_model",
    "outcome",
    "policy_id",
    "policy_revision",
    "reason",
    "snapshot_hash",
    "snapshot_state",
)
_REQUIRED: Final = ("outcome", "policy_revision", "reason", "snapshot_hash", "snapshot_state")
_OPTIONAL: Final = ("account_id", "effective_model", "policy_id")
_MAX_SAFE_INT: Final = 2**53 - 1
#: A decision id as :func:`decision_id` writes it, and every character one can hold.
_ID_SHAPE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_ID_CHARS: Final = frozenset("sha256:0123456789abcdef")


def _digest(preimage: Mapping[str, Any], redactor: Redactor) -> str:
    """The id of a preimage given as a JSON value (the general, slower path)."""
    return SHA256_PREFIX + hashlib.sha256(canonical_bytes(redactor.redact(preimage))).hexdigest()


def _id_gate(triggers: list[str]) -> re.Pattern[str] | None:
    """One alternation of ``triggers`` (literal), or ``None`` when there is none."""
    return re.compile("|".join(re.escape(t) for t in triggers)) if triggers else None


class ScanMemo:
    """The redactor's pre-check (:meth:`Redactor.might_match`), remembered per distinct string
    for one batch of decisions: account entries, repos, principals, models and policy ids
    repeat across a batch, so most pieces of a preimage are looked up, not scanned (and so is
    the text of a preimage's fields after its context, :meth:`id_tail`).

    Checking the pieces one by one answers what one scan of the preimage's canonical text
    would: a trigger holds no quote (``RedactionPattern`` refuses one), so no trigger match can
    span two JSON strings, and what lies between them (keys, punctuation, literals) is never
    redacted. Bounded: the memo is cleared when it reaches :data:`MEMO_LIMIT` strings.
    """

    __slots__ = (
        "_clean",
        "_id_gate",
        "_ids_scanned",
        "_keys_suspect",
        "_redactor",
        "_seen",
        "_tails",
    )

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._seen: dict[str, bool] = {}
        # The strings found clean (and None, which holds nothing): a piece set made only of
        # them is answered by one C-level subset test.
        self._clean: set[str | None] = {None}
        self._keys_suspect: bool | None = None
        self._tails: dict[tuple[Any, ...], str] = {}
        # The pre-check looks for a trigger in the text, and a trigger holding a character no
        # decision id holds never occurs in one: an id of that shape is searched for the few
        # others only (none: no search). Without triggers every id takes the pre-check itself.
        triggers = getattr(redactor, "triggers", None)
        self._id_gate = _id_gate(
            [] if triggers is None else [t for t in triggers if set(t) <= _ID_CHARS]
        )
        self._ids_scanned = triggers is None

    def id_tail(self, *fields: Any) -> str:
        """:func:`id_tail` of ``fields``, written once per distinct fields (a batch's outcomes,
        reasons, policies and models repeat; its snapshot is one)."""
        tails = self._tails
        tail = tails.get(fields)
        if tail is None:
            if len(tails) >= MEMO_LIMIT:
                tails.clear()
            tail = tails[fields] = id_tail(*fields)
        return tail

    def seen_clean(self, texts: tuple[str | None, ...]) -> bool:
        """Whether every one of ``texts`` was found clean before (``False``: not known)."""
        return self._clean.issuperset(texts)

    def may_redact(self, texts: Iterable[str | None]) -> bool:
        """Whether the redactor might change any of ``texts`` (``None`` holds nothing)."""
        clean = self._clean
        if not isinstance(texts, (tuple, list)):
            texts = tuple(texts)
        if clean.issuperset(texts):
            return False
        seen, might_match = self._seen, self._redactor.might_match
        for text in texts:
            if text is None:
                continue
            hit = seen.get(text)
            if hit is None:
                if len(seen) >= MEMO_LIMIT:
                    seen.clear()
                    clean.clear()
                    clean.add(None)
                hit = seen[text] = might_match(text)
                if not hit:
                    clean.add(text)
            if hit:
                return True
        return False

    def preimage_may_redact(
        self,
        context: RouteContext,
        fields: tuple[str | None, ...],
        accounts: tuple[str, ...] | None = None,
    ) -> bool:
        """Whether the redactor might change any string of ``context`` or of ``fields``.

        ``accounts`` is the account entries' canonical texts, when the caller has them.
        """
        legacy, repo, req = context.legacy_route, context.repo, context.model_requirement
        pieces = (
            *(
                [account.canonical_json() for account in context.accounts]
                if accounts is None
                else accounts
            ),
            None if legacy is None else legacy.canonical_json(),
            context.principal_id,
            context.repo_class,
            context.role,
            context.request_face,
            None if repo is None else repo.value,
            None if repo is None else repo.version,
            None if req is None else req.kind,
            None if req is None else req.value,
            *fields,
        )
        # Every piece seen clean before (a live stream's usual case): one C-level subset test.
        return not self._clean.issuperset(pieces) and self.may_redact(pieces)

    def record_may_redact(self, decision: RouteDecision, ruleset_rev: str | None) -> bool:
        """Whether the redactor might change any string of ``decision``'s record (its JSON,
        stamped with ``ruleset_rev``), keys included: when ``False``, the record's stored form
        is its canonical bytes as they are (what ``encode_payload`` then returns)."""
        if self._keys_suspect is None:
            # The keys, and the one fixed value a compact explanation adds ("trace").
            self._keys_suspect = self._redactor.might_match(" ".join(RECORD_KEYS))
        if self._keys_suspect:
            return True
        ex = decision.explanation
        # The id is new with every decision: checked on its own, never remembered (a memo of
        # ids would only fill up and be cleared, losing the strings that do repeat).
        did, gate = decision.decision_id, self._id_gate
        if self._ids_scanned or _ID_SHAPE.fullmatch(did) is None:
            if self._redactor.might_match(did):
                return True
        elif gate is not None and gate.search(did) is not None:
            return True
        return self.preimage_may_redact(
            ex.context,
            (
                decision.outcome,
                decision.reason,
                decision.policy_source,
                decision.policy_id,
                decision.snapshot_hash,
                decision.snapshot_state,
                decision.account_id,
                decision.provider_binding,
                decision.effective_model,
                ruleset_rev,
            ),
        ) or self.may_redact(
            (
                *(c.policy_id for c in ex.considered),
                *(c.reason for c in ex.considered),
                *ex.eligible_account_ids,
                *(r.account_id for r in ex.rejected_accounts),
                *(r.reason for r in ex.rejected_accounts),
                *ex.conflicting_policy_ids,
            )
        )


#: Every object key a stamped decision record can hold (checked once per memo): the decision's,
#: its explanation's, its context's and theirs (repo, requirement, legacy route, account, trace
#: entry, rejection), and the stamp's. A test collects the keys of generated records.
RECORD_KEYS: Final = (
    *DECISION_FIELDS,
    "context",
    *EXPLANATION_MEMBERS,
    COMPACT,  # a compact explanation's marker (the value of its "trace")
    *CONTEXT_FIELDS,
    "value",
    "version",
    "kind",
    "mechanism",
    "mechanism_detail",
    "model",
    "configured",
    "administrative_state",
    "matched",
    "priority",
    *STAMP_FIELDS,
)

#: Strings a :class:`ScanMemo` remembers before it starts again.
MEMO_LIMIT: Final = 65_536


#: An account entry's whole value (its canonical text is a function of it) and a legacy
#: route's: :class:`IdPieces` keeps their texts by value, so a batch of contexts built from
#: fresh objects writes each distinct one once.
ACCOUNT_VALUE: Final = attrgetter(
    "account_id", "provider_binding", "configured", "administrative_state"
)
LEGACY_VALUE: Final = attrgetter(
    "provider_binding", "account_id", "model", "mechanism", "mechanism_detail"
)


class IdPieces:
    """What one batch's id preimages share, kept for its fast path: the account entries' and
    legacy routes' texts by value, and the SHA-256 state after each distinct :func:`id_head`
    and the bytes of each distinct :func:`id_tail`, each ``False`` when the redactor might
    change one of its strings (checked once, with the batch's :class:`ScanMemo`). A decision
    whose pieces are all clean gets ``sha256:`` + the digest of a copy of its head's state
    updated with its question's piece (:func:`id_question`) and its tail: the digest of the
    whole preimage, which is what :func:`decision_id` hashes when nothing is to be redacted.
    Bounded: each memo is cleared when it reaches :data:`MEMO_LIMIT` entries."""

    __slots__ = (
        "account_lists",
        "account_texts",
        "ends",
        "heads",
        "legacy_texts",
        "memo",
        "state",
        "tails",
        "texts",
    )

    def __init__(self, memo: ScanMemo, state: str) -> None:
        self.memo = memo
        self.state = state
        # One object per distinct account text: memo keys compare them by identity.
        self.texts: dict[str, str] = {}
        self.account_texts: dict[tuple[Any, ...], str] = {}
        self.account_lists: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self.legacy_texts: dict[tuple[Any, ...], str] = {}
        self.heads: dict[tuple[Any, ...], Any] = {}
        self.tails: dict[tuple[Any, ...], bytes | bool] = {}
        #: The text of :func:`id_tail` before its policy id, by model and outcome, and after
        #: it (:func:`id_tail_end`), by revision, reason and snapshot hash.
        self.ends: dict[tuple[Any, ...], str] = {}

    @staticmethod
    def list_key(accounts: tuple[Account, ...]) -> tuple[Any, ...]:
        """The key :attr:`account_lists` keeps ``accounts``' texts by."""
        return tuple(map(ACCOUNT_VALUE, accounts))

    def account_list(self, key: tuple[Any, ...], accounts: tuple[Account, ...]) -> tuple[str, ...]:
        """The texts of ``accounts`` (whose key is ``key``), one tuple per distinct list."""
        if len(self.account_lists) >= MEMO_LIMIT:
            self.account_lists.clear()
        texts = self.account_lists[key] = tuple([self._account(a) for a in accounts])
        return texts

    def _account(self, account: Account) -> str:
        key = ACCOUNT_VALUE(account)
        text = self.account_texts.get(key)
        if text is None:
            if len(self.account_texts) >= MEMO_LIMIT:
                self.account_texts.clear()
            texts = self.texts
            if len(texts) >= MEMO_LIMIT:
                texts.clear()
            written = account.canonical_json()
            text = self.account_texts[key] = texts.setdefault(written, written)
        return text

    def legacy(self, legacy: LegacyRoute) -> str:
        """``legacy``'s canonical text, kept by its value."""
        if len(self.legacy_texts) >= MEMO_LIMIT:
            self.legacy_texts.clear()
        text = self.legacy_texts[LEGACY_VALUE(legacy)] = legacy.canonical_json()
        return text

    def head(self, key: tuple[Any, ...]) -> Any:
        """The SHA-256 state after :func:`id_head` of ``key`` (account id, account texts,
        legacy text), or ``False`` when the redactor might change one of its strings."""
        account_id, accounts, legacy = key
        if self.memo.may_redact((account_id, *accounts, legacy)):
            head: Any = False
        else:
            head = hashlib.sha256(id_head(account_id, ",".join(accounts), legacy).encode("utf-8"))
        if len(self.heads) >= MEMO_LIMIT:
            self.heads.clear()
        self.heads[key] = head
        return head

    def decision_id(
        self,
        context: RouteContext,
        accounts: tuple[str, ...],
        piece: bytes | None,
        account_id: str | None,
        model: str | None,
        outcome: str,
        policy_id: str | None,
        reason: str,
        revision: int,
        snapshot_hash: str,
        redactor: Redactor,
    ) -> str:
        """The id of a decision on ``context`` (its account entries' texts ``accounts``, its
        question's :func:`id_question` bytes ``piece``, ``None`` when the redactor might change
        one of the question's strings): from the kept head and tail when both are clean, else
        by the general writer."""
        head: Any = False
        tail: Any = False
        if piece is not None:
            legacy = context.legacy_route
            if legacy is None:
                legacy_text = "null"
            else:
                legacy_text = self.legacy_texts.get(LEGACY_VALUE(legacy)) or self.legacy(legacy)
            head_key = (account_id, accounts, legacy_text)
            head = self.heads.get(head_key)
            if head is None:
                head = self.head(head_key)
            tail_key = (model, outcome, policy_id, reason, revision, snapshot_hash)
            tail = self.tails.get(tail_key)
            if tail is None:
                tail = self.tail(tail_key)
        if head and tail:
            digest = head.copy()
            digest.update(piece)
            digest.update(tail)
            hexdigest: str = digest.hexdigest()
            return SHA256_PREFIX + hexdigest
        state = self.state
        return _decision_id(
            context,
            snapshot_hash,
            state,
            revision,
            outcome,
            reason,
            policy_id,
            account_id,
            model,
            redactor,
            self.memo,
            accounts,
        )

    def tail(self, key: tuple[Any, ...]) -> bytes | bool:
        """The UTF-8 of :func:`id_tail` of ``key`` (model, outcome, policy id, reason,
        revision, snapshot hash), or ``False`` when the redactor might change one of its
        strings (or the revision has no RFC 8785 form: the general writer says so)."""
        model, outcome, policy_id, reason, revision, snapshot_hash = key
        state = self.state
        tail: bytes | bool = False
        if 0 <= revision <= _MAX_SAFE_INT and not self.memo.may_redact(
            (model, outcome, policy_id, reason, snapshot_hash, state)
        ):
            # id_tail around the policy id, its two sides kept (a batch's models, outcomes,
            # reasons and snapshot repeat; escaping the snapshot hash was a third of the cost).
            ends = self.ends
            if len(ends) >= MEMO_LIMIT:
                ends.clear()
            start = ends.get((model, outcome))
            if start is None:
                start = ends[(model, outcome)] = (
                    f'"effective_model":{_s(model)},"outcome":{_e(outcome)},"policy_id":'
                )
            end_key = (revision, reason, snapshot_hash)
            end = ends.get(end_key)
            if end is None:
                end = ends[end_key] = id_tail_end(revision, reason, snapshot_hash, state)
            tail = (start + _s(policy_id) + end).encode("utf-8")
        if len(self.tails) >= MEMO_LIMIT:
            self.tails.clear()
        self.tails[key] = tail
        return tail


def decision_id(
    context: RouteContext,
    *,
    snapshot_hash: str,
    snapshot_state: str,
    policy_revision: int,
    outcome: str,
    reason: str,
    policy_id: str | None,
    account_id: str | None,
    effective_model: str | None,
    redactor: Redactor = DEFAULT_REDACTOR,
    memo: ScanMemo | None = None,
) -> str:
    """The decision id of these fields (see the module docstring). Same inputs, same id.

    ``memo`` (built on the same ``redactor``) lets a batch check each distinct string once
    instead of scanning every preimage; the id is the same with or without it.

    Raises:
        CanonicalEncodingError: ``policy_revision`` is outside 0..2**53 - 1 (a snapshot can
            never hold such a revision, so ``explain`` never gets here with one).
    """
    return _decision_id(
        context,
        snapshot_hash,
        snapshot_state,
        policy_revision,
        outcome,
        reason,
        policy_id,
        account_id,
        effective_model,
        redactor,
        memo,
    )


def _decision_id(
    context: RouteContext,
    snapshot_hash: str,
    snapshot_state: str,
    policy_revision: int,
    outcome: str,
    reason: str,
    policy_id: str | None,
    account_id: str | None,
    effective_model: str | None,
    redactor: Redactor,
    memo: ScanMemo | None,
    accounts: tuple[str, ...] | None = None,
    clean: bool = False,
) -> str:
    """:func:`decision_id` with positional arguments (the resolver calls it per decision);
    ``accounts``: the account entries' canonical texts, when the caller has them; ``clean``:
    the caller has seen every string of the preimage clean (with ``memo``), so there is
    nothing to check."""
    if not 0 <= policy_revision <= _MAX_SAFE_INT:
        # Outside RFC 8785's integer domain: let the general encoder say so.
        canonical_bytes({"policy_revision": policy_revision})
    tail = (id_tail if memo is None else memo.id_tail)(
        effective_model, outcome, policy_id, policy_revision, reason, snapshot_hash, snapshot_state
    )
    text = (
        f'{{"account_id":{_s(account_id)},"context":'
        f"{context.canonical_text(None if accounts is None else ','.join(accounts))},{tail}"
    )
    if clean:
        suspect = False
    elif memo is None:
        suspect = redactor.might_match(text)
    else:
        # ``account_id`` is one of the context's (an account entry or the legacy route's).
        suspect = memo.preimage_may_redact(
            context,
            (effective_model, policy_id, outcome, reason, snapshot_state, snapshot_hash),
            accounts,
        )
    if suspect:
        # Something credential-shaped may be in there: hash what a record would store.
        return _digest(
            {
                "account_id": account_id,
                "context": context.to_dict(),
                "effective_model": effective_model,
                "outcome": outcome,
                "policy_id": policy_id,
                "policy_revision": policy_revision,
                "reason": reason,
                "snapshot_hash": snapshot_hash,
                "snapshot_state": snapshot_state,
            },
            redactor,
        )
    return SHA256_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def id_question(context: RouteContext) -> str:
    """The RFC 8785 text of an id preimage from its context's ``model_requirement`` member to
    the context's end, closing brace and comma included: the members a context's question
    (all but its accounts and legacy route) fixes, as :func:`.context.context_canonical`
    writes them (the tests check the pieces make the preimage)."""
    c = context
    before, after = question_texts(
        c.model_requirement, c.principal_id, c.repo_class, c.request_face, c.role
    )
    return before + repo_json(c.repo) + after


def record_decision_id(record: Any, *, redactor: Redactor = DEFAULT_REDACTOR) -> str:
    """The id a stored decision record (the JSON of ``RouteDecision.to_dict()``, redacted or
    not) must carry, recomputed from the record's own fields.

    Works on the record as stored: a redacted value (say a repo id that is no longer canonical
    once its token became a marker) need not parse back into a context. Redacting is
    idempotent, so a redacted record and the decision it came from give the same id.

    Raises:
        MalformedError: the record lacks a field the id covers.
        CanonicalEncodingError: a field has no canonical form.
    """
    if not isinstance(record, Mapping):
        raise p.fail("", "expected a decision record object")
    explanation = record.get("explanation")
    if not isinstance(explanation, Mapping) or "context" not in explanation:
        raise p.fail("explanation.context", "required field is missing")
    context = explanation["context"]
    # a compact explanation stored by ids leaves the context's default members out
    preimage: dict[str, Any] = {
        "context": full_context(context) if UNMATCHED in explanation else context
    }
    for name in _REQUIRED:
        if name not in record:
            raise p.fail(name, "required field is missing")
        preimage[name] = record[name]
    for name in _OPTIONAL:  # absent = null, as RouteDecision.from_dict reads them
        preimage[name] = record.get(name)
    return _digest(preimage, redactor)
