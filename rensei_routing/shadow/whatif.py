"""Replaying the audit chain for ``policy whatif``: stream the recorded contexts and explain each
against the current revision and a candidate. Adapter over :class:`~rensei_routing.store.audit.
AuditLog`; the comparison rules are :mod:`rensei_routing.core.shadow.whatif`'s. Never writes.

Contexts come from shadow records (``proposed.explanation.context``) and from plain recorded
decisions (``explanation.context``). Every recorded spawn counts, duplicates included: a context
recorded twice is two spawns. Memory stays flat: records are streamed in pages, each context is
explained as it is read (one explain stream per revision, its memos kept for the whole chain),
and the verdicts of recently seen contexts are kept in a bounded cache keyed by the context's
stored text (explain is pure: the same context against the same snapshots always gets the same
decisions, so a repeated context is neither parsed nor explained again while it is cached).
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from ..core._parse import STRICT_DECODER
from ..core.audit.chain import AuditRecord
from ..core.audit.hydraflow import imported_payload
from ..core.routing._quick import Memo, Pieces, quick_context, quick_stored
from ..core.routing.context import RouteContext
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain_iter
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.whatif import (
    VerdictRow,
    WhatIf,
    WhatIfSummary,
    stored_context_text,
    verdict_row,
)
from ..errors import InputError
from ..store.audit import AuditLog

__all__ = ["CACHE_SIZE", "compare_chain", "context_of", "recorded_since"]

#: Distinct contexts whose verdicts are kept for repeats.
CACHE_SIZE: Final = 10_000


def recorded_since(record: AuditRecord, since: dt.datetime | None) -> bool:
    """Whether a record was written at or after ``since`` (always, without ``since``). A
    record whose time does not read (a damaged row) was not written at any time: never."""
    if since is None:
        return True
    try:
        return dt.datetime.fromisoformat(record.recorded_at[:-1] + "+00:00") >= since
    except (TypeError, ValueError):
        return False


def context_of(payload: Any) -> Any | None:
    """The context document a parsed payload carries (a shadow record's proposed decision's,
    or a plain decision's, imported from HydraFlow or not), or ``None`` for a payload that
    carries none."""
    payload = imported_payload(payload)
    if not isinstance(payload, dict):
        return None
    decision = payload.get("proposed") if "record_type" in payload else payload
    if not isinstance(decision, dict) or "decision_id" not in decision:
        return None
    explanation = decision.get("explanation")
    return explanation.get("context") if isinstance(explanation, dict) else None


def _keyed_context(record: AuditRecord) -> tuple[str, Any] | None:
    """``(cache key, context document or None)`` of a record, or ``None``. The key is the
    context's canonical text, its document left for the caller to parse if the key is new
    (``None``); a payload not in canonical form gives the key ``""`` and the parsed document.

    Raises:
        MalformedError: the payload is not JSON.
    """
    try:
        text = record.payload_bytes.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    key = stored_context_text(text)
    if key is not None:
        return key, None
    doc = context_of(record.payload)
    return None if doc is None else ("", doc)


class _Feed:
    """An endless iterator handing an explain stream the one context it is to decide next:
    set :attr:`context`, then take one decision from the stream."""

    __slots__ = ("context",)

    def __init__(self) -> None:
        self.context: RouteContext | None = None

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> RouteContext:
        assert self.context is not None
        return self.context


def compare_chain(
    log: AuditLog,
    current: tuple[PolicySnapshot, str],
    candidate: PolicySnapshot,
    *,
    since: dt.datetime | None = None,
    limit: int | None = None,
    stop: int | None = None,
    examples: int = 3,
    skipped: Callable[[int], None] | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> WhatIfSummary:
    """Explain every recorded context (at or after ``since``; with ``limit``, the ``limit`` most
    recent; with ``stop``, only records below seq ``stop``, so a comparison on a chain being
    appended to ends) against ``current`` (snapshot, load state) and ``candidate``, and
    summarise. ``skipped`` is called with the seq of every record that carries no readable
    context.

    Raises:
        StoreError: the log cannot be read.
    """
    acc = WhatIf(examples=examples)
    add = acc.add_row
    snapshot, state = current
    # Two explain streams (one per revision) fed one context at a time: their memos stay warm
    # across the whole chain, and each decision is dropped as soon as its verdict is taken, so
    # nothing but the bounded cache outlives a record (the cyclic collector has little to walk).
    feed = _Feed()
    before = explain_iter(feed, snapshot, snapshot_state=state, vocabulary=vocabulary)
    after = explain_iter(feed, candidate, snapshot_state="ok", vocabulary=vocabulary)
    cache: OrderedDict[str, tuple[VerdictRow, VerdictRow]] = OrderedDict()
    memo: Memo = {}
    pieces = Pieces()
    taken = 0
    for record in log.records(newest_first=limit is not None, stop=stop):
        if limit is not None and taken >= limit:
            break
        if since is not None and not recorded_since(record, since):
            continue
        try:
            found = _keyed_context(record)
            if found is None:
                raise InputError("no context")
            key, doc = found
            verdicts = cache.get(key) if key else None
            if verdicts is None:
                context, key = _read_context(record, key, doc, vocabulary, memo, pieces)
                verdicts = cache.get(key)
                if verdicts is None:
                    feed.context = context
                    verdicts = cache[key] = (verdict_row(next(before)), verdict_row(next(after)))
                    if len(cache) > CACHE_SIZE:
                        cache.popitem(last=False)  # the oldest (O(1); deleting dict heads is not)
        except InputError:
            if skipped is not None:
                skipped(record.seq)
            continue
        taken += 1
        add(record.seq, *verdicts)
    return acc.summary()


def _read_context(
    record: AuditRecord, key: str, doc: Any, vocabulary: Vocabulary, memo: Memo, pieces: Pieces
) -> tuple[RouteContext, str]:
    """The context a record carries and its cache key: ``key`` as :func:`_keyed_context` found
    it, or, for a payload that was not canonical (``""``), the context's own canonical text.

    Raises:
        InputError: the record carries no readable context.
    """
    if doc is None:
        # The stored text read piece by piece (each piece once while the memo holds it): the
        # context the readers below would read from the parsed text, or None for them to look.
        context = quick_stored(key, vocabulary, memo, pieces)
        if context is not None:
            return context, key
        try:
            doc = STRICT_DECODER.decode(key)
        except (ValueError, RecursionError):
            # Not one JSON value (see core.whatif.stored_context_text): read the whole payload,
            # and key the context by its own canonical text.
            doc, key = context_of(record.payload), ""
            if doc is None:
                raise InputError("no context") from None
    # The quick reader with a memo shares the pieces that repeat across the chain (accounts,
    # routes); the general reader names the field of a bad context. A stored context is read
    # as stored: ``redacted`` accepts redaction markers.
    context = quick_context(doc, vocabulary, memo) or RouteContext.from_dict(
        doc, path=f"audit[{record.seq}].context", vocabulary=vocabulary, redacted=True
    )
    return context, key or context.canonical_text()
