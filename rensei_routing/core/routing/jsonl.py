"""One decision as one compact JSON line, written directly: the text of
``json.dumps(decision.to_dict(), ensure_ascii=False, separators=(",", ":"))`` (keys in
``to_dict`` order, not sorted) without building the dicts. Pure: no I/O.

``explain-batch`` prints one such line per context; building the nested dicts and walking them
with the generic encoder cost more than resolving the decision. Pieces shared across a batch
(trace entries, account entries, the context's text) keep their text, and a per-batch
:data:`LineMemo` keeps that of the fields that repeat (outcome, policy, route, account lists).
A compact explanation (the ``auto`` trace above 256 policies, and a record's) is written the
same way: its context is the context's kept display text with the default members left out of
its last two members, whose compact texts a per-batch :data:`MemberTexts` keeps. The tests
check the text equals the generic encoder's on generated decisions.

Every string goes through the JSON encoder, which escapes each character below U+0020, so a
line holds none (what the batch's printable check relies on).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _e
from typing import Any, Final, Protocol

from .context import RouteContext
from .decision import RouteDecision
from .explanation import (
    COMPACT,
    OUTRANKED_COUNT,
    UNMATCHED,
    Explanation,
    compact_context,
    listed_winners,
)
from .members import Account, LegacyRoute

__all__ = [
    "LINE_MEMO_LIMIT",
    "MEMBER_TEXTS_LIMIT",
    "LineMemo",
    "MemberTexts",
    "Stamp",
    "compact_context_display",
    "decision_line",
]


class Stamp(Protocol):
    """What a decision line reads of a snapshot stamp (``core.snapshot.freshness.Freshness`` is
    one): routing knows the stamp's members (``STAMP_FIELDS``: three, and ``signatureScope``
    when the stamp has a ``signature_scope``), not the snapshot domain."""

    @property
    def ruleset_rev(self) -> str | None: ...
    @property
    def age_ms(self) -> int | None: ...
    @property
    def degraded(self) -> bool: ...


_LIVE: Final = ',"rulesetRev":null,"snapshotAgeMs":null,"degraded":false}'
_OUTRANKED: Final = '"unlisted_outranked_count":'
_SCOPE: Final = '"signatureScope":'


def _s(value: str | None) -> str:
    return "null" if value is None else str(_e(value))


def _n(value: int | None) -> str:
    return "null" if value is None else str(value)


#: A writer's memo (one per batch): the text of a decision's fields that repeat across a
#: batch (its outcome, policy and route; its account lists), keyed by their values, and of a
#: compact line but its id and context (:func:`_compact_parts`), keyed by what it is written
#: from. Only strings, integers, ``None``, tuples of them and a trace source (by identity) are
#: keys, so equal keys write alike.
LineMemo = dict[tuple[Any, ...], Any]

#: Entries a line memo holds before it starts again.
LINE_MEMO_LIMIT: Final = 16_384


def _head(d: RouteDecision) -> str:
    return _policy_text(d) + _route_text(d)


#: How many of :meth:`RouteDecision._answer_fields` :func:`_policy_text` writes (the rest are
#: :func:`_route_text`'s).
_POLICY_FIELDS: Final = 9


def _policy_text(d: RouteDecision) -> str:
    """The line's members from ``outcome`` to ``precedence_priority``."""
    return (
        f'"outcome":{_e(d.outcome)},"reason":{_e(d.reason)},'
        f'"policy_source":{_e(d.policy_source)},"policy_id":{_s(d.policy_id)},'
        f'"policy_revision":{d.policy_revision},"snapshot_hash":{_e(d.snapshot_hash)},'
        f'"snapshot_state":{_e(d.snapshot_state)},"precedence_level":{_n(d.precedence_level)},'
        f'"precedence_priority":{_n(d.precedence_priority)},'
    )


def _route_text(d: RouteDecision) -> str:
    """The line's members from ``account_id`` to ``effective_model``."""
    return (
        f'"account_id":{_s(d.account_id)},'
        f'"provider_binding":{_s(d.provider_binding)},"effective_model":{_s(d.effective_model)},'
    )


def _lists(ex: Explanation) -> str:
    rejected = ",".join(
        [
            f'{{"account_id":{_e(r.account_id)},"reason":{_e(r.reason)}}}'
            for r in ex.rejected_accounts
        ]
    )
    return (
        f'"eligible_account_ids":[{",".join([_e(i) for i in ex.eligible_account_ids])}],'
        f'"rejected_accounts":[{rejected}],'
        f'"conflicting_policy_ids":[{",".join([_e(i) for i in ex.conflicting_policy_ids])}],'
    )


def compact_account_display(account: Account) -> str:
    """Compact JSON text of an account's ``to_dict`` without its default members, in
    ``to_dict``'s order (what :func:`compact_context` keeps of it)."""
    members = (
        f'"account_id":{_e(account.account_id)},"provider_binding":{_e(account.provider_binding)}'
    )
    if not account.configured:
        members += ',"configured":false'
    if account.administrative_state != "active":
        members += f',"administrative_state":{_e(account.administrative_state)}'
    return f"{{{members}}}"


def compact_legacy_display(legacy: LegacyRoute) -> str:
    """Compact JSON text of a legacy route's ``to_dict`` without its null optional members, in
    ``to_dict``'s order (what :func:`compact_context` keeps of it)."""
    members = [] if legacy.account_id is None else [f'"account_id":{_e(legacy.account_id)}']
    members.append(f'"provider_binding":{_e(legacy.provider_binding)}')
    for name, value in (
        ("model", legacy.model),
        ("mechanism", legacy.mechanism),
        ("mechanism_detail", legacy.mechanism_detail),
    ):
        if value is not None:
            members.append(f'"{name}":{_e(value)}')
    return f"{{{','.join(members)}}}"


#: A writer's memo (one per batch) of the two texts of a context's last two members, which
#: readers share across a batch (an account list, a legacy route): keyed by the pair's ``id``\ s,
#: the value holding the members themselves (so their ids name no others while kept), the end
#: of the context's display text they make (``"legacy_route":LEGACY,"accounts":ACCOUNTS}``,
#: see ``context_display``) and that end as :func:`compact_context` leaves it.
MemberTexts = dict[tuple[int, int], tuple[Any, Any, str, str]]

#: Entries a member-texts memo holds before it starts again.
MEMBER_TEXTS_LIMIT: Final = 16_384


def _accounts_texts(accounts: tuple[Account, ...]) -> tuple[str, str]:
    return (
        f"[{','.join([a.display_json() for a in accounts])}]",
        f"[{','.join([compact_account_display(a) for a in accounts])}]",
    )


def _legacy_texts(legacy: LegacyRoute | None) -> tuple[str, str]:
    if legacy is None:
        return ("null", "null")
    return (legacy.display_json(), compact_legacy_display(legacy))


def _ends(accounts: tuple[Account, ...], legacy: LegacyRoute | None) -> tuple[str, str]:
    """The end of a context's display text its legacy route and accounts make, and that end
    without their default members."""
    shown, brief = _accounts_texts(accounts)
    legacy_shown, legacy_brief = _legacy_texts(legacy)
    return (
        f'"legacy_route":{legacy_shown},"accounts":{shown}}}',
        f'"legacy_route":{legacy_brief},"accounts":{brief}}}',
    )


def compact_context_display(context: RouteContext, memo: MemberTexts | None = None) -> str:
    """Compact JSON text (``json.dumps`` with ``separators=(",", ":")`` and
    ``ensure_ascii=False``) of ``compact_context(context.to_dict())``: the context's kept
    display text with its last two members (the legacy route, then the accounts) swapped for
    their compact texts, which ``memo`` keeps for members shared across a batch (tested equal
    to the encoder)."""
    text = context.display_text()
    accounts, legacy = context.accounts, context.legacy_route
    if memo is None:
        shown, brief = _ends(accounts, legacy)
    else:
        key = (id(accounts), id(legacy))
        kept = memo.get(key)
        if kept is None or kept[0] is not accounts or kept[1] is not legacy:
            if len(memo) >= MEMBER_TEXTS_LIMIT:
                memo.clear()
            kept = memo[key] = (accounts, legacy, *_ends(accounts, legacy))
        shown, brief = kept[2], kept[3]
    # Checked, so a display text of any other shape takes the encoder.
    if text.endswith(shown):
        return f"{text[: len(text) - len(shown)]}{brief}"
    return json.dumps(compact_context(context.to_dict()), ensure_ascii=False, separators=(",", ":"))


def _brief_parts(d: RouteDecision, ex: Explanation) -> tuple[bool, str]:
    """The compact JSON of a compact explanation's ``to_dict`` inside ``d`` after
    ``{"context":`` and its context's text: ``(compact, after)``, ``compact`` whether that
    text is the context's compact one (:func:`compact_context_display`) or its display text.
    Stored by ids when its winners allow, else in the earlier compact form (see
    :meth:`Explanation.to_dict`), whose context is whole."""
    owner = d._owner()
    winners = ex._winners(owner)
    if winners is None:
        conflicting = ex.conflicting_policy_ids
        considered = ",".join([c._display or c.display_json() for c in ex.considered])
        return (
            False,
            f',"considered":[{considered}],'
            f'"trace":"{COMPACT}","unlisted_outranked_count":{ex.unlisted_outranked_count},'
            f'"unlisted_policy_count":{ex.unlisted_policy_count}'
            + (
                f',"conflicting_policy_ids":[{",".join([_e(i) for i in conflicting])}]}}'
                if conflicting
                else "}"
            ),
        )
    return (
        True,
        f',"{OUTRANKED_COUNT}":{ex.unlisted_outranked_count},"trace":"{COMPACT}",'
        f'"{UNMATCHED}":{ex.unlisted_policy_count}{listed_winners(winners, owner)}}}',
    )


def _brief(d: RouteDecision, ex: Explanation, members: MemberTexts | None) -> str:
    """The compact JSON of a compact explanation's ``to_dict`` inside ``d`` (see
    :func:`_brief_parts`)."""
    compact, after = _brief_parts(d, ex)
    context = compact_context_display(ex.context, members) if compact else ex.context.display_text()
    return f'{{"context":{context}{after}'


def _remember(memo: LineMemo, key: tuple[Any, ...], text: Any) -> Any:
    if len(memo) >= LINE_MEMO_LIMIT:
        memo.clear()
    memo[key] = text
    return text


def _compact_parts(d: RouteDecision, end: str) -> tuple[bool, str]:
    """What a compact line of ``d`` (ending in ``end``) holds after its context's text, and
    whether that text is the context's compact one (:func:`compact_context_display`; else its
    display text): ``(compact, after)``, as :func:`_brief` writes them."""
    compact, after = _brief_parts(d, d.explanation)
    return (compact, f"{after}{end}")


def decision_line(
    decision: RouteDecision,
    stamp: Stamp | None = None,
    memo: LineMemo | None = None,
    members: MemberTexts | None = None,
) -> str:
    """The compact JSON of ``decision.to_dict()``, or with ``stamp`` of
    ``StampedDecision(decision, stamp).to_dict()`` (the stamp's three members last).

    ``memo`` (one per batch) keeps the text of the parts that repeat across decisions, and
    ``members`` (one per batch) that of the contexts' shared members under a compact trace.
    """
    d = decision
    if stamp is None:
        end = "}"
    elif stamp.ruleset_rev is None and stamp.age_ms is None and not stamp.degraded:
        end = _LIVE
    else:
        scope = getattr(stamp, "signature_scope", None)
        end = (
            f',"rulesetRev":{_s(stamp.ruleset_rev)},"snapshotAgeMs":{_n(stamp.age_ms)},'
            f'"degraded":{"true" if stamp.degraded else "false"}'
            f"{f',{_SCOPE}{_s(scope)}' if isinstance(scope, str) else ''}}}"
        )
    if memo is not None:
        parts = d.compact_parts()
        if parts is not None:
            # A compact line is its id, its context's text and what surrounds them, which is a
            # function of the decision's fields and its explanation's parts: written once per
            # distinct answer, the explanation never built.
            # Kept in three parts, each repeating far more often than the whole: the policy's
            # fields, the route's, and the explanation's (a function of its parts and of the
            # decision's policy, rung, priority and reason, see _brief_parts).
            fields = d._answer_fields()
            key = fields[:_POLICY_FIELDS]
            policy = memo.get(key) or _remember(memo, key, _policy_text(d))
            key = fields[_POLICY_FIELDS:]
            route = memo.get(key) or _remember(memo, key, _route_text(d))
            key = (*parts, d.policy_id, d.precedence_level, d.precedence_priority, d.reason, end)
            compact, after = memo.get(key) or _remember(memo, key, _compact_parts(d, end))
            context = (
                compact_context_display(d._context, members)
                if compact
                else d._context.display_text()
            )
            return (
                f'{{"decision_id":{_e(d.decision_id)},{policy}{route}"explanation":'
                f'{{"context":{context}{after}'
            )
    ex = d.explanation
    if memo is None:
        head = _head(d)
    else:
        key = d._answer_fields()
        head = memo.get(key) or _remember(memo, key, _head(d))
    if ex.compact:  # as the record stores it (see Explanation.to_dict), in to_dict's order
        brief = _brief(d, ex, members)
        return f'{{"decision_id":{_e(d.decision_id)},{head}"explanation":{brief}{end}'
    if memo is None:
        lists = _lists(ex)
    else:
        key = (
            ex.eligible_account_ids,
            ex.conflicting_policy_ids,
            *[(r.account_id, r.reason) for r in ex.rejected_accounts],
        )
        lists = memo.get(key) or _remember(memo, key, _lists(ex))
    considered = ",".join([c._display or c.display_json() for c in ex.considered])
    outranked = ex.unlisted_outranked_count
    return (
        f'{{"decision_id":{_e(d.decision_id)},{head}"explanation":{{"context":'
        f'{ex.context.display_text()},"considered":[{considered}],{lists}'
        f'"unlisted_policy_count":{ex.unlisted_policy_count}'
        f"{f',{_OUTRANKED}{outranked}}}' if outranked else '}'}{end}"
    )
