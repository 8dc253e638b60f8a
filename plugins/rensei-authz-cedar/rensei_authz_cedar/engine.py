"""The Cedar side of authorization: read the snapshot's authorization section (Cedar policy
text by id, an optional Cedar schema, the default-permit flag), check it, build the Cedar
entities from the snapshot, and answer requests through cedarpy.

Owns everything Cedar; the core never interprets it. Pure apart from the Cedar engine: no I/O,
no clock. :func:`prepare` runs once per snapshot revision (the core's engine caches it) and
returns a :class:`CedarDecider` holding the parsed policy set and entities, reused for every
request against that snapshot.

Entity model (what a policy can name; ``examples/org.json`` carries the matching schema):

=====================  ============================================  ===================
entity                 attributes                                    parents
=====================  ============================================  ===================
``Profile::"id"``      ``grantedToAll: Bool``                        -
``Pool::"id"``         ``status: String``, ``kind?: String``         the profiles
                       (``substrateClass``), ``profiles:             naming it
                       Set<Profile>``                                (``poolIds``)
``Host::"id"``         ``pool: Pool`` (``executionPoolId``),         its pool
                       ``status?: String``
``Project::"id"``      ``profiles: Set<Profile>`` (granted to it     those profiles
                       or to every project)
=====================  ============================================  ===================

The sections are read in the Rensei daemon's shapes (``profileId``/``projectId`` grants,
``null`` for every project) and in the older ones (``profile``/``project``, ``pools``, ``kind``,
``pool``). Projects are those named by grants and the section's ``projects``, plus
``Project::"*"`` (the org data's spelling of every project: a claim that names none). The
context carries ``pool``, ``project``, ``repo``, ``role`` (when given), ``rulesetRev``,
``snapshotAgeMs`` and ``degraded``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import cedarpy

from rensei_routing.core.snapshot.authz import AuthorizationRequest, EntityRef
from rensei_routing.core.snapshot.org import authorization_of
from rensei_routing.core.snapshot.postures import PolicyVerdict
from rensei_routing.errors import SnapshotError

__all__ = [
    "CedarBundle",
    "CedarBundleError",
    "CedarDecider",
    "bundle_problems",
    "entities_of",
    "prepare",
    "read_bundle",
]

_EVERY_PROJECT: Final = "*"


class CedarBundleError(SnapshotError):
    """The snapshot's Cedar bundle is missing, does not parse or does not validate."""


class CedarBundle:
    """The parsed authorization section: the policy set (ids as authored), the schema handle
    (or ``None``), the default-permit flag, the extra project ids."""

    __slots__ = ("default_permit", "policies", "policy_count", "projects", "schema")

    def __init__(
        self,
        policies: cedarpy.PolicySet,
        schema: cedarpy.Schema | None,
        *,
        policy_count: int,
        default_permit: bool,
        projects: Sequence[str],
    ) -> None:
        self.policies = policies
        self.schema = schema
        self.policy_count = policy_count
        self.default_permit = default_permit
        self.projects = tuple(projects)


def _schema(value: Any) -> cedarpy.Schema | None:
    """Raises: ValueError (the schema does not parse)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return cedarpy.Schema.from_json_str(json.dumps(value))
    if isinstance(value, str):
        return cedarpy.Schema.from_str(value)
    raise ValueError(f"cedarSchema is a {type(value).__name__}, not an object or text")


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _parse(section: Mapping[str, Any]) -> tuple[CedarBundle | None, list[str]]:
    """The bundle and every problem found (``None`` when there is any), each naming the policy."""
    problems: list[str] = []
    raw = section.get("cedarPolicies")
    if not isinstance(raw, Mapping):
        return None, ["authorization.cedarPolicies is not an object of policy id -> Cedar text"]
    try:
        schema = _schema(section.get("cedarSchema"))
    except ValueError as e:
        problems.append(f"cedarSchema does not parse: {_one_line(e)}")
        schema = None
    static: dict[str, Any] = {}
    for pid in sorted(raw):
        text = raw[pid]
        if not isinstance(text, str):
            problems.append(f"policy {pid!r} is not Cedar text")
            continue
        try:
            est = json.loads(cedarpy.policies_to_json_str(text))
        except ValueError as e:
            problems.append(f"policy {pid!r} does not parse: {_one_line(e)}")
            continue
        if est.get("templates") or est.get("templateLinks"):
            problems.append(f"policy {pid!r} is a template (slots are not supported)")
            continue
        found = list((est.get("staticPolicies") or {}).values())
        if len(found) != 1:
            problems.append(f"policy {pid!r} holds {len(found)} policies (one per id)")
            continue
        if schema is not None:
            result = cedarpy.validate_policies(text, schema)
            for err in result.errors:
                reason = " ".join(err.error.split())
                problems.append(f"policy {pid!r} does not validate against the schema: {reason}")
            if not result.validation_passed and not result.errors:
                problems.append(f"policy {pid!r} does not validate against the schema")
        static[pid] = found[0]
    if problems:
        return None, problems
    document = {"staticPolicies": static, "templates": {}, "templateLinks": []}
    try:
        policies = cedarpy.PolicySet.from_json_str(json.dumps(document))
    except ValueError as e:
        return None, [f"the policy set does not build: {_one_line(e)}"]
    projects = section.get("projects") or []
    return CedarBundle(
        policies,
        schema,
        policy_count=len(static),
        default_permit=section.get("defaultPermit") is True,
        projects=[p for p in projects if isinstance(p, str)],
    ), []


def bundle_problems(sections: Mapping[str, Any]) -> list[str]:
    """The snapshot validator's check: every Cedar policy parses (one policy per id, no
    templates) and, with a schema, validates against it. A snapshot without an authorization
    section has nothing to check (a host with this plugin then denies every request)."""
    section = authorization_of(sections)
    if section is None:
        return []
    return _parse(section)[1]


def read_bundle(sections: Mapping[str, Any]) -> CedarBundle:
    """The snapshot's Cedar bundle.

    Raises:
        CedarBundleError: no authorization section, or a policy or the schema does not parse
            or validate (naming the policy and the error).
    """
    section = authorization_of(sections)
    if section is None:
        raise CedarBundleError("the snapshot's policy bundle has no authorization section")
    bundle, problems = _parse(section)
    if bundle is None:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CedarBundleError(problems[0] + more)
    return bundle


def _uid(kind: str, ident: str) -> dict[str, str]:
    return {"type": kind, "id": ident}


def _items(sections: Mapping[str, Any], section: str, key: str) -> list[Mapping[str, Any]]:
    value = sections.get(section)
    items = value.get(key) if isinstance(value, Mapping) else None
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, Mapping)]


def entities_of(
    sections: Mapping[str, Any], *, projects: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The Cedar entities (JSON form) of a snapshot's sections: profiles, pools, hosts,
    projects (see the module docstring). Malformed entries are skipped."""
    profiles = [
        p for p in _items(sections, "capacityProfiles", "profiles") if isinstance(p.get("id"), str)
    ]
    granted: dict[str, set[str]] = {}
    for g in _items(sections, "capacityProfiles", "grants"):
        profile = g.get("profileId", g.get("profile"))
        if isinstance(profile, str):
            project = g.get("projectId", g.get("project")) or _EVERY_PROJECT
            if isinstance(project, str):
                granted.setdefault(project, set()).add(profile)
    to_all = granted.get(_EVERY_PROJECT, set())
    of_pool: dict[str, list[str]] = {}
    for prof in profiles:
        pools = prof.get("poolIds", prof.get("pools"))
        for pool in pools if isinstance(pools, list) else []:
            if isinstance(pool, str):
                of_pool.setdefault(pool, []).append(prof["id"])
    out: list[dict[str, Any]] = [
        {
            "uid": _uid("Profile", prof["id"]),
            "attrs": {"grantedToAll": prof["id"] in to_all},
            "parents": [],
        }
        for prof in profiles
    ]
    for pool in _items(sections, "poolHostInventory", "pools"):
        if not isinstance(pool.get("id"), str):
            continue
        names = sorted(of_pool.get(pool["id"], []))
        attrs: dict[str, Any] = {
            "status": str(pool.get("status", "")),
            "profiles": [{"__entity": _uid("Profile", n)} for n in names],
        }
        kind = pool.get("substrateClass", pool.get("kind"))
        if isinstance(kind, str):
            attrs["kind"] = kind
        out.append(
            {
                "uid": _uid("Pool", pool["id"]),
                "attrs": attrs,
                "parents": [_uid("Profile", n) for n in names],
            }
        )
    for host in _items(sections, "poolHostInventory", "hosts"):
        in_pool = host.get("executionPoolId", host.get("pool"))
        if not (isinstance(host.get("id"), str) and isinstance(in_pool, str)):
            continue
        attrs = {"pool": {"__entity": _uid("Pool", in_pool)}}
        if isinstance(host.get("status"), str):
            attrs["status"] = host["status"]
        out.append(
            {
                "uid": _uid("Host", host["id"]),
                "attrs": attrs,
                "parents": [_uid("Pool", in_pool)],
            }
        )
    known = {n for n in granted if n != _EVERY_PROJECT} | set(projects) | {_EVERY_PROJECT}
    for project in sorted(known):
        names = sorted(granted.get(project, set()) | to_all)
        out.append(
            {
                "uid": _uid("Project", project),
                "attrs": {"profiles": [{"__entity": _uid("Profile", n)} for n in names]},
                "parents": [_uid("Profile", n) for n in names],
            }
        )
    return out


class CedarDecider:
    """The prepared authorizer of one snapshot: its policy set and entities, parsed once."""

    __slots__ = ("bundle", "entities", "uids")

    def __init__(self, bundle: CedarBundle, entities: list[dict[str, Any]]) -> None:
        self.bundle = bundle
        self.entities = cedarpy.Entities.from_json_str(json.dumps(entities))
        self.uids = frozenset((e["uid"]["type"], e["uid"]["id"]) for e in entities)

    def _missing(self, request: AuthorizationRequest) -> tuple[str, ...]:
        return tuple(
            f"entity {ref} is not in the snapshot"
            for ref in (request.principal, request.resource)
            if (ref.type, ref.id) not in self.uids
        )

    def __call__(self, requests: Sequence[AuthorizationRequest]) -> list[PolicyVerdict]:
        """One verdict per request: an entity the snapshot lacks is an error (never sent to
        the engine); otherwise Cedar's answer, its determining policies and its errors (a
        request Cedar could not even build, ``NoDecision``, is an error too)."""
        out: list[PolicyVerdict | None] = []
        batch: list[dict[str, Any]] = []
        for r in requests:
            missing = self._missing(r)
            if missing:
                out.append(PolicyVerdict(effect=None, errors=missing))
                continue
            out.append(None)
            batch.append(
                {
                    "principal": _ref(r.principal),
                    "action": _ref(r.action),
                    "resource": _ref(r.resource),
                    "context": dict(r.context),
                }
            )
        answers = iter(
            cedarpy.is_authorized_batch(batch, self.bundle.policies, self.entities) if batch else ()
        )
        return [v if v is not None else _verdict(next(answers)) for v in out]


def _ref(ref: EntityRef) -> dict[str, str]:
    return {"type": ref.type, "id": ref.id}


def _verdict(result: cedarpy.AuthzResult) -> PolicyVerdict:
    diagnostics = result.diagnostics
    ids = tuple(diagnostics.reasons)
    errors = tuple(diagnostics.errors)
    decision = result.decision
    if decision == cedarpy.Decision.Allow:
        return PolicyVerdict(effect=True, policy_ids=ids, errors=errors)
    if decision == cedarpy.Decision.Deny:
        return PolicyVerdict(effect=False if ids else None, policy_ids=ids, errors=errors)
    return PolicyVerdict(
        effect=None, policy_ids=ids, errors=errors or ("Cedar reached no decision",)
    )


def prepare(sections: Mapping[str, Any]) -> CedarDecider:
    """Parse the snapshot's Cedar bundle and build its entities, once per snapshot revision.

    Raises:
        CedarBundleError: the section is missing or a policy or the schema is unusable.
        ValueError: the entities do not build (Cedar refused them).
    """
    bundle = read_bundle(sections)
    return CedarDecider(bundle, entities_of(sections, projects=bundle.projects))
