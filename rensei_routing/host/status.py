"""The host cache's status as data: the source, the bounds, the held snapshot with its age and
state (fresh / degraded / expired / refused), the last fetch; and its ``Ruleset snapshot:`` line.

Read-only over the cache; the clock is the caller's. Used by ``host status``, the
``/api/daemon/routing/config`` endpoint, ``doctor`` and quickstart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..core.snapshot.freshness import format_age
from ..errors import ExpiredError, SnapshotError
from .cache import HostCache

__all__ = ["host_status_data", "snapshot_line"]


def host_status_data(cache: HostCache, *, now: datetime) -> dict[str, Any]:
    """The cache's status at ``now`` (``host status --json`` and the config endpoint)."""
    config = cache.config()
    out: dict[str, Any] = {
        "source": {
            "endpoint": config.endpoint,
            "file": config.source_file,
            "configured": config.has_source,
        },
        "degradedAfterS": config.degraded_after_s,
        "refuseAfterS": config.refuse_after_s,
        "snapshot": None,
        "lastFetch": cache.last_fetch(),
    }
    try:
        snap = cache.load()
    except SnapshotError as e:
        out["error"] = str(e)
        return out
    if snap is None:
        return out
    entry: dict[str, Any] = {
        "rulesetRev": snap.ruleset_rev,
        "compiledAt": snap.compiled_at,
        "contentHash": snap.content_hash,
        "state": "fresh",
    }
    try:
        _, fresh = cache.current(now=now, config=config)
        entry.update(fresh.to_dict())
        entry["state"] = "degraded" if fresh.degraded else "fresh"
    except ExpiredError as e:
        entry.update({"snapshotAgeMs": e.age_ms, "degraded": True, "state": "expired"})
    except SnapshotError as e:
        entry.update({"state": "refused", "error": str(e)})
    out["snapshot"] = entry
    return out


def snapshot_line(status: dict[str, Any]) -> str:
    """The ``Ruleset snapshot: {org}@{rev} (age 3m12s)`` line of a :func:`host_status_data`."""
    snap = status["snapshot"]
    if snap is None:
        return "Ruleset snapshot: none cached"
    age = snap.get("snapshotAgeMs")
    line = f"Ruleset snapshot: {snap['rulesetRev']}"
    if age is not None:
        line += f" (age {format_age(age)})"
    if snap["state"] == "degraded":
        line += " (degraded)"
    elif snap["state"] in ("expired", "refused"):
        line += f" ({snap['state']}: refusing to decide from it)"
    return line
