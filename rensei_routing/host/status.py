"""The host cache's status as data: the source, the bounds, the held snapshot with its age and
state (fresh / degraded / expired / refused), the last adopted revision, the damaged copies set
aside, the last fetch; and its ``Ruleset snapshot:`` and ``Set aside:`` lines.

Read-only over the cache; the clock is the caller's. Used by ``host status``, the
``/api/daemon/routing/config`` endpoint, ``doctor`` and quickstart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..core.snapshot.freshness import format_age
from ..errors import DamagedCacheError, ExpiredError, SnapshotError
from .cache import HostCache

__all__ = ["host_status_data", "set_aside_lines", "snapshot_line"]


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
        "lastAdopted": cache.last_adopted(),
        "setAside": cache.set_aside(),
        "lastFetch": cache.last_fetch(),
    }
    try:
        snap = cache.load()
    except SnapshotError as e:
        out["error"] = str(e)
        out["damaged"] = isinstance(e, DamagedCacheError)
        return out
    if snap is None:
        return out
    entry: dict[str, Any] = {
        "rulesetRev": snap.ruleset_rev,
        "compiledAt": snap.compiled_at,
        "contentHash": snap.content_hash,
        "signingKeyId": snap.header.signing_key_id,
        "signatureScope": snap.signature_scope,
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
        error = status.get("error")
        if error and status.get("damaged"):
            return (
                f"Ruleset snapshot: damaged ({error}): refusing to decide from it; the next "
                f"valid sync sets it aside"
            )
        if error:
            return f"Ruleset snapshot: unreadable ({error}): refusing to decide from it"
        last = status.get("lastAdopted")
        aside = [e for e in status.get("setAside") or [] if e.get("present")]
        notes = ([f"last adopted {last['rulesetRev']}"] if last else []) + (
            [f"a damaged copy was set aside as {aside[-1]['file']}"] if aside else []
        )
        return "Ruleset snapshot: none cached" + (f" ({'; '.join(notes)})" if notes else "")
    age = snap.get("snapshotAgeMs")
    line = f"Ruleset snapshot: {snap['rulesetRev']}"
    if age is not None:
        line += f" (age {format_age(age)})"
    if snap.get("signatureScope") == "hash-only":
        line += " (hash-only signature: compiledAt and revision unsigned)"
    if snap["state"] == "degraded":
        line += " (degraded)"
    elif snap["state"] in ("expired", "refused"):
        line += f" ({snap['state']}: refusing to decide from it)"
    return line


def set_aside_lines(status: dict[str, Any]) -> list[str]:
    """``Set aside: FILE at TIME: REASON``, one per damaged copy still in the cache directory."""
    return [
        f"Set aside: {e['file']} at {e.get('at')}: {e.get('reason')}"
        for e in status.get("setAside") or []
        if e.get("present")
    ]
