"""The four decision classes and their failure postures (document 000), and the claim gate.

Each posture is a small pure mechanism: the reads it depends on are callables handed in, and
what a failed read does is decided here, once. Pure: no I/O, no clock, no global random state
(the bandit takes a seed).

| class          | posture                  | on a read failure                                  |
| authorization  | fail_closed              | deny, exactly like a named forbid                  |
| placement      | fail_static              | last known-good, bounded and flagged (freshness)   |
| budget         | conservative_cap         | counter fails closed; live signal -> local cap     |
| bandit         | fail_open_deterministic  | the deterministic, non-learned choice              |
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "POSTURES",
    "AuthorizationResult",
    "BanditChoice",
    "BudgetResult",
    "ClaimGate",
    "ClaimResult",
    "DecisionClass",
    "PlacementResult",
    "PolicyVerdict",
    "Posture",
    "admit_budget",
    "authorize",
    "budget_verdict",
    "check_placement",
    "choose_arm",
    "local_cap_verdict",
    "posterior_of",
]


class DecisionClass(StrEnum):
    """What kind of fact a decision decides."""

    AUTHORIZATION = "authorization"
    PLACEMENT = "placement"
    BUDGET = "budget"
    BANDIT = "bandit"


class Posture(StrEnum):
    """What a class does when its input cannot be freshly read."""

    FAIL_CLOSED = "fail_closed"
    FAIL_STATIC = "fail_static"
    CONSERVATIVE_CAP = "conservative_cap"
    FAIL_OPEN_DETERMINISTIC = "fail_open_deterministic"


POSTURES: Final[Mapping[DecisionClass, Posture]] = {
    DecisionClass.AUTHORIZATION: Posture.FAIL_CLOSED,
    DecisionClass.PLACEMENT: Posture.FAIL_STATIC,
    DecisionClass.BUDGET: Posture.CONSERVATIVE_CAP,
    DecisionClass.BANDIT: Posture.FAIL_OPEN_DETERMINISTIC,
}


# -- authorization: fail closed -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyVerdict:
    """What a policy engine answered for one request: ``effect`` ``True`` (a permit
    determined it), ``False`` (a forbid did) or ``None`` (no authored policy applies), the
    ``policy_ids`` that determined it, and the ``errors`` met while evaluating (any error makes
    the answer a failure, whatever the effect: a policy that could not be evaluated might have
    been a forbid)."""

    effect: bool | None
    policy_ids: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizationResult:
    """``allowed`` with a reason: ``permit``, ``forbid``, ``default-permit`` (the declared
    fallback), ``no-policy`` or ``evaluation-failed`` (``detail`` names the error); the
    determining ``policy_ids`` and the evaluation ``errors`` when the engine gave them."""

    allowed: bool
    reason: str
    detail: str = ""
    policy_ids: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.allowed

    def to_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "reason": self.reason,
            "detail": self.detail,
            "policyIds": list(self.policy_ids),
            "errors": list(self.errors),
        }


def authorize(
    evaluate: Callable[[], bool | PolicyVerdict | None], *, default_permit: bool = False
) -> AuthorizationResult:
    """Run an authorization evaluation under the fail-closed posture.

    ``evaluate()`` returns ``True`` (an explicit permit), ``False`` (a forbid) or ``None`` (no
    authored policy applies), or a :class:`PolicyVerdict` carrying one of those with the
    determining policy ids and the evaluation errors. Anything it raises (an unreachable
    source, a malformed bundle, a missing section), and any verdict carrying an error, is a
    deny, exactly like a named forbid. The only allow with no authored policy is
    ``default_permit``: a workspace's declared, named fallback, never a swallowed error; it
    never overrides a forbid or a failure. A return value that is not one of these is a
    failure too.
    """
    try:
        verdict = evaluate()
    except Exception as e:  # the posture: every failure denies
        return AuthorizationResult(
            allowed=False, reason="evaluation-failed", detail=f"{type(e).__name__}: {e}"
        )
    ids: tuple[str, ...] = ()
    if isinstance(verdict, PolicyVerdict):
        ids, errors = verdict.policy_ids, verdict.errors
        well_formed = isinstance(ids, tuple) and all(isinstance(i, str) for i in ids)
        well_formed = well_formed and isinstance(errors, tuple)
        well_formed = well_formed and all(isinstance(x, str) for x in errors)
        if not well_formed:
            return AuthorizationResult(
                allowed=False,
                reason="evaluation-failed",
                detail="verdict policy_ids and errors must be tuples of strings",
            )
        if errors:
            return AuthorizationResult(
                allowed=False,
                reason="evaluation-failed",
                detail=errors[0],
                policy_ids=ids,
                errors=errors,
            )
        verdict = verdict.effect
    if verdict is True:
        return AuthorizationResult(allowed=True, reason="permit", policy_ids=ids)
    if verdict is False:
        return AuthorizationResult(allowed=False, reason="forbid", policy_ids=ids)
    if verdict is None:
        if default_permit:
            return AuthorizationResult(allowed=True, reason="default-permit")
        return AuthorizationResult(allowed=False, reason="no-policy")
    return AuthorizationResult(
        allowed=False,
        reason="evaluation-failed",
        detail=f"evaluation returned {type(verdict).__name__}, not a verdict",
    )


# -- budget: conservative cap -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetResult:
    """``admitted`` with a reason: ``within-limit``, ``over-limit``, ``counter-unavailable``,
    ``live-signal-throttled``, ``local-cap`` (the fallback admitted), ``local-cap-reached``."""

    admitted: bool
    reason: str
    detail: str = ""

    def __bool__(self) -> bool:
        return self.admitted


def admit_budget(
    *,
    read_counter: Callable[[], int],
    limit: int,
    read_live_signal: Callable[[], bool],
    local_inflight: int,
    local_cap: int,
) -> BudgetResult:
    """Admit one launch under the conservative-cap posture.

    The authoritative counter (org inflight/period usage) fails closed: if it cannot be read,
    the launch is rejected. Only the live-delivery signal (``read_live_signal()`` -> whether
    delivery is healthy) falls back: when it cannot be read, a separate, bounded, per-project
    local cap decides (``local_inflight < local_cap``); never an unbounded fallback, never a
    substitute for the counter.
    """
    verdict = budget_verdict(
        read_counter=read_counter, limit=limit, read_live_signal=read_live_signal
    )
    return verdict if verdict is not None else local_cap_verdict(local_inflight, local_cap)


def budget_verdict(
    *, read_counter: Callable[[], int], limit: int, read_live_signal: Callable[[], bool]
) -> BudgetResult | None:
    """The first step of :func:`admit_budget`: the verdict of the counter and the live signal,
    or ``None`` when the signal could not be read and the local cap must decide (the store
    counts the cap atomically, so the adapter runs the second step inside its transaction)."""
    try:
        used = read_counter()
    except Exception as e:  # the authoritative counter fails closed
        return BudgetResult(
            admitted=False, reason="counter-unavailable", detail=f"{type(e).__name__}: {e}"
        )
    if isinstance(used, bool) or not isinstance(used, int):
        return BudgetResult(admitted=False, reason="counter-unavailable", detail="not a count")
    if used >= limit:
        return BudgetResult(admitted=False, reason="over-limit", detail=f"{used} >= {limit}")
    try:
        healthy = read_live_signal()
    except Exception:  # only this signal falls back, to the local cap
        return None
    if healthy is not True:
        return BudgetResult(admitted=False, reason="live-signal-throttled")
    return BudgetResult(admitted=True, reason="within-limit")


def local_cap_verdict(inflight: int, cap: int) -> BudgetResult:
    """The bounded fallback: admit while ``inflight < cap``."""
    if inflight < cap:
        return BudgetResult(
            admitted=True,
            reason="local-cap",
            detail=f"live signal unavailable; {inflight} < local cap {cap}",
        )
    return BudgetResult(
        admitted=False,
        reason="local-cap-reached",
        detail=f"live signal unavailable; {inflight} >= local cap {cap}",
    )


# -- bandit: fail open, deterministically -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BanditChoice:
    """The chosen arm and how: ``sampled`` (Thompson) or ``deterministic`` with the reason
    the sampler could not run (``exploration-disabled``, ``no-prior``, ``sampler-failed``)."""

    arm: str
    mode: str
    reason: str = ""


def choose_arm(
    *,
    arms: Sequence[str],
    deterministic: str,
    read_posterior: Callable[[], Mapping[str, Any]],
    seed: int,
    exploration_enabled: bool = True,
) -> BanditChoice:
    """Sample an arm by Thompson sampling over the posterior summary (``{arm: {"alpha": a,
    "beta": b}}``) with a seeded generator; when exploration is disabled, the posterior cannot
    be read, an arm has no prior, or sampling fails, return ``deterministic`` (the static or
    top-capability choice a non-learning dispatch makes). Never blocks dispatch.
    """
    if not exploration_enabled:
        return BanditChoice(arm=deterministic, mode="deterministic", reason="exploration-disabled")
    try:
        posterior = read_posterior()
        rng = random.Random(seed)
        best: tuple[float, str] | None = None
        for arm in sorted(arms):
            prior = posterior.get(arm)
            if not isinstance(prior, Mapping):
                return BanditChoice(arm=deterministic, mode="deterministic", reason="no-prior")
            alpha, beta = prior["alpha"], prior["beta"]
            if not (_positive(alpha) and _positive(beta)):
                return BanditChoice(arm=deterministic, mode="deterministic", reason="no-prior")
            draw = rng.betavariate(float(alpha), float(beta))
            if best is None or draw > best[0]:
                best = (draw, arm)
    except Exception:  # the posture: a sampler that cannot run falls back
        return BanditChoice(arm=deterministic, mode="deterministic", reason="sampler-failed")
    if best is None:
        return BanditChoice(arm=deterministic, mode="deterministic", reason="no-prior")
    return BanditChoice(arm=best[1], mode="sampled")


def posterior_of(
    sections: Mapping[str, Any], work_type: str = "default"
) -> dict[str, Mapping[str, Any]]:
    """The snapshot's posteriors for ``work_type`` as ``{provider: {"alpha", "beta", ...}}``
    for :func:`choose_arm` (the daemon's ``posteriorSummary.posteriors[]``, keyed by
    (provider, workType); an old ``arms`` list reads as work type ``default``).

    Raises:
        KeyError: the snapshot carries no posterior summary (the sampler then falls back).
    """
    summary = sections.get("posteriorSummary")
    if not isinstance(summary, Mapping):
        raise KeyError("posteriorSummary")
    found = summary.get("posteriors")
    if not isinstance(found, list):
        arms = summary.get("arms")
        if not isinstance(arms, list):
            raise KeyError("posteriorSummary")
        found = [
            {**a, "provider": a["arm"], "workType": "default"}
            for a in arms
            if isinstance(a, Mapping) and "arm" in a
        ]
    return {
        a["provider"]: a
        for a in found
        if isinstance(a, Mapping)
        and isinstance(a.get("provider"), str)
        and a.get("workType") == work_type
    }


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < 1e12


# -- the claim gate (placement, against the cached snapshot) -------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """``admitted`` with a reason: ``granted``, ``pool-not-in-inventory``,
    ``pool-not-active`` (any status but ``active``, unknown ones included),
    ``pool-not-granted``, ``project-not-allowed``."""

    admitted: bool
    reason: str
    pool_id: str
    detail: str = ""

    def __bool__(self) -> bool:
        return self.admitted


class ClaimGate:
    """Permission re-check of a claim against one snapshot's sections, indexed once.

    A claim for a pool is admitted only if the pool is in ``poolHostInventory.pools`` with
    status ``active`` and some capacity profile's ``poolIds`` name it: the Rensei daemon's own
    three pool rules (reasons ``pool-not-in-inventory``, ``pool-not-active``,
    ``pool-not-granted``), checked in that order. A claim that names no project is decided by
    those three alone, exactly as the daemon decides it (SEMANTICS.md, claim permission). A
    claim that names a project must also have, on top, a grant (``profileId``) of a profile
    naming the pool to that project (``projectId``) or to every project (``projectId`` null,
    absent or ``"*"``): else ``pool-not-granted``; and the pool's ``allowedProjectIds`` (when
    non-empty) must include the project: else ``project-not-allowed``. Revoking a grant (or
    naming the pool in no profile) takes effect for a claim against a cached snapshot exactly
    as for a live one. Malformed entries are skipped, never read as a grant. Old-shape rows
    (``pools``, ``profile``/``project``) are read too, so a snapshot cached before the daemon
    shapes keeps deciding the same.
    """

    __slots__ = ("_allowed", "_granted", "_sections", "_status")

    def __init__(self, sections: Mapping[str, Any]) -> None:
        self._sections = sections
        inventory = _obj(sections.get("poolHostInventory"))
        self._status: dict[str, str] = {}
        self._allowed: dict[str, set[str]] = {}
        for pool in _list(inventory.get("pools")):
            if isinstance(pool, Mapping) and isinstance(pool.get("id"), str):
                status = pool.get("status")
                self._status[pool["id"]] = status if isinstance(status, str) else ""
                allowed = [a for a in _list(pool.get("allowedProjectIds")) if isinstance(a, str)]
                if allowed or pool.get("allowedProjectIds") not in (None, []):
                    self._allowed[pool["id"]] = set(allowed)
        capacity = _obj(sections.get("capacityProfiles"))
        projects_by_profile: dict[str, set[str]] = {}
        for grant in _list(capacity.get("grants")):
            if not isinstance(grant, Mapping):
                continue
            profile = grant.get("profileId", grant.get("profile"))
            project = grant.get("projectId", grant.get("project", "*"))
            if isinstance(profile, str) and (project is None or isinstance(project, str)):
                projects_by_profile.setdefault(profile, set()).add(project or "*")
        self._granted: dict[str, set[str]] = {}
        for profile in _list(capacity.get("profiles")):
            if not (isinstance(profile, Mapping) and isinstance(profile.get("id"), str)):
                continue
            projects = projects_by_profile.get(profile["id"], set())
            for pool_id in _list(profile.get("poolIds", profile.get("pools"))):
                if isinstance(pool_id, str):
                    self._granted.setdefault(pool_id, set()).update(projects)

    def place(
        self, pool_id: str, *, host_id: str | None, harness: str | None = None
    ) -> PlacementResult:
        """:func:`check_placement` against this gate's sections (no host row is checked when
        ``host_id`` is ``None``)."""
        return check_placement(self._sections, pool_id=pool_id, host_id=host_id, harness=harness)

    def check(self, pool_id: str, project: str | None = None) -> ClaimResult:
        status = self._status.get(pool_id)
        if status is None:
            return ClaimResult(admitted=False, reason="pool-not-in-inventory", pool_id=pool_id)
        if status != "active":
            return ClaimResult(
                admitted=False,
                reason="pool-not-active",
                pool_id=pool_id,
                detail=f"status {status!r}",
            )
        if pool_id not in self._granted:
            return ClaimResult(
                admitted=False,
                reason="pool-not-granted",
                pool_id=pool_id,
                detail="no capacity profile names this pool",
            )
        if project is None:  # no project named: the daemon's three pool rules alone
            return ClaimResult(admitted=True, reason="granted", pool_id=pool_id)
        projects = self._granted[pool_id]
        if "*" in projects or project in projects:
            allowed = self._allowed.get(pool_id)
            if allowed is not None and project not in allowed:
                return ClaimResult(
                    admitted=False,
                    reason="project-not-allowed",
                    pool_id=pool_id,
                    detail=f"the pool's allowedProjectIds do not include project {project!r}",
                )
            return ClaimResult(admitted=True, reason="granted", pool_id=pool_id)
        return ClaimResult(
            admitted=False,
            reason="pool-not-granted",
            pool_id=pool_id,
            detail=f"no capacity profile naming this pool is granted to project {project!r}",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementResult:
    """The host's local-reality check: ``placeable`` with a reason (``ready``,
    ``host-not-ready``, ``harness-unknown``)."""

    placeable: bool
    reason: str
    detail: str = ""

    def __bool__(self) -> bool:
        return self.placeable


def check_placement(
    sections: Mapping[str, Any], *, pool_id: str, host_id: str | None, harness: str | None = None
) -> PlacementResult:
    """The Rensei daemon's local-reality check against a snapshot: the host row of this host
    in this pool (``hosts[]`` with ``id`` = ``host_id`` and ``executionPoolId`` = ``pool_id``),
    when present, must have status ``ready`` (``draining``, ``unhealthy``, ``offline`` and
    unknown statuses refuse); ``harness``, when given, must appear as a value of some
    provider's ``harnessByAuthMode`` in the execution-cell matrix."""
    inventory = _obj(sections.get("poolHostInventory"))
    for row in _list(inventory.get("hosts")):
        if host_id is None or not isinstance(row, Mapping) or row.get("id") != host_id:
            continue
        if row.get("executionPoolId", row.get("pool")) != pool_id:
            continue
        status = row.get("status")
        if status is not None and status != "ready":
            return PlacementResult(
                placeable=False, reason="host-not-ready", detail=f"host status {status!r}"
            )
    if harness is not None:
        matrix = _obj(sections.get("executionCellMatrix"))
        known = {
            h
            for prov in _list(matrix.get("providers"))
            if isinstance(prov, Mapping)
            for h in _obj(prov.get("harnessByAuthMode")).values()
            if isinstance(h, str)
        }
        if harness not in known:
            return PlacementResult(
                placeable=False,
                reason="harness-unknown",
                detail=f"no provider's harnessByAuthMode names {harness!r}",
            )
    return PlacementResult(placeable=True, reason="ready")


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
