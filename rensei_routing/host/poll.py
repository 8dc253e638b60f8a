"""The host's fetch step: one fetch + verify + persist from the configured source (a file or a
``rensei serve`` endpoint), and the poll loop that repeats it.

Owns the order (read or fetch, record the fetch, accept into the cache); the verification and
succession rules are the cache's and the core's. The clock and the stop signal are the caller's.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Final

from ..core.snapshot.envelope import RulesetSnapshot
from ..errors import DamagedCacheError, RenseiRoutingError, SnapshotError
from ..files import read_limited, token_from_file
from .cache import HostCache, HostConfig

__all__ = ["MAX_SOURCE_BYTES", "endpoints_of", "etag_of", "poll_once", "run_polls"]

#: The largest snapshot file ``host sync --from`` reads.
MAX_SOURCE_BYTES: Final = 64 * 1024 * 1024


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


def poll_once(cache: HostCache, config: HostConfig, *, now: datetime) -> str:
    """One fetch + verify + persist at ``now``; the line to report (naming the replicas that
    failed before one answered, when the endpoint names several).

    Raises:
        SnapshotError (and its refusals): the last known-good copy is kept.
    """
    failed = ""
    if config.source_file is not None:
        source = config.source_file
        try:
            data = read_limited(Path(source), MAX_SOURCE_BYTES)
        except (OSError, ValueError) as e:
            cache.record_fetch(now=now, source=source, ok=False, detail=str(e))
            raise SnapshotError(f"cannot read {source}: {e}") from e
    elif config.endpoint is not None:
        source, body, failed = _fetch_first(cache, config.endpoint, config.token_file, now)
        if body is None:  # 304: what we hold is what is served
            held = _held_or_none(cache)
            return f"not modified: {held.ruleset_rev if held else '-'}{failed}"
        data = body
    else:
        raise SnapshotError("no snapshot source configured (rensei host sync)")
    accepted = cache.accept(data, now=now, source=source)
    verb = "adopted" if accepted.adopted else "unchanged"
    snap = accepted.snapshot
    return f"{verb}: {snap.ruleset_rev} (compiled {snap.compiled_at}){failed}"


def endpoints_of(endpoint: str) -> list[str]:
    """The replicas a host's ``endpoint`` names: one base URL, or several separated by commas
    (``host sync --endpoint A --endpoint B``), tried in that order."""
    return [e.strip() for e in endpoint.split(",") if e.strip()]


def _fetch_first(
    cache: HostCache, endpoint: str, token_file: str | None, now: datetime
) -> tuple[str, bytes | None, str]:
    """Fetch from the first of the endpoints that answers: ``(source, body or None for
    not-modified, a note of the failed fetches before it)``. Every failed fetch is recorded.

    Raises:
        RenseiRoutingError: the token is unreadable, or every endpoint failed (the last error).
    """
    from .fetch import fetch_snapshot

    failures: list[str] = []
    last: RenseiRoutingError | None = None
    for source in endpoints_of(endpoint):
        try:
            token = token_from_file(token_file or "")
            result = fetch_snapshot(source, token=token, etag=_held_etag(cache))
        except RenseiRoutingError as e:
            cache.record_fetch(now=now, source=source, ok=False, detail=str(e))
            failures.append(f"{source}: {e}")
            last = e
            continue
        note = f" from {source} after failed fetch(es): {'; '.join(failures)}" if failures else ""
        if result.body is None:
            cache.record_fetch(now=now, source=source, ok=True, detail="not modified")
        return source, result.body, note
    if last is None:
        raise SnapshotError("no snapshot endpoint configured (rensei host sync --endpoint)")
    raise last


def run_polls(
    cache: HostCache,
    config: HostConfig,
    *,
    period: float,
    spread: float,
    stop: threading.Event,
    clock: Callable[[], datetime],
    log: logging.Logger,
) -> None:
    """:func:`poll_once` every ``period`` + up to ``spread`` seconds until ``stop`` is set; a
    failed poll is logged and keeps the last known-good copy."""
    rng = random.Random()
    while not stop.is_set():
        try:
            log.info("%s", poll_once(cache, config, now=clock()))
        except RenseiRoutingError as e:
            log.warning("poll failed, keeping the last known-good snapshot: %s", e)
        stop.wait(period + rng.uniform(0, spread))
