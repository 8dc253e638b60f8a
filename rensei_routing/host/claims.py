"""Claim-time permission against the host's cached snapshot (document 000): one authorization
request decided by the grant check and every plugin authorizer, the claim's audit record, and
its append to the home's audit log.

A snapshot past RefuseAfter denies as ``snapshot-expired``, none (or one that no longer
verifies) as ``snapshot-unavailable``. Holds no authorization rule (``core.snapshot.authz``) and
no caching rule (``host.cache``); the clock and the plugin engine are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from ..core.snapshot.authz import (
    BUILTIN_AUTHORIZER,
    AuthorizationDecision,
    AuthorizationEngine,
    AuthorizationRequest,
    EntityRef,
)
from ..core.snapshot.freshness import Freshness
from ..core.snapshot.postures import DecisionClass
from ..core.timestamps import format_timestamp
from ..errors import ExpiredError, SnapshotError
from ..store.audit import AuditLog
from ..store.home import Home
from .cache import HostCache

__all__ = [
    "AUTHORIZATION_RECORD",
    "CLAIM_RECORD",
    "claim_payload",
    "claim_request",
    "decide_cached",
    "record",
]

AUTHORIZATION_RECORD: Final = "authorization-decision"
CLAIM_RECORD: Final = "claim-decision"


def decide_cached(
    cache: HostCache,
    request: AuthorizationRequest,
    moment: datetime,
    engine: Callable[[], AuthorizationEngine],
) -> AuthorizationDecision:
    """``request`` decided against ``cache`` at ``moment`` by ``engine()`` (built only when a
    current snapshot is held).

    Raises:
        PluginError: a plugin cannot be loaded or registers a bad authorizer.
        ConfigurationError: the host configuration is unreadable.
    """
    try:
        snap, fresh = cache.current(now=moment, config=cache.config())
    except ExpiredError as e:
        expired = Freshness(ruleset_rev=e.ruleset_rev, age_ms=e.age_ms, degraded=True)
        return AuthorizationDecision.refused(request, "snapshot-expired", str(e), expired)
    except SnapshotError as e:
        none = Freshness(ruleset_rev=None, age_ms=None, degraded=False)
        return AuthorizationDecision.refused(request, "snapshot-unavailable", str(e), none)
    return engine().decide(
        [request],
        ruleset_rev=snap.ruleset_rev,
        content_hash=snap.content_hash,
        sections=snap.sections,
        freshness=fresh,
    )[0]


def record(home: Home, payload: dict[str, Any], moment: datetime) -> None:
    """Append ``payload`` to the audit log of ``home``.

    Raises:
        StoreError, HomeError: the log cannot be written.
    """
    with AuditLog.open(home) as audit_log:
        audit_log.append(payload, recorded_at=format_timestamp(moment))


def claim_request(
    pool_id: str, project: str | None, *, host: str | None = None, harness: str | None = None
) -> AuthorizationRequest:
    """The authorization request of a claim in ``pool_id`` by ``project`` (any, when none),
    from ``host`` to run ``harness`` when given (the local-reality check)."""
    context: dict[str, Any] = {"pool": pool_id}
    for name, value in (("project", project), ("host", host), ("harness", harness)):
        if value is not None:
            context[name] = value
    return AuthorizationRequest.build(
        EntityRef(type="Project", id=project or "*"),
        EntityRef(type="Action", id="claim"),
        EntityRef(type="Pool", id=pool_id),
        context,
    )


def claim_payload(
    decision: AuthorizationDecision, pool_id: str, project: str | None
) -> dict[str, Any]:
    """The claim's audit record: the grant check's reason unless another authorizer denied (or
    nothing could run), the snapshot fields, and the authorization verdict."""
    grant = next((o.result for o in decision.outcomes if o.name == BUILTIN_AUTHORIZER), None)
    by_grant = grant is not None and decision.authorizer in (None, BUILTIN_AUTHORIZER)
    reason, detail = (
        (grant.reason, grant.detail) if by_grant and grant else (decision.reason, decision.detail)
    )
    return {
        "record_type": CLAIM_RECORD,
        "decision_class": DecisionClass.PLACEMENT.value,
        "pool_id": pool_id,
        "project": project,
        "admitted": decision.allowed,
        "reason": reason,
        "detail": detail,
        **decision.freshness.to_dict(),
        "authorization": _verdict(decision),
    }


def _verdict(decision: AuthorizationDecision) -> dict[str, Any]:
    """The authorization verdict a claim record carries (the request's own fields and the
    snapshot fields are already on the record)."""
    full = decision.to_dict()
    keep = ("principal", "action", "allowed", "reason", "authorizer", "detail", "policyIds")
    return {
        **{k: full[k] for k in keep},
        "errors": full["errors"],
        "authorizers": full["authorizers"],
    }
