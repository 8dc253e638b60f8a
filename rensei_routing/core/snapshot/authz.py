"""Authorization of claims and spawns against a cached snapshot: the request, the authorizers
(the built-in snapshot grant check, and whatever plugins register), and the engine that asks
every one of them under the fail-closed posture and combines their answers.

Pure: no I/O, no clock. The engine prepares each plugin authorizer once per snapshot (keyed by
``rulesetRev`` and content hash) and reuses it; the cache lives in the engine, never in a
global. A plugin authorizer is two functions: ``prepare(sections)`` (parse its policies, build
its entities; may raise) and the ``decide(requests)`` it returns (one
:class:`~rensei_routing.core.snapshot.postures.PolicyVerdict` per request; may raise). Whatever
goes wrong in either is a deny naming why (:func:`~rensei_routing.core.snapshot.postures.
authorize`); a deny from any authorizer is a deny. Each authorizer is shown its own read-only
copy of the sections and of the requests (:mod:`.readonly`), so what one plugin does to them
never reaches another, nor the grant check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ...errors import MalformedError
from .freshness import Freshness
from .org import AUTHORIZATION, authorization_of, policy_kinds_of
from .postures import AuthorizationResult, ClaimGate, DecisionClass, PolicyVerdict, authorize
from .readonly import read_only

__all__ = [
    "BUILTIN_AUTHORIZER",
    "RESERVED_CONTEXT",
    "AuthorizationDecision",
    "AuthorizationEngine",
    "AuthorizationRequest",
    "Authorizer",
    "AuthorizerOutcome",
    "Decide",
    "EntityRef",
    "grant_check",
]

#: The name the built-in snapshot grant check carries in a decision.
BUILTIN_AUTHORIZER: Final = "grant-check"
#: Context keys the engine fills in from the snapshot (a caller may not give them).
RESERVED_CONTEXT: Final = ("rulesetRev", "snapshotAgeMs", "degraded")
_STRING_CONTEXT: Final = ("pool", "project", "repo", "role")
_TYPE: Final = r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*"
_REF: Final = re.compile(rf'^({_TYPE})::(".*")$', re.DOTALL)
_ACTION: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
_MAX_ID: Final = 1024

#: A prepared authorizer: one verdict per request, in order.
Decide = Callable[[Sequence["AuthorizationRequest"]], Sequence[PolicyVerdict]]


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityRef:
    """An entity uid: ``type`` (``Pool``, ``Project``, ``Action``, ``Ns::Type``) and ``id``."""

    type: str
    id: str

    @classmethod
    def parse(cls, text: str, *, what: str = "entity") -> EntityRef:
        """Read ``Type::"id"`` (the id a JSON string).

        Raises:
            MalformedError: naming ``what``.
        """
        m = _REF.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise MalformedError(what, f'{text!r} is not an entity uid Type::"id"')
        try:
            ident = json.loads(m.group(2))
        except ValueError as e:
            raise MalformedError(what, f"the id of {text!r} is not a quoted string") from e
        if not isinstance(ident, str) or not 0 < len(ident) <= _MAX_ID:
            raise MalformedError(what, f"the id of {text!r} must be 1..{_MAX_ID} characters")
        return cls(type=m.group(1), id=ident)

    @classmethod
    def action(cls, text: str) -> EntityRef:
        """An action: a bare name (``claim``) means ``Action::"claim"``.

        Raises:
            MalformedError.
        """
        if isinstance(text, str) and _ACTION.match(text.strip()) and "::" not in text:
            return cls(type="Action", id=text.strip())
        return cls.parse(text, what="action")

    def __str__(self) -> str:
        return f"{self.type}::{json.dumps(self.id, ensure_ascii=False)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizationRequest:
    """May ``principal`` do ``action`` on ``resource``? ``context`` is a JSON object: ``pool``,
    ``project``, ``repo``, ``role`` (strings) and anything else the caller adds; the engine
    adds ``rulesetRev``, ``snapshotAgeMs`` and ``degraded`` from the snapshot."""

    principal: EntityRef
    action: EntityRef
    resource: EntityRef
    context: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        principal: EntityRef,
        action: EntityRef,
        resource: EntityRef,
        context: Any = None,
    ) -> AuthorizationRequest:
        """A request from a caller's context (checked: an object, string ``pool``/``project``/
        ``repo``/``role``, none of the snapshot fields).

        Raises:
            MalformedError: naming the context field.
        """
        ctx = {} if context is None else context
        if not isinstance(ctx, Mapping) or not all(isinstance(k, str) for k in ctx):
            raise MalformedError("context", "expected a JSON object")
        for key in RESERVED_CONTEXT:
            if key in ctx:
                raise MalformedError(f"context.{key}", "is filled in from the snapshot")
        for key in _STRING_CONTEXT:
            if key in ctx and not (isinstance(ctx[key], str) and ctx[key]):
                raise MalformedError(f"context.{key}", "expected a non-empty string")
        return cls(principal=principal, action=action, resource=resource, context=dict(ctx))

    @property
    def pool(self) -> str | None:
        """The pool claimed: ``context.pool``, else the resource when it is a ``Pool``."""
        pool = self.context.get("pool")
        if isinstance(pool, str):
            return pool
        return self.resource.id if self.resource.type == "Pool" else None

    @property
    def project(self) -> str | None:
        """The claiming project: ``context.project``, else the principal when it is a
        ``Project`` (``Project::"*"``, the org data's spelling of every project, is none)."""
        project = self.context.get("project")
        if isinstance(project, str):
            return project
        if self.principal.type == "Project" and self.principal.id != "*":
            return self.principal.id
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": str(self.principal),
            "action": str(self.action),
            "resource": str(self.resource),
            "context": dict(self.context),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Authorizer:
    """A plugin's authorizer: ``prepare(sections)`` -> ``decide(requests)``. ``prepare`` runs
    once per snapshot revision (it may raise: every request is then denied naming why);
    ``decide`` answers one :class:`PolicyVerdict` per request. ``plugin`` is filled in by the
    collector.

    ``kinds`` are the policy kinds of a snapshot's authorization section this authorizer
    evaluates (:func:`~rensei_routing.core.snapshot.org.policy_kinds_of`); ``None`` (the
    default) means its name alone, so the Cedar plugin's authorizer ``cedar`` evaluates the
    ``cedar`` kind. A kind no registered authorizer evaluates denies every request, whatever
    else is registered (:meth:`evaluates`)."""

    name: str
    prepare: Callable[[Mapping[str, Any]], Decide]
    description: str = ""
    plugin: str = ""
    kinds: tuple[str, ...] | None = None

    @property
    def evaluates(self) -> tuple[str, ...]:
        """The policy kinds this authorizer claims: ``kinds``, else ``(name,)``."""
        return (self.name,) if self.kinds is None else self.kinds


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizerOutcome:
    """One authorizer's answer to one request."""

    name: str
    plugin: str
    result: AuthorizationResult

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "plugin": self.plugin, **self.result.to_dict()}


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizationDecision:
    """The combined answer: allowed only when every authorizer allowed. ``reason`` is
    ``permit`` or ``default-permit`` (some authorizer allowed through the declared fallback)
    when allowed, else the first denying authorizer's reason (``authorizer`` names it);
    ``policy_ids`` are the determining ones (of the permits, or of the denials)."""

    request: AuthorizationRequest
    allowed: bool
    reason: str
    authorizer: str | None
    detail: str
    policy_ids: tuple[str, ...]
    errors: tuple[str, ...]
    outcomes: tuple[AuthorizerOutcome, ...]
    freshness: Freshness

    def __bool__(self) -> bool:
        return self.allowed

    @classmethod
    def combine(
        cls,
        request: AuthorizationRequest,
        outcomes: Sequence[AuthorizerOutcome],
        freshness: Freshness,
    ) -> AuthorizationDecision:
        denied = [o for o in outcomes if not o.result.allowed]
        chosen = denied if denied else list(outcomes)
        ids: list[str] = []
        for o in chosen:
            ids.extend(i for i in o.result.policy_ids if i not in ids)
        errors = tuple(e for o in outcomes for e in o.result.errors)
        if denied:
            first = denied[0]
            reason, who, detail = first.result.reason, first.name, first.result.detail
        else:
            fallback = any(o.result.reason == "default-permit" for o in outcomes)
            reason, who, detail = ("default-permit" if fallback else "permit"), None, ""
        return cls(
            request=request,
            allowed=not denied and bool(outcomes),
            reason=reason if outcomes else "no-authorizer",
            authorizer=who,
            detail=detail,
            policy_ids=tuple(ids),
            errors=errors,
            outcomes=tuple(outcomes),
            freshness=freshness,
        )

    @classmethod
    def refused(
        cls, request: AuthorizationRequest, reason: str, detail: str, freshness: Freshness
    ) -> AuthorizationDecision:
        """A deny before any authorizer could run (no snapshot, an expired one)."""
        return cls(
            request=request,
            allowed=False,
            reason=reason,
            authorizer=None,
            detail=detail,
            policy_ids=(),
            errors=(detail,),
            outcomes=(),
            freshness=freshness,
        )

    def to_dict(self) -> dict[str, Any]:
        """The audit payload's fields (``decision_class`` ``authorization``, the request, the
        verdict, every authorizer's answer, ``rulesetRev``/``snapshotAgeMs``/``degraded``)."""
        return {
            "decision_class": DecisionClass.AUTHORIZATION.value,
            **self.request.to_dict(),
            "allowed": self.allowed,
            "reason": self.reason,
            "authorizer": self.authorizer,
            "detail": self.detail,
            "policyIds": list(self.policy_ids),
            "errors": list(self.errors),
            "authorizers": [o.to_dict() for o in self.outcomes],
            **self.freshness.to_dict(),
        }


def grant_check(gate: ClaimGate, request: AuthorizationRequest) -> AuthorizationResult:
    """The built-in authorizer: the claim's pool (``context.pool`` or a ``Pool`` resource) is
    in the inventory, active, and named by a capacity profile, and when the request names a
    project, granted to it (or to every project) (:meth:`~.postures.ClaimGate.check`); when the
    context names the claiming ``host`` or the ``harness`` to run, the daemon's local-reality
    check too (:func:`~.postures.check_placement`: ``host-not-ready``, ``harness-unknown``). A
    request naming no pool is denied (``no-pool``): nothing to check is never an allow."""
    pool = request.pool
    if pool is None:
        return AuthorizationResult(
            allowed=False,
            reason="no-pool",
            detail="the snapshot grant check needs a pool (context.pool or a Pool resource)",
        )
    claim = gate.check(pool, request.project)
    host, harness = request.context.get("host"), request.context.get("harness")
    if claim.admitted and (isinstance(host, str) or isinstance(harness, str)):
        place = gate.place(
            pool,
            host_id=host if isinstance(host, str) else None,
            harness=harness if isinstance(harness, str) else None,
        )
        if not place.placeable:
            return AuthorizationResult(allowed=False, reason=place.reason, detail=place.detail)
    return AuthorizationResult(allowed=claim.admitted, reason=claim.reason, detail=claim.detail)


@dataclass(slots=True)
class _Prepared:
    key: tuple[str, str]
    gate: ClaimGate
    default_permit: bool
    unclaimed: tuple[str, ...]
    decides: list[tuple[Authorizer, Decide | Exception]]


class AuthorizationEngine:
    """The built-in grant check and the plugin authorizers, prepared once per snapshot."""

    __slots__ = ("_authorizers", "_prepared")

    def __init__(self, authorizers: Sequence[Authorizer] = ()) -> None:
        self._authorizers = tuple(sorted(authorizers, key=lambda a: a.name))
        self._prepared: _Prepared | None = None

    @property
    def authorizers(self) -> tuple[Authorizer, ...]:
        return self._authorizers

    def _prepare(
        self, ruleset_rev: str, content_hash: str, sections: Mapping[str, Any]
    ) -> _Prepared:
        key = (ruleset_rev, content_hash)
        if self._prepared is not None and self._prepared.key == key:
            return self._prepared
        section = authorization_of(sections)
        claimed = {kind for a in self._authorizers for kind in a.evaluates}
        unclaimed = tuple(k for k in policy_kinds_of(sections) if k not in claimed)
        decides: list[tuple[Authorizer, Decide | Exception]] = []
        for a in self._authorizers:
            try:
                # its own read-only copy: no authorizer changes what another, or the grant
                # check, sees (a RecursionError, too deep to copy, denies like any failure)
                decide = a.prepare(read_only(dict(sections)))
                if not callable(decide):
                    raise TypeError(f"prepare returned {type(decide).__name__}, not a callable")
                decides.append((a, decide))
            except Exception as e:  # the posture: an authorizer that cannot prepare denies
                decides.append((a, e))
        self._prepared = _Prepared(
            key=key,
            gate=ClaimGate(sections),
            default_permit=section is not None and section.get("defaultPermit") is True,
            unclaimed=unclaimed,
            decides=decides,
        )
        return self._prepared

    def decide(
        self,
        requests: Sequence[AuthorizationRequest],
        *,
        ruleset_rev: str,
        content_hash: str,
        sections: Mapping[str, Any],
        freshness: Freshness,
    ) -> list[AuthorizationDecision]:
        """One decision per request, against the snapshot ``ruleset_rev`` (whose sections and
        content hash are given) seen at ``freshness``.

        Raises:
            Nothing: every failure of an authorizer is a deny naming it.
        """
        prepared = self._prepare(ruleset_rev, content_hash, sections)
        snapshot_fields = {
            "rulesetRev": freshness.ruleset_rev or ruleset_rev,
            "snapshotAgeMs": freshness.age_ms or 0,
            "degraded": freshness.degraded,
        }
        contexts = [{**r.context, **snapshot_fields} for r in requests]
        columns: list[list[AuthorizerOutcome]] = [
            [
                AuthorizerOutcome(
                    name=BUILTIN_AUTHORIZER, plugin="built-in", result=grant_check(prepared.gate, r)
                )
            ]
            for r in requests
        ]
        if prepared.unclaimed:
            missing = _unclaimed(prepared.unclaimed, self._authorizers)
            for col in columns:
                col.append(
                    AuthorizerOutcome(name="authorization", plugin="built-in", result=missing)
                )
        for authorizer, decide in prepared.decides:
            results = _run(decide, _shown(requests, contexts), prepared.default_permit)
            for col, result in zip(columns, results, strict=True):
                col.append(
                    AuthorizerOutcome(name=authorizer.name, plugin=authorizer.plugin, result=result)
                )
        return [
            AuthorizationDecision.combine(r, col, freshness)
            for r, col in zip(requests, columns, strict=True)
        ]


def _shown(
    requests: Sequence[AuthorizationRequest], contexts: Sequence[Mapping[str, Any]]
) -> tuple[AuthorizationRequest, ...]:
    """The requests as one authorizer is shown them: its own objects, each context a read-only
    copy holding the snapshot fields, in a tuple (nothing it does reaches another authorizer)."""
    return tuple(
        AuthorizationRequest(
            principal=r.principal, action=r.action, resource=r.resource, context=read_only(c)
        )
        for r, c in zip(requests, contexts, strict=True)
    )


def _unclaimed(kinds: Sequence[str], loaded: Sequence[Authorizer]) -> AuthorizationResult:
    """The deny for policy kinds of the snapshot that no loaded authorizer evaluates."""
    names = ", ".join(f"{a.name} ({'/'.join(a.evaluates)})" for a in loaded) or "none"
    detail = (
        f"the snapshot's authorization section (policyBundle.{AUTHORIZATION}) carries "
        f"{', '.join(kinds)} policies that no loaded authorizer evaluates "
        f"(authorizers loaded: {names})"
    )
    return AuthorizationResult(
        allowed=False, reason="no-authorizer", detail=detail, errors=(detail,)
    )


def _run(
    decide: Decide | Exception,
    requests: Sequence[AuthorizationRequest],
    default_permit: bool,
) -> list[AuthorizationResult]:
    """One authorizer over a batch, each answer through the fail-closed posture
    (:func:`authorize`): a failed prepare, a raising ``decide`` or one that miscounts denies
    every request of the batch."""
    if isinstance(decide, Exception):
        return [_failed(decide)] * len(requests)
    try:
        verdicts = decide(requests)
        if not isinstance(verdicts, (list, tuple)) or len(verdicts) != len(requests):
            raise TypeError("decide must return one verdict per request")
    except Exception as e:  # the engine raised: every request of the batch denies
        return [_failed(e)] * len(requests)
    return [authorize(_constant(v), default_permit=default_permit) for v in verdicts]


def _failed(error: Exception) -> AuthorizationResult:
    """The posture's answer to an evaluation that raised ``error``, the error listed."""

    def evaluate() -> None:
        raise error

    result = authorize(evaluate)
    return replace(result, errors=(result.detail,))


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value
