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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .. import _parse as p
from ..canonical import canonical_bytes
from ..routing.policy import PolicySnapshot
from ..routing.validation import validate
from ..routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from . import org_rows as rows
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

_SECTIONS: Final = (
    "capacityProfiles",
    "poolHostInventory",
    "executionCellMatrix",
    "posteriorSummary",
)
#: The members of each section this module reads rows from (any other member is kept verbatim).
_ROWS: Final = {
    "capacityProfiles": ("profiles", "grants"),
    "poolHostInventory": ("pools", "hosts"),
    "executionCellMatrix": ("providers", "modelProfiles", "cells"),
    "posteriorSummary": ("posteriors", "arms"),
}
#: The optional org-document section compiled into the policy bundle (not a snapshot section).
AUTHORIZATION: Final = "authorization"
_MAX_POLICIES: Final = 100_000
_MAX_POLICY_TEXT: Final = 64 * 1024
_MAX_SCHEMA_TEXT: Final = 4 * 1024 * 1024
_id = rows.row_id


def _ids(value: Any, path: p.Path) -> tuple[str, ...]:
    return tuple(rows.ids(value, path))


def _by_id(rec: dict[str, Any]) -> Any:
    return rec["id"]


def _posterior_key(rec: dict[str, Any]) -> Any:
    return (rec["provider"], rec["workType"])


def _by_items(rec: dict[str, Any]) -> Any:
    return canonical_bytes(rec)


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


def _section(d: Mapping[str, Any], name: str, path: p.Path) -> dict[str, Any]:
    """The section ``name`` of an org document as an object (``{}`` when absent)."""
    value = d.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise p.fail(p.at(path, name), "expected an object")
    return dict(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class OrgData:
    """The org's live data in the daemon's shapes (``core.snapshot.org_rows``), normalised:
    every row list sorted by its stable key, old rows converted, unknown fields kept."""

    profiles: tuple[dict[str, Any], ...] = ()
    grants: tuple[dict[str, Any], ...] = ()
    pools: tuple[dict[str, Any], ...] = ()
    hosts: tuple[dict[str, Any], ...] = ()
    providers: tuple[dict[str, Any], ...] = ()
    model_profiles: tuple[dict[str, Any], ...] = ()
    #: Old execution cells (no daemon counterpart), kept as the matrix's ``cells`` member.
    cells: tuple[dict[str, Any], ...] = ()
    posteriors: tuple[dict[str, Any], ...] = ()
    #: Members of the four sections this module does not read, by section (kept verbatim).
    extras: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The authorization section (see :func:`_authorization`), ``None`` when not declared.
    authorization: dict[str, Any] | None = None

    @property
    def arms(self) -> tuple[dict[str, Any], ...]:
        """The posteriors (their old name)."""
        return self.posteriors

    @classmethod
    def from_dict(cls, data: Any, *, path: p.Path = "") -> OrgData:
        """Read an org document (every section optional), in the daemon's shapes or the old
        ones (converted).

        Raises:
            MalformedError: naming the offending field path.
        """
        if not isinstance(data, Mapping):
            raise p.fail(path, "expected an object")
        d = p.obj(data, path, optional=(*_SECTIONS, AUTHORIZATION))
        secs = {name: _section(d, name, path) for name in _SECTIONS}
        extras = {
            name: {k: v for k, v in secs[name].items() if k not in _ROWS[name]}
            for name in _SECTIONS
        }
        cp, ip = p.at(path, "capacityProfiles"), p.at(path, "poolHostInventory")
        mp, sp = p.at(path, "executionCellMatrix"), p.at(path, "posteriorSummary")
        cap, inv = secs["capacityProfiles"], secs["poolHostInventory"]
        matrix, post = secs["executionCellMatrix"], secs["posteriorSummary"]
        by_pair = _posterior_key
        posteriors = rows.records(
            [
                *rows.records(
                    post.get("posteriors") or [], p.at(sp, "posteriors"), rows.posterior, by_pair
                ),
                *rows.records(post.get("arms") or [], p.at(sp, "arms"), rows.posterior, by_pair),
            ],
            p.at(sp, "posteriors"),
            lambda rec, _path: dict(rec),
            by_pair,
        )
        return cls(
            profiles=rows.records(
                cap.get("profiles") or [], p.at(cp, "profiles"), rows.profile, _by_id
            ),
            grants=rows.records(cap.get("grants") or [], p.at(cp, "grants"), rows.grant, _by_id),
            pools=rows.records(inv.get("pools") or [], p.at(ip, "pools"), rows.pool, _by_id),
            hosts=rows.records(inv.get("hosts") or [], p.at(ip, "hosts"), rows.host, _by_id),
            providers=rows.records(
                matrix.get("providers") or [], p.at(mp, "providers"), rows.provider, _by_id
            ),
            model_profiles=rows.records(
                matrix.get("modelProfiles") or [],
                p.at(mp, "modelProfiles"),
                rows.model_profile,
                _by_items,
            ),
            cells=rows.records(matrix.get("cells") or [], p.at(mp, "cells"), rows.cell, _by_items),
            posteriors=posteriors,
            extras={k: v for k, v in extras.items() if v},
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
        """The four non-policy snapshot sections in the daemon's shapes (the matrix's old
        ``cells`` member only when there are some)."""
        matrix: dict[str, Any] = {
            "providers": list(self.providers),
            "modelProfiles": list(self.model_profiles),
        }
        if self.cells:
            matrix["cells"] = list(self.cells)
        out = {
            "capacityProfiles": {"profiles": list(self.profiles), "grants": list(self.grants)},
            "poolHostInventory": {"pools": list(self.pools), "hosts": list(self.hosts)},
            "executionCellMatrix": matrix,
            "posteriorSummary": {"posteriors": list(self.posteriors)},
        }
        for name, members in self.extras.items():
            out[name] = {**members, **out[name]}
        return out


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
        f"grant {g['id']!r} names unknown profile {g['profileId']!r}"
        for g in cap["grants"]
        if g["profileId"] not in known
    ]


def _profile_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"profile {prof['id']!r} names unknown pool {pool!r}"
        for prof in sections["capacityProfiles"]["profiles"]
        for pool in prof["poolIds"]
        if pool not in pools
    ]


def _host_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"host {h['id']!r} is in unknown pool {h['executionPoolId']!r}"
        for h in sections["poolHostInventory"]["hosts"]
        if h["executionPoolId"] not in pools
    ]


def _cell_pools_exist(sections: Mapping[str, Any]) -> list[str]:
    pools = {pool["id"] for pool in sections["poolHostInventory"]["pools"]}
    return [
        f"execution cell ({c['pool']!r}, {c['runtime']!r}) is in unknown pool {c['pool']!r}"
        for c in sections["executionCellMatrix"].get("cells", [])
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
