"""An org's live data (capacity profiles and grants, pools and hosts, the execution-cell matrix,
the posterior summary, and the optional authorization policies), the snapshot sections compiled
from it, and the built-in validators.

The authorization section (Cedar policy text, an optional Cedar schema, the declared
default-permit fallback) is stored verbatim but typed: the core checks its shape and never
interprets Cedar (an authorizer plugin does).

Pure: ``from_dict`` refuses what is not well-formed (naming the field path); the validators
report what is well-formed but inconsistent (a grant naming no profile, ...). Every list is
sorted by a stable key when compiled, so two compiles over the same data agree byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .. import _parse as p
from ..routing.policy import PolicySnapshot
from ..routing.validation import validate
from ..routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from .validators import SnapshotValidator

__all__ = [
    "AUTHORIZATION",
    "BUILTIN",
    "CEDAR",
    "OrgData",
    "authorization_of",
    "builtin_validators",
    "compile_sections",
    "policy_document",
    "policy_kinds_of",
]

_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_MAX_ITEMS: Final = 1_000_000
_SECTIONS: Final = (
    "capacityProfiles",
    "poolHostInventory",
    "executionCellMatrix",
    "posteriorSummary",
)
#: The optional org-document section compiled into the policy bundle (not a snapshot section).
AUTHORIZATION: Final = "authorization"
_MAX_POLICIES: Final = 100_000
_MAX_POLICY_TEXT: Final = 64 * 1024
_MAX_SCHEMA_TEXT: Final = 4 * 1024 * 1024


def _id(value: Any, path: p.Path) -> str:
    text = p.string(value, path, max_len=128, verbatim=True)
    if not _ID.match(text):
        raise p.fail(path, f"{text!r} is not an id ([A-Za-z0-9][A-Za-z0-9._:-]*, <= 128)")
    return text


def _ids(value: Any, path: p.Path) -> tuple[str, ...]:
    items = p.array(value, path)
    out = tuple(_id(v, p.at(path, i)) for i, v in enumerate(items))
    if len(set(out)) != len(out):
        raise p.fail(path, "duplicate id")
    return tuple(sorted(out))


def _records(
    value: Any, path: p.Path, read: Callable[[Any, p.Path], dict[str, Any]], key: str
) -> tuple[dict[str, Any], ...]:
    """An array of objects read by ``read``, unique and sorted by ``key``."""
    items = p.array(value, path)
    if len(items) > _MAX_ITEMS:
        raise p.fail(path, f"more than {_MAX_ITEMS} entries")
    out = [read(v, p.at(path, i)) for i, v in enumerate(items)]
    seen: set[Any] = set()
    for i, rec in enumerate(out):
        k = rec[key] if key != "*" else tuple(sorted((a, str(b)) for a, b in rec.items()))
        if k in seen:
            raise p.fail(p.at(path, i), f"duplicate entry {k!r}")
        seen.add(k)
    out.sort(key=lambda r: _sort_key(r, key))
    return tuple(out)


def _sort_key(rec: dict[str, Any], key: str) -> tuple[str, ...]:
    if key != "*":
        return (rec[key],)
    return tuple(f"{k}={rec[k]}" for k in sorted(rec))


def _profile(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("id",), optional=("pools", "description"))
    out: dict[str, Any] = {
        "id": _id(d["id"], p.at(path, "id")),
        "pools": list(_ids(d.get("pools", []), p.at(path, "pools"))),
    }
    if "description" in d:
        out["description"] = p.string(d["description"], p.at(path, "description"), min_len=0)
    return out


def _grant(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("profile",), optional=("project",))
    out: dict[str, Any] = {"profile": _id(d["profile"], p.at(path, "profile"))}
    if d.get("project") is not None:
        project = d["project"]
        out["project"] = "*" if project == "*" else _id(project, p.at(path, "project"))
    return out


def _pool(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("id", "status"), optional=("kind", "description"))
    out: dict[str, Any] = {
        "id": _id(d["id"], p.at(path, "id")),
        # any status is stored; only "active" admits a claim (unknown statuses refuse)
        "status": p.string(d["status"], p.at(path, "status"), max_len=64).lower(),
    }
    if "kind" in d:
        out["kind"] = p.choice(
            d["kind"], p.at(path, "kind"), ("local", "docker", "kubernetes"), what="pool kind"
        )
    if "description" in d:
        out["description"] = p.string(d["description"], p.at(path, "description"), min_len=0)
    return out


def _host(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("id", "pool"), optional=("status",))
    out: dict[str, Any] = {
        "id": _id(d["id"], p.at(path, "id")),
        "pool": _id(d["pool"], p.at(path, "pool")),
    }
    if "status" in d:
        out["status"] = p.string(d["status"], p.at(path, "status"), max_len=64).lower()
    return out


def _cell(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("pool", "runtime"), optional=("allowed",))
    return {
        "pool": _id(d["pool"], p.at(path, "pool")),
        "runtime": _id(d["runtime"], p.at(path, "runtime")),
        "allowed": p.boolean(d.get("allowed", True), p.at(path, "allowed")),
    }


def _arm(v: Any, path: p.Path) -> dict[str, Any]:
    d = p.obj(v, path, required=("arm", "alpha", "beta"))
    return {
        "arm": _id(d["arm"], p.at(path, "arm")),
        "alpha": p.integer(d["alpha"], p.at(path, "alpha"), lo=1, hi=2**53 - 1),
        "beta": p.integer(d["beta"], p.at(path, "beta"), lo=1, hi=2**53 - 1),
    }


def _authorization(v: Any, path: p.Path) -> dict[str, Any]:
    """``{"cedarPolicies": {id: text}, "cedarSchema": object | text | null, "defaultPermit":
    bool, "projects": [id]}``: policy ids are ids, texts non-empty strings kept verbatim."""
    d = p.obj(v, path, optional=("cedarPolicies", "cedarSchema", "defaultPermit", "projects"))
    ppath = p.at(path, "cedarPolicies")
    raw = d.get("cedarPolicies", {})
    if not isinstance(raw, Mapping):
        raise p.fail(ppath, "expected an object of policy id -> Cedar text")
    if len(raw) > _MAX_POLICIES:
        raise p.fail(ppath, f"more than {_MAX_POLICIES} policies")
    policies = {
        _id(k, ppath): p.string(t, p.at(ppath, k), max_len=_MAX_POLICY_TEXT, verbatim=True)
        for k, t in raw.items()
    }
    schema = d.get("cedarSchema")
    spath = p.at(path, "cedarSchema")
    if isinstance(schema, str):
        schema = p.string(schema, spath, max_len=_MAX_SCHEMA_TEXT, verbatim=True)
    elif schema is not None and not isinstance(schema, Mapping):
        raise p.fail(spath, "expected a Cedar schema: a JSON object, Cedar schema text or null")
    return {
        "cedarPolicies": {k: policies[k] for k in sorted(policies)},
        "cedarSchema": schema,
        "defaultPermit": p.boolean(d.get("defaultPermit", False), p.at(path, "defaultPermit")),
        "projects": list(_ids(d.get("projects", []), p.at(path, "projects"))),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class OrgData:
    """The org's live data, normalised: every list sorted by its stable key."""

    profiles: tuple[dict[str, Any], ...] = ()
    grants: tuple[dict[str, Any], ...] = ()
    pools: tuple[dict[str, Any], ...] = ()
    hosts: tuple[dict[str, Any], ...] = ()
    cells: tuple[dict[str, Any], ...] = ()
    arms: tuple[dict[str, Any], ...] = ()
    #: The authorization section (see :func:`_authorization`), ``None`` when not declared.
    authorization: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any, *, path: p.Path = "") -> OrgData:
        """Read an org document (every section optional).

        Raises:
            MalformedError: naming the offending field path.
        """
        d = p.obj(data, path, optional=(*_SECTIONS, AUTHORIZATION))
        cap = p.obj(
            d.get("capacityProfiles", {}),
            p.at(path, "capacityProfiles"),
            optional=("profiles", "grants"),
        )
        inv = p.obj(
            d.get("poolHostInventory", {}),
            p.at(path, "poolHostInventory"),
            optional=("pools", "hosts"),
        )
        cells = p.obj(
            d.get("executionCellMatrix", {}), p.at(path, "executionCellMatrix"), optional=("cells",)
        )
        post = p.obj(
            d.get("posteriorSummary", {}), p.at(path, "posteriorSummary"), optional=("arms",)
        )
        cp, ip = p.at(path, "capacityProfiles"), p.at(path, "poolHostInventory")
        return cls(
            profiles=_records(cap.get("profiles", []), p.at(cp, "profiles"), _profile, "id"),
            grants=_records(cap.get("grants", []), p.at(cp, "grants"), _grant, "*"),
            pools=_records(inv.get("pools", []), p.at(ip, "pools"), _pool, "id"),
            hosts=_records(inv.get("hosts", []), p.at(ip, "hosts"), _host, "id"),
            cells=_records(
                cells.get("cells", []),
                p.at(p.at(path, "executionCellMatrix"), "cells"),
                _cell,
                "*",
            ),
            arms=_records(
                post.get("arms", []), p.at(p.at(path, "posteriorSummary"), "arms"), _arm, "arm"
            ),
            authorization=(
                None
                if d.get(AUTHORIZATION) is None
                else _authorization(d[AUTHORIZATION], p.at(path, AUTHORIZATION))
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The normalised document (with ``authorization`` only when declared)."""
        out = self.sections()
        if self.authorization is not None:
            out[AUTHORIZATION] = self.authorization
        return out

    def sections(self) -> dict[str, Any]:
        """The four non-policy snapshot sections."""
        return {
            "capacityProfiles": {"profiles": list(self.profiles), "grants": list(self.grants)},
            "poolHostInventory": {"pools": list(self.pools), "hosts": list(self.hosts)},
            "executionCellMatrix": {"cells": list(self.cells)},
            "posteriorSummary": {"arms": list(self.arms)},
        }


def compile_sections(org: OrgData, policies: PolicySnapshot) -> dict[str, Any]:
    """The five snapshot sections: the policy bundle (``PolicySnapshot.to_dict`` with the
    policies sorted by id) and the org's four sections. The org's authorization section, when
    declared, travels inside the policy bundle as its ``authorization`` member (the snapshot
    keeps exactly five sections); ``PolicySnapshot.from_dict`` reads the bundle back once that
    member is set aside (:func:`policy_document`). An org without one compiles byte for byte
    as before."""
    bundle = policies.to_dict()
    bundle["policies"].sort(key=lambda pol: pol["id"])
    if org.authorization is not None:
        bundle[AUTHORIZATION] = org.authorization
    return {"policyBundle": bundle, **org.sections()}


def policy_document(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """The routing-policy document of a policy bundle (its ``authorization`` member set aside),
    for ``PolicySnapshot.from_dict``."""
    return {k: v for k, v in bundle.items() if k != AUTHORIZATION}


def authorization_of(sections: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The authorization member of a snapshot's policy bundle, ``None`` when absent (or when
    the bundle itself is missing or not an object)."""
    bundle = sections.get("policyBundle")
    if not isinstance(bundle, Mapping):
        return None
    found = bundle.get(AUTHORIZATION)
    return found if isinstance(found, Mapping) else None


#: The policy kind of every authorization section: its policies, schema and declared
#: default-permit are Cedar's, evaluated by an authorizer claiming ``cedar``.
CEDAR: Final = "cedar"
_POLICIES_SUFFIX: Final = "Policies"


def policy_kinds_of(sections: Mapping[str, Any]) -> tuple[str, ...]:
    """The policy kinds a snapshot's authorization section carries, sorted: none without a
    section; ``cedar`` for any section (even one with no policies: its ``defaultPermit`` is
    Cedar's fallback); and ``<kind>`` for every other ``<kind>Policies`` member (a section
    written by a newer compiler in another policy language), so that policy nobody here can
    evaluate is never skipped (every kind must be claimed by an authorizer, or it denies)."""
    section = authorization_of(sections)
    if section is None:
        return ()
    kinds = {CEDAR}
    for key in section:
        if isinstance(key, str) and key.endswith(_POLICIES_SUFFIX) and key != _POLICIES_SUFFIX:
            kinds.add(key[: -len(_POLICIES_SUFFIX)])
    return tuple(sorted(kinds))


# -- built-in validators ------------------------------------------------------------------------


def _grants_name_profiles(sections: Mapping[str, Any]) -> list[str]:
    cap = sections["capacityProfiles"]
    known = {prof["id"] for prof in cap["profiles"]}
    return [
        f"grant names unknown profile {g['profile']!r}"
        for g in cap["grants"]
        if g["profile"] not in known
    ]


def _profile_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"profile {prof['id']!r} names unknown pool {pool!r}"
        for prof in sections["capacityProfiles"]["profiles"]
        for pool in prof["pools"]
        if pool not in pools
    ]


def _host_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"host {h['id']!r} is in unknown pool {h['pool']!r}"
        for h in sections["poolHostInventory"]["hosts"]
        if h["pool"] not in pools
    ]


def _cell_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"execution cell ({c['pool']!r}, {c['runtime']!r}) is in unknown pool {c['pool']!r}"
        for c in sections["executionCellMatrix"]["cells"]
        if c["pool"] not in pools
    ]


#: The plugin name the built-in validators carry in their results.
BUILTIN: Final = "built-in"


def builtin_validators(
    policies: PolicySnapshot, *, policy_state: str, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> tuple[SnapshotValidator, ...]:
    """The built-in validators of a compile, run before any plugin's (the same
    :class:`SnapshotValidator` values and runner a plugin's validators use): the policy set
    validates (and its revision is not corrupt), every grant names an existing profile, every
    profile's pools, host's pool and execution cell's pool exist."""

    def policy_set_valid(sections: Mapping[str, Any]) -> list[str]:
        if policy_state == "corrupt":
            return ["the current policy revision is corrupt"]
        report = validate(policies.policies, vocabulary=vocabulary)
        more = [f"... and {report.omitted} more issue(s)"] if report.omitted else []
        return [f"{i.code} [{i.policy_id or '-'}]: {i.detail}" for i in report.issues] + more

    checks: tuple[tuple[str, Any], ...] = (
        ("policy-set-valid", policy_set_valid),
        ("grants-name-profiles", _grants_name_profiles),
        ("profile-pools-exist", _profile_pools_exist),
        ("host-pools-exist", _host_pools_exist),
        ("cell-pools-exist", _cell_pools_exist),
    )
    return tuple(SnapshotValidator(name=n, check=c, plugin=BUILTIN) for n, c in checks)
