"""The host's fetch step: one fetch + verify + persist from the configured source (a file, or
one or several ``rensei serve`` replicas, every one asked and the newest verified copy held),
and the poll loop that repeats it.

Owns the order (read or fetch, rank the replicas' copies, accept into the cache, record the
fetch); the verification and succession rules are the cache's and the core's. The clock and the
stop signal are the caller's. What each poll did is counted in a :class:`PollCounts` when one is
given (the ``/metrics`` of ``host run --listen``).
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ..core.snapshot.envelope import RulesetSnapshot, compiled_moment, verify_snapshot
from ..errors import (
    DamagedCacheError,
    ExpiredError,
    FetchError,
    FutureSnapshotError,
    RenseiRoutingError,
    RollbackError,
    SnapshotError,
    SnapshotFormatError,
    SnapshotVerificationError,
)
from ..files import read_limited, token_from_file
from .cache import AcceptResult, HostCache, HostConfig

__all__ = [
    "FETCH_RESULTS",
    "MAX_SOURCE_BYTES",
    "REFUSAL_REASONS",
    "PollCounts",
    "endpoints_of",
    "etag_of",
    "poll_once",
    "refusal_reason",
    "run_polls",
]

#: The largest snapshot file ``host sync --from`` reads.
MAX_SOURCE_BYTES: Final = 64 * 1024 * 1024


#: What one fetch (of a file, or from one endpoint) came to.
FETCH_RESULTS: Final = ("ok", "not_modified", "failed")
#: Why a fetched copy was not adopted (:func:`refusal_reason`).
REFUSAL_REASONS: Final = (
    "rollback",
    "future",
    "verification",
    "format",
    "expired",
    "damaged",
    "other",
)


def refusal_reason(error: SnapshotError) -> str:
    """The low-cardinality reason code of a refused copy: the kind of refusal, never its text."""
    kinds: tuple[tuple[type[SnapshotError], str], ...] = (
        (RollbackError, "rollback"),
        (FutureSnapshotError, "future"),
        (SnapshotVerificationError, "verification"),
        (SnapshotFormatError, "format"),
        (ExpiredError, "expired"),
        (DamagedCacheError, "damaged"),
    )
    return next((name for kind, name in kinds if isinstance(error, kind)), "other")


class PollCounts:
    """What this process's polls did since it started (process-local: a restart begins at
    zero, which Prometheus reads as a counter reset): fetches by result, copies adopted, and
    copies refused by :func:`refusal_reason`. Safe to read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fetches = dict.fromkeys(FETCH_RESULTS, 0)
        self._refused = dict.fromkeys(REFUSAL_REASONS, 0)
        self._adopted = 0

    def fetched(self, result: str) -> None:
        with self._lock:
            self._fetches[result] += 1

    def adopted(self) -> None:
        with self._lock:
            self._adopted += 1

    def refused(self, error: SnapshotError) -> None:
        with self._lock:
            self._refused[refusal_reason(error)] += 1

    def read(self) -> tuple[dict[str, int], int, dict[str, int]]:
        """``(fetches by result, adopted, refused by reason)`` as of now."""
        with self._lock:
            return dict(self._fetches), self._adopted, dict(self._refused)


def _accept(
    cache: HostCache, data: bytes, *, now: datetime, source: str, counts: PollCounts | None
) -> AcceptResult:
    """``cache.accept``, counted."""
    try:
        accepted = cache.accept(data, now=now, source=source)
    except SnapshotError as e:
        if counts is not None:
            counts.refused(e)
        raise
    if counts is not None and accepted.adopted:
        counts.adopted()
    return accepted


def etag_of(snap: RulesetSnapshot) -> str:
    """The entity tag ``rensei serve`` gives the snapshot's bytes."""
    return hashlib.sha256(snap.to_bytes()).hexdigest()


def _held_or_none(cache: HostCache) -> RulesetSnapshot | None:
    """The held copy for ``If-None-Match``; a damaged one asks for the full body (so the
    accept that follows can set it aside and adopt a valid one).

    Raises:
        SnapshotError: the held copy cannot be read (an I/O error).
    """
    try:
        return cache.load()
    except DamagedCacheError:
        return None


def _held_etag(cache: HostCache) -> str | None:
    """The entity tag of the held copy's bytes as received and persisted (``serve`` tags the
    exact bytes it sends, its unsigned ``validators`` list included, which a re-verified copy
    drops: tagging a re-encoding never matched, so every poll downloaded the whole snapshot);
    ``None`` without a valid held copy.

    Raises:
        SnapshotError: the held copy cannot be read (an I/O error).
    """
    if _held_or_none(cache) is None:
        return None
    try:
        data = read_limited(cache.snapshot_path, MAX_SOURCE_BYTES)
    except (OSError, ValueError):
        return None
    return hashlib.sha256(data).hexdigest()


def poll_once(
    cache: HostCache, config: HostConfig, *, now: datetime, counts: PollCounts | None = None
) -> str:
    """One fetch + verify + persist at ``now``; the line to report. With several endpoints
    every one is asked and the host ends holding the newest verified copy any of them offered
    (:func:`_poll_endpoints`); the line names where it came from and every endpoint that failed
    or whose copy was not adopted.

    Raises:
        SnapshotError (and its refusals): no source offered a copy the host can hold; the last
            known-good copy is kept.
    """
    if config.source_file is not None:
        source = config.source_file
        try:
            data = read_limited(Path(source), MAX_SOURCE_BYTES)
        except (OSError, ValueError) as e:
            if counts is not None:
                counts.fetched("failed")
            cache.record_fetch(now=now, source=source, ok=False, detail=str(e))
            raise SnapshotError(f"cannot read {source}: {e}") from e
        if counts is not None:
            counts.fetched("ok")
        accepted = _accept(cache, data, now=now, source=source, counts=counts)
        verb = "adopted" if accepted.adopted else "unchanged"
        snap = accepted.snapshot
        return f"{verb}: {snap.ruleset_rev} (compiled {snap.compiled_at})"
    if config.endpoint is not None:
        return _poll_endpoints(cache, endpoints_of(config.endpoint), config.token_file, now, counts)
    raise SnapshotError("no snapshot source configured (rensei host sync)")


def endpoints_of(endpoint: str) -> list[str]:
    """The replicas a host's ``endpoint`` names: one base URL, or several separated by commas
    (``host sync --endpoint A --endpoint B``), asked in that order."""
    return [e.strip() for e in endpoint.split(",") if e.strip()]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Offer:
    """What one endpoint answered in one poll: a verified copy (``data`` and ``snapshot``),
    ``304 Not Modified`` (``snapshot`` is the held copy, ``data`` is ``None``), or a failure
    (``error``). ``store_ok`` is its ``X-Ruleset-Store`` header (absent: ok)."""

    source: str
    order: int
    data: bytes | None = None
    snapshot: RulesetSnapshot | None = None
    store_ok: bool = True
    error: RenseiRoutingError | None = None

    def rank(self) -> tuple[int, datetime, bool, int]:
        """Newest first: revision, then seal time, then an ``ok`` store over an unreachable
        one, then the configured order."""
        assert self.snapshot is not None
        snap = self.snapshot
        return (snap.revision, compiled_moment(snap), self.store_ok, -self.order)

    def label(self) -> str:
        assert self.snapshot is not None
        flag = "" if self.store_ok else ", its store unreachable"
        return f"{self.snapshot.ruleset_rev} (compiled {self.snapshot.compiled_at}{flag})"


def _ask(
    cache: HostCache,
    source: str,
    order: int,
    *,
    token: str,
    etag: str | None,
    held: RulesetSnapshot | None,
    counts: PollCounts | None,
) -> _Offer:
    """One endpoint's answer, its body verified (not yet offered to the cache)."""
    from .fetch import fetch_snapshot

    def counted(result: str) -> None:
        if counts is not None:
            counts.fetched(result)

    try:
        result = fetch_snapshot(source, token=token, etag=etag)
    except RenseiRoutingError as e:
        counted("failed")
        return _Offer(source=source, order=order, error=e)
    store_ok = result.headers.get("x-ruleset-store", "ok").strip().lower() != "unreachable"
    if result.body is None:
        if held is None:  # a 304 to no tag: nothing it confirms
            counted("failed")
            return _Offer(source=source, order=order, error=FetchError(f"{source} answered 304"))
        counted("not_modified")
        return _Offer(source=source, order=order, snapshot=held, store_ok=store_ok)
    counted("ok")
    try:
        snap = verify_snapshot(result.body, lookup=cache.lookup(), scope_of=cache.scope_of())
    except SnapshotError as e:
        if counts is not None:
            counts.refused(e)
        return _Offer(source=source, order=order, error=e)
    return _Offer(source=source, order=order, data=result.body, snapshot=snap, store_ok=store_ok)


def _older(offer: _Offer, kept: RulesetSnapshot) -> str:
    """Why ``offer``'s copy (ranked below ``kept``) was not adopted."""
    assert offer.snapshot is not None
    if offer.snapshot.revision == kept.revision:
        return f"an earlier seal of {kept.ruleset_rev} (compiled {kept.compiled_at})"
    return f"older than {kept.ruleset_rev}"


#: Endpoints fetched at once in one poll.
_MAX_PARALLEL: Final = 8


def _poll_endpoints(
    cache: HostCache,
    endpoints: list[str],
    token_file: str | None,
    now: datetime,
    counts: PollCounts | None = None,
) -> str:
    """Ask every endpoint (at once), then offer the cache their verified copies newest first
    (:meth:`_Offer.rank`) until it holds one: it adopts it (newer), finds it unchanged (what it
    holds, or an earlier seal of it), or refuses it (older than what it holds or last adopted,
    another hash for the same revision, compiled in the future), and a refusal goes on to the
    next copy. A ``304`` confirms the held copy. So a copy flagged ``X-Ruleset-Store:
    unreachable`` is held only when no ``ok`` endpoint offered an acceptable one at least as
    new. The fetch is recorded once, for the endpoint the held copy came from.

    Raises:
        SnapshotError: no endpoint offered a copy the cache holds (a single endpoint's own
            error, e.g. a ``FetchError`` or a ``RollbackError``; with several, one naming each).
        ConfigurationError: the token file is unreadable.
    """
    if not endpoints:
        raise SnapshotError("no snapshot endpoint configured (rensei host sync --endpoint)")
    where = ", ".join(endpoints)
    try:
        token = token_from_file(token_file or "")
    except RenseiRoutingError as e:
        if counts is not None:  # no endpoint could be asked: each fetch failed
            for _ in endpoints:
                counts.fetched("failed")
        cache.record_fetch(now=now, source=where, ok=False, detail=str(e))
        raise
    held = _held_or_none(cache)
    etag = _held_etag(cache)

    def ask(item: tuple[int, str]) -> _Offer:
        return _ask(cache, item[1], item[0], token=token, etag=etag, held=held, counts=counts)

    if len(endpoints) == 1:
        offers = [ask((0, endpoints[0]))]
    else:  # at once: a poll waits for the slowest replica, not for the sum of them
        workers = min(len(endpoints), _MAX_PARALLEL)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
            offers = list(pool.map(ask, enumerate(endpoints)))
    refused: dict[int, RenseiRoutingError] = {}
    kept: tuple[_Offer, str] | None = None
    candidates = sorted((o for o in offers if o.snapshot is not None), key=_Offer.rank)
    for offer in reversed(candidates):
        if offer.data is None:
            kept = (offer, "not modified")
            break
        try:
            accepted = _accept(cache, offer.data, now=now, source=offer.source, counts=counts)
        except SnapshotError as e:
            refused[offer.order] = e
            continue
        kept = (offer, "adopted" if accepted.adopted else "unchanged")
        break
    failures = [f"{o.source}: {o.error}" for o in offers if o.error is not None]
    if kept is None:
        errors = [o.error or refused[o.order] for o in offers]
        if len(offers) == 1:
            cache.record_fetch(now=now, source=where, ok=False, detail=str(errors[0]))
            raise errors[0]
        detail = "; ".join(f"{o.source}: {e}" for o, e in zip(offers, errors, strict=True))
        cache.record_fetch(now=now, source=where, ok=False, detail=detail)
        raise SnapshotError(f"no endpoint offered a snapshot this host can hold: {detail}")
    offer, verb = kept
    assert offer.snapshot is not None
    snap = offer.snapshot
    passed = [
        f"{o.source}: {o.label()}: {refused.get(o.order) or _older(o, snap)}"
        for o in offers
        if o.snapshot is not None
        and o is not offer
        and (o.order in refused or o.rank()[:2] < offer.rank()[:2])
    ]
    notes = (f"; failed fetch(es): {'; '.join(failures)}" if failures else "") + (
        f"; not adopted: {'; '.join(passed)}" if passed else ""
    )
    flag = "" if offer.store_ok else " (its store unreachable: X-Ruleset-Store)"
    origin = f" from {offer.source}" if len(offers) > 1 else ""
    cache.record_fetch(
        now=now,
        source=offer.source,
        ok=True,
        detail=f"{verb} {snap.ruleset_rev}{flag}{notes}",
    )
    if verb == "not modified":
        return f"not modified: {snap.ruleset_rev}{origin}{flag}{notes}"
    return f"{verb}: {snap.ruleset_rev} (compiled {snap.compiled_at}){origin}{flag}{notes}"


def run_polls(
    cache: HostCache,
    config: HostConfig,
    *,
    period: float,
    spread: float,
    stop: threading.Event,
    clock: Callable[[], datetime],
    log: logging.Logger,
    counts: PollCounts | None = None,
) -> None:
    """:func:`poll_once` every ``period`` + up to ``spread`` seconds until ``stop`` is set; a
    failed poll is logged and keeps the last known-good copy. ``counts`` counts every poll."""
    rng = random.Random()
    while not stop.is_set():
        try:
            log.info("%s", poll_once(cache, config, now=clock(), counts=counts))
        except RenseiRoutingError as e:
            log.warning("poll failed, keeping the last known-good snapshot: %s", e)
        stop.wait(period + rng.uniform(0, spread))
