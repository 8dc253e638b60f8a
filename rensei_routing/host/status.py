"""The host cache's status as data: the source, the bounds, the held snapshot with its age and
state (fresh / degraded / expired / refused), the last adopted revision, the damaged copies set
aside, the last fetch; its ``Ruleset snapshot:`` and ``Set aside:`` lines; and the one summary
of what is cached and whether a source renews it (:func:`summarise`).

Read-only over the cache; the clock is the caller's. Used by ``host status``, the
``/api/daemon/routing/config`` endpoint, ``doctor``, ``explain --snapshot``, the console and
quickstart, so they all say the same thing about one cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ..core.snapshot.envelope import RulesetSnapshot
from ..core.snapshot.freshness import Freshness, format_age
from ..errors import DamagedCacheError, ExpiredError, SnapshotError
from .cache import HostCache

__all__ = [
    "NO_SOURCE",
    "SYNC_STEP",
    "TRUST_STEP",
    "CacheSummary",
    "cached_snapshot",
    "host_status_data",
    "set_aside_lines",
    "snapshot_line",
    "summarise",
]

#: Said of a cache nothing renews (document 000: then no ``Ruleset snapshot:`` line is printed).
NO_SOURCE: Final = "no snapshot source configured"
#: What renews the cache, and what must come before the first sync.
TRUST_STEP: Final = "rensei host trust KEY"
SYNC_STEP: Final = "rensei host sync --from FILE (or --endpoint URL --token-file FILE)"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSummary:
    """What the host cache holds and whether anything renews it, read from one
    :func:`host_status_data`: what ``host status``, ``doctor``, ``explain --snapshot`` and the
    console say about it. A held snapshot is reported whether or not a source is configured
    (quickstart leaves one cached and no source), and a missing source beside it. (``host
    status`` prints the ``Ruleset snapshot:`` line only with a source, as document 000 has it:
    "absent, not wrong"; without one it names the cached snapshot in its note.)"""

    #: ``fresh``, ``degraded``, ``expired``, ``refused`` (held), or ``none``, ``damaged``,
    #: ``unreadable`` (nothing usable held).
    state: str
    #: The held copy's ``{org}@{rev}``, or ``None``.
    held: str | None
    #: The ``Ruleset snapshot: ...`` line.
    line: str
    #: Whether a source (a file or endpoints) is configured to renew the cache.
    configured: bool
    #: What is missing, one phrase (``no snapshot source configured: nothing is cached``, ``...:
    #: nothing renews the cached acme@1 (age 4s)``), or ``None`` when nothing is.
    missing: str | None
    #: The commands that supply it, in order.
    next_steps: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether a decision may be taken from the held copy (fresh or degraded)."""
        return self.state in ("fresh", "degraded")


def summarise(status: dict[str, Any]) -> CacheSummary:
    """The :class:`CacheSummary` of a :func:`host_status_data`."""
    snap = status["snapshot"]
    configured = bool(status["source"]["configured"])
    if snap is not None:
        state, held = str(snap["state"]), str(snap["rulesetRev"])
    else:
        error, damaged = status.get("error"), status.get("damaged")
        state = ("damaged" if damaged else "unreadable") if error else "none"
        held = None
    missing: str | None = None
    steps: tuple[str, ...] = ()
    if not configured and held is None and state == "none":
        missing, steps = f"{NO_SOURCE}: nothing is cached", (TRUST_STEP, SYNC_STEP)
    elif not configured:
        cached = snapshot_line(status).removeprefix("Ruleset snapshot: ")
        missing, steps = f"{NO_SOURCE}: nothing renews the cached {cached}", (SYNC_STEP,)
    elif state == "none":
        missing, steps = "nothing is cached yet", (SYNC_STEP,)
    return CacheSummary(
        state=state,
        held=held,
        line=snapshot_line(status),
        configured=configured,
        missing=missing,
        next_steps=steps,
    )


def cached_snapshot(cache: HostCache, *, now: datetime) -> tuple[RulesetSnapshot, Freshness]:
    """The held snapshot and its age at ``now``, to decide from (``explain --snapshot``); when
    nothing is cached, the refusal says what ``host status`` says, and what to run.

    Raises:
        ExpiredError: older than RefuseAfter.
        SnapshotError: nothing cached, or the held copy does not verify.
    """
    try:
        return cache.current(now=now, config=cache.config())
    except ExpiredError:
        raise
    except SnapshotError as e:
        summary = summarise(host_status_data(cache, now=now))
        if summary.held is not None or summary.state != "none" or summary.missing is None:
            raise
        steps = " then ".join(f"`{c}`" for c in summary.next_steps)
        raise SnapshotError(f"{summary.missing}: run {steps}") from e
