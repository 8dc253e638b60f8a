"""A batch's stamped records written directly (:func:`stamped_record`): the bytes of
``StampedDecision(decision, stamp).canonical()`` for a decision whose compact explanation is
stored by ids, with the parts that repeat across a batch kept in a per-batch
:data:`RecordMemo`. Pure: no I/O.

``explain-batch --record`` stores one such record per context. The general writer encodes a
decision's dozen members one by one, strips the compact context's default members from its
canonical text with a scan per member, then splices the stamp into the text it decoded again.
Here the members before and after the explanation are one memo entry per distinct answer (keyed
by their values, as the batch's line memo keys them), and the compact context's two member
lists (the accounts, then the legacy route, first in the canonical text) keep their compact
texts by their identity, as the readers share them across a batch. Anything else (a stamp with
a signature scope, a full or unlisted explanation, a revision outside the fast path's integer
domain) takes the general writer. The tests check the bytes equal it on generated decisions.
"""

from __future__ import annotations

from json.encoder import encode_basestring as _e
from typing import Any, Final

from ..canonical import json_string as _s
from ..routing.context import RouteContext
from ..routing.decision import RouteDecision
from ..routing.explanation import COMPACT, OUTRANKED_COUNT, UNMATCHED, compact_context_text
from ..routing.explanation import listed_winners as _listed
from ..routing.members import accounts_texts, legacy_texts
from .freshness import Freshness, StampedDecision

__all__ = ["RECORD_MEMO_LIMIT", "RecordMemo", "stamped_record"]

#: A batch's memo: the record text around the decision id and the explanation, keyed by the
#: decision's other members' values (strings, integers and ``None``, so equal keys write
#: alike); and, keyed by ``id`` of a context's account list or legacy route (the value holding
#: the member itself, so its id names no other while kept), that member's canonical text and
#: its compact form.
RecordMemo = dict[Any, tuple[Any, ...]]

#: Entries a record memo holds before it starts again.
RECORD_MEMO_LIMIT: Final = 16_384
_MAX_SAFE_INT: Final = 2**53 - 1
_ACCOUNTS: Final = '{"accounts":'
_LEGACY: Final = ',"legacy_route":'
_MODEL: Final = ',"model_requirement":'


def _num(value: int | None) -> str:
    return "null" if value is None else str(value)


def _around(d: RouteDecision, f: Freshness) -> tuple[str, str, str]:
    """The record's text before the decision id, between it and the explanation, and after
    the explanation, in RFC 8785 key order (the stamp's three members at their places)."""
    rev = "null" if f.ruleset_rev is None else _s(f.ruleset_rev)
    return (
        f'{{"account_id":{_s(d.account_id)},"decision_id":',
        f',"degraded":{"true" if f.degraded else "false"},'
        f'"effective_model":{_s(d.effective_model)},"explanation":',
        f',"outcome":{_e(d.outcome)},"policy_id":{_s(d.policy_id)},'
        f'"policy_revision":{d.policy_revision},"policy_source":{_e(d.policy_source)},'
        f'"precedence_level":{_num(d.precedence_level)},'
        f'"precedence_priority":{_num(d.precedence_priority)},'
        f'"provider_binding":{_s(d.provider_binding)},"reason":{_e(d.reason)},'
        f'"rulesetRev":{rev},"snapshotAgeMs":{_num(f.age_ms)},'
        f'"snapshot_hash":{_e(d.snapshot_hash)},"snapshot_state":{_e(d.snapshot_state)}}}',
    )


def _kept(memo: RecordMemo, member: Any, canonical: str) -> tuple[Any, ...]:
    """``(member, canonical text, compact text)`` of a context's account list or legacy route
    (``canonical``: its canonical text, computed only when ``member`` is not kept)."""
    kept = memo.get(id(member))
    if kept is None or kept[0] is not member:
        kept = memo[id(member)] = (member, canonical, compact_context_text(canonical))
    return kept


def _compact_context(context: RouteContext, memo: RecordMemo) -> str:
    """``compact_context_text(context.canonical_text())``, from the compact texts of its
    account list and legacy route (the only members that hold default members) kept in
    ``memo``; checked to be where the canonical text holds them (else the general path)."""
    text = context.canonical_text()
    accounts, legacy = context.accounts, context.legacy_route
    kept = memo.get(id(accounts))
    if kept is None or kept[0] is not accounts:
        kept = _kept(memo, accounts, accounts_texts(accounts)[0])
    route = memo.get(id(legacy))
    if route is None or route[0] is not legacy:
        route = _kept(memo, legacy, legacy_texts(legacy)[0])
    cut = len(_ACCOUNTS) + len(kept[1])
    end = cut + len(_LEGACY) + len(route[1])
    if (
        text.startswith(_ACCOUNTS)
        and text.startswith(kept[1], len(_ACCOUNTS))
        and text.startswith(_LEGACY, cut)
        and text.startswith(route[1], cut + len(_LEGACY))
        and text.startswith(_MODEL, end)
    ):
        return f"{_ACCOUNTS}{kept[2]}{_LEGACY}{route[2]}{text[end:]}"
    return compact_context_text(text)


def stamped_record(d: RouteDecision, stamp: Freshness, memo: RecordMemo) -> bytes:
    """``StampedDecision(d, stamp).canonical()``, the parts that repeat across a batch kept in
    ``memo`` (one per batch and stamp)."""
    ex = d.explanation
    if not ex.compact or stamp.signature_scope is not None:
        return StampedDecision(d, stamp).canonical()
    owner = d._owner()
    winners = ex._winners(owner)
    if winners is None or not 0 <= d.policy_revision <= _MAX_SAFE_INT:
        return StampedDecision(d, stamp).canonical()
    if len(memo) >= RECORD_MEMO_LIMIT:
        memo.clear()
    key = d._answer_fields()
    around = memo.get(key)
    if around is None:
        around = memo[key] = _around(d, stamp)
    before, between, after = around
    text = (
        f'{before}{_e(d.decision_id)}{between}{{"context":{_compact_context(ex.context, memo)},'
        f'"{OUTRANKED_COUNT}":{ex.unlisted_outranked_count},"trace":"{COMPACT}",'
        f'"{UNMATCHED}":{ex.unlisted_policy_count}{_listed(winners, owner)}}}{after}'
    )
    return text.encode("utf-8")
