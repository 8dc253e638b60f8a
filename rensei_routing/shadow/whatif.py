"""Replaying the audit chain for ``policy whatif``: stream the recorded contexts and explain each
against the current revision and a candidate. Adapter over :class:`~rensei_routing.store.audit.
AuditLog`; the comparison rules are :mod:`rensei_routing.core.shadow.whatif`'s. Never writes.

Contexts come from shadow records (``proposed.explanation.context``) and from plain recorded
decisions (``explanation.context``). Every recorded spawn counts, duplicates included: a context
recorded twice is two spawns. Memory stays flat: records are streamed in pages, explained in
chunks, and the verdicts of recently seen contexts are kept in a bounded cache keyed by the
context's canonical text (explain is pure: the same context against the same snapshots always
gets the same decisions, so a repeated context is explained once while it is in the cache).
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Final

from ..core._parse import STRICT_DECODER
from ..core.audit.chain import AuditRecord
from ..core.audit.hydraflow import imported_payload
from ..core.routing._quick import Memo, quick_context
from ..core.routing.context import RouteContext
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain_batch
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.whatif import Verdict, WhatIf, WhatIfSummary, stored_context_text
from ..errors import InputError
from ..store.audit import AuditLog

__all__ = ["CACHE_SIZE", "CHUNK", "compare_chain", "context_of", "recorded_since"]

#: Distinct contexts explained per chunk (two ``explain_batch`` calls each).
CHUNK: Final = 2_000
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
    snapshot, state = current
    cache: OrderedDict[str, tuple[Verdict, Verdict]] = OrderedDict()
    chunk: list[tuple[int, str]] = []
    pending: dict[str, RouteContext] = {}

    def flush() -> None:
        contexts = list(pending.values())
        before = explain_batch(contexts, snapshot, snapshot_state=state, vocabulary=vocabulary)
        after = explain_batch(contexts, candidate, snapshot_state="ok", vocabulary=vocabulary)
        for key, b, a in zip(pending, before, after, strict=True):
            cache[key] = (Verdict.of(b), Verdict.of(a))
        for seq, key in chunk:
            acc.add(seq, *cache[key])
        chunk.clear()
        pending.clear()
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)  # the oldest (O(1); deleting dict heads is not)

    for seq, key, context in _contexts(log, since, limit, stop, skipped, vocabulary):
        if key not in cache and key not in pending:
            pending[key] = context
        chunk.append((seq, key))
        if len(pending) >= CHUNK:
            flush()
    if chunk:
        flush()
    return acc.summary()


def _contexts(
    log: AuditLog,
    since: dt.datetime | None,
    limit: int | None,
    stop: int | None,
    skipped: Callable[[int], None] | None,
    vocabulary: Vocabulary,
) -> Iterator[tuple[int, str, RouteContext]]:
    """``(seq, key, context)`` of every recorded context, oldest first (newest first with
    ``limit``). The context is parsed only for a key not seen just before; a key of ``""``
    (a payload that was not canonical) is replaced by the parsed context's canonical text."""
    taken = 0
    parsed: OrderedDict[str, RouteContext] = OrderedDict()
    memo: Memo = {}
    for record in log.records(newest_first=limit is not None, stop=stop):
        if limit is not None and taken >= limit:
            return
        if not recorded_since(record, since):
            continue
        try:
            found = _keyed_context(record)
            if found is None:
                raise InputError("no context")
            key, doc = found
            context = parsed.get(key) if key else None
            if context is None:
                if doc is None:
                    try:
                        doc = STRICT_DECODER.decode(key)
                    except (ValueError, RecursionError):
                        # Not one JSON value (see core.whatif.stored_context_text): read the
                        # whole payload, and key the context by its own canonical text.
                        doc, key = context_of(record.payload), ""
                        if doc is None:
                            raise InputError("no context") from None
                # The quick reader with a memo shares the pieces that repeat across the chain
                # (accounts, routes); the general reader names the field of a bad context.
                # A stored context is read as stored: ``redacted`` accepts redaction markers.
                context = quick_context(doc, vocabulary, memo) or RouteContext.from_dict(
                    doc, path=f"audit[{record.seq}].context", vocabulary=vocabulary, redacted=True
                )
                key = key or context.canonical().decode("utf-8")
                parsed[key] = context
                if len(parsed) > CACHE_SIZE:
                    parsed.popitem(last=False)
        except InputError:
            if skipped is not None:
                skipped(record.seq)
            continue
        taken += 1
        yield record.seq, key, context
