"""HydraFlow's policy store (``policies.json``) read as policies and written from them: its
document shape, its spelling of a policy, and its order-independent content hash (SEMANTICS.md,
"Reference wire formats"). Pure: the caller reads or writes the file and saves the result
through the normal validated save.

The document (indent 2, keys sorted, no trailing newline): ``{content_hash, policies, revision,
schema_version}``. Each policy is HydraFlow's model dumped with every field present (``id,
enabled, priority, system_safety, match, action``; no ``description``); a requirement mapping
is ``{"requirement": {"kind", "value"}, "effective_model": "..."}`` (our ``model``).
``content_hash`` = ``sha256:`` + hex SHA-256 of each policy's JSON text (its dump, every field,
keys sorted, compact separators, ``json.dumps``'s ASCII escapes), **sorted** and joined with
``"\\n"``: the same set in any order hashes alike. That is not our
:func:`~.policy.hash_policies` (RFC 8785 of the normalised policies), so the two hashes of one
set differ; both are reported. A file that does not parse, has a field of the wrong type or one
HydraFlow's model does not have, or whose hash does not match is ``corrupt`` and yields no
policy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...errors import InputError, PolicyStoreCorruptError
from .. import _parse as p
from ..canonical import SHA256_PREFIX
from .policy import RoutingPolicy
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "HF_POLICY_KEYS",
    "HydraflowPolicies",
    "hydraflow_content_hash",
    "hydraflow_dump",
    "hydraflow_policy",
    "read_hydraflow",
    "write_hydraflow",
]

HF_POLICY_KEYS: Final = ("content_hash", "policies", "revision", "schema_version")
HF_POLICY_SCHEMA: Final = 1
#: HydraFlow's ``RoutingPolicy``, ``RoutingMatch`` and ``RoutingAction`` fields, each with the
#: default its model dump writes when a file leaves it out.
_POLICY_DEFAULTS: Final[Mapping[str, Any]] = {
    "enabled": True,
    "priority": 0,
    "system_safety": False,
}
_MATCH_DEFAULTS: Final[Mapping[str, Any]] = {
    "repo_ids": [],
    "repo_classes": [],
    "roles": [],
    "principal_ids": [],
    "model_requirements": [],
    "request_faces": [],
}
_ACTION_DEFAULTS: Final[Mapping[str, Any]] = {
    "provider_lock": None,
    "account_pool": [],
    "requirement_map": [],
    "allowed_patterns": [],
    "forbid_direct_bypass": False,
    "selection": "ordered",
    "on_unavailable": "hold",
    "fallback_on": [],
}
_MAPPED: Final = "effective_model"


def hydraflow_content_hash(policies: Sequence[Any]) -> str:
    """HydraFlow's content hash of policy objects in its dump form (:func:`hydraflow_dump`)."""
    texts = sorted(
        json.dumps(pol, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        for pol in policies
    )
    return SHA256_PREFIX + hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def _filled(
    value: Any,
    path: p.Path,
    defaults: Mapping[str, Any],
    required: tuple[str, ...] = (),
    objects: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``value``'s fields (only ``required``, ``objects`` and those of ``defaults``), the
    absent ones of ``defaults`` at their defaults."""
    d = p.obj(value, path, required=required, optional=(*defaults, *objects))
    return {**defaults, **d}


def _requirement(value: Any, path: p.Path) -> dict[str, Any]:
    """HydraFlow's ``ModelRequirement``: an object of exactly ``kind`` and ``value``."""
    return dict(p.obj(value, path, required=("kind", "value")))


def hydraflow_dump(policy: Any, *, path: p.Path = "") -> dict[str, Any]:
    """A HydraFlow policy object as HydraFlow's model dumps it: every field, the absent ones at
    their defaults. What its content hash covers.

    Raises:
        MalformedError: a field HydraFlow's model does not have (``model`` where it spells
            ``effective_model``, our ``description``), a missing ``id``, a requirement that is
            not a ``{kind, value}`` object.
    """
    pol = _filled(policy, path, _POLICY_DEFAULTS, required=("id",), objects=("match", "action"))
    match = _filled(pol.get("match", {}), p.at(path, "match"), _MATCH_DEFAULTS)
    req_path = p.at(p.at(path, "match"), "model_requirements")
    match["model_requirements"] = [
        _requirement(r, p.at(req_path, i))
        for i, r in enumerate(p.array(match["model_requirements"], req_path))
    ]
    action = _filled(pol.get("action", {}), p.at(path, "action"), _ACTION_DEFAULTS)
    map_path = p.at(p.at(path, "action"), "requirement_map")
    mapping = []
    for i, item in enumerate(p.array(action["requirement_map"], map_path)):
        ipath = p.at(map_path, i)
        if isinstance(item, Mapping) and "model" in item and _MAPPED not in item:
            raise p.fail(
                p.at(ipath, "model"),
                f"HydraFlow spells the mapped model {_MAPPED} (a policy file in our own "
                "spelling is saved with rensei policy save)",
            )
        entry = p.obj(item, ipath, required=("requirement", _MAPPED))
        mapping.append(
            {
                "requirement": _requirement(entry["requirement"], p.at(ipath, "requirement")),
                _MAPPED: entry[_MAPPED],
            }
        )
    action["requirement_map"] = mapping
    return {**pol, "match": match, "action": action}


def _ours(dumped: Mapping[str, Any]) -> dict[str, Any]:
    """A dumped HydraFlow policy in our spelling (``model`` for ``effective_model``)."""
    action = dict(dumped["action"])
    action["requirement_map"] = [
        {"requirement": m["requirement"], "model": m[_MAPPED]} for m in action["requirement_map"]
    ]
    return {**dumped, "action": action}


def hydraflow_policy(policy: RoutingPolicy) -> dict[str, Any]:
    """One of our policies as HydraFlow's model dumps it: every HydraFlow field, requirements
    as ``{kind, value}``, ``effective_model``; ``description`` (which HydraFlow's model has
    not) left out."""
    ours = policy.to_dict()
    del ours["description"]
    action = ours["action"]
    action["requirement_map"] = [
        {"requirement": m["requirement"], _MAPPED: m["model"]} for m in action["requirement_map"]
    ]
    return ours


@dataclass(frozen=True, slots=True, kw_only=True)
class HydraflowPolicies:
    """A verified HydraFlow store: its policies (ours), its revision and content hash."""

    policies: tuple[RoutingPolicy, ...]
    revision: int
    content_hash: str


def _corrupt(source: str, why: str) -> PolicyStoreCorruptError:
    return PolicyStoreCorruptError(f"{source}: corrupt HydraFlow policy store: {why}")


def read_hydraflow(
    text: str, *, source: str = "policies.json", vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> HydraflowPolicies:
    """Read and check a HydraFlow ``policies.json``.

    Raises:
        PolicyStoreCorruptError: unparseable, a wrong type, an unknown ``schema_version``, a
            field HydraFlow's model does not have, a content hash mismatch, or a policy that
            cannot be one of ours (the field named).
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _corrupt(source, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or set(doc) != set(HF_POLICY_KEYS):
        raise _corrupt(source, f"expected an object with exactly {', '.join(HF_POLICY_KEYS)}")
    policies, content_hash = doc["policies"], doc["content_hash"]
    revision, schema = doc["revision"], doc["schema_version"]
    if not isinstance(policies, list) or not all(isinstance(x, dict) for x in policies):
        raise _corrupt(source, "policies is not an array of objects")
    if type(content_hash) is not str:
        raise _corrupt(source, "content_hash is not a string")
    if type(revision) is not int or revision < 0:
        raise _corrupt(source, "revision is not a non-negative integer")
    if schema != HF_POLICY_SCHEMA or type(schema) is not int:
        raise _corrupt(source, f"schema_version {schema!r} is not {HF_POLICY_SCHEMA}")
    try:
        dumped = [hydraflow_dump(pol, path=p.at("policies", i)) for i, pol in enumerate(policies)]
    except InputError as e:
        raise _corrupt(source, f"not a HydraFlow policy: {e}") from e
    actual = hydraflow_content_hash(dumped)
    if actual != content_hash:
        raise _corrupt(source, f"content_hash {content_hash} does not match its policies: {actual}")
    try:
        ours = tuple(
            RoutingPolicy.from_dict(_ours(pol), path=p.at("policies", i), vocabulary=vocabulary)
            for i, pol in enumerate(dumped)
        )
    except InputError as e:
        raise _corrupt(source, f"not a policy: {e}") from e
    return HydraflowPolicies(policies=ours, revision=revision, content_hash=content_hash)


def write_hydraflow(policies: Sequence[RoutingPolicy], *, revision: int) -> tuple[str, str]:
    """``(text, content hash)`` of the HydraFlow ``policies.json`` holding ``policies`` at
    ``revision``: what HydraFlow's store writes (indent 2, keys sorted, ASCII, no trailing
    newline), which :func:`read_hydraflow` and HydraFlow's loader accept."""
    dumped = [hydraflow_policy(pol) for pol in policies]
    content_hash = hydraflow_content_hash(dumped)
    doc = {
        "content_hash": content_hash,
        "policies": dumped,
        "revision": revision,
        "schema_version": HF_POLICY_SCHEMA,
    }
    return json.dumps(doc, indent=2, sort_keys=True), content_hash
