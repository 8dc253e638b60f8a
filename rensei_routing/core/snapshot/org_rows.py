"""The rows of an org's four non-policy sections in the Rensei daemon's shapes (SEMANTICS.md
"Reference wire formats"), and the conversion of the shapes this toolkit used before them.

Owns one reader per row kind. A reader checks the type of every field the daemon (or our host)
reads, keeps every other field verbatim (the daemon hashes the raw section bytes, so an unknown
field a newer platform added travels untouched), and converts an old row:

| old row | daemon row |
| --- | --- |
| profile ``{id, pools}`` | ``{id, poolIds}`` |
| grant ``{profile, project}`` | ``{id, profileId, projectId, isPrimary: false}`` |
| pool ``{id, status, kind}`` | ``{id, status, substrateClass}`` |
| host ``{id, pool, status}`` | ``{id, executionPoolId, status}`` |
| arm ``{arm, alpha, beta}`` | posterior ``{provider, workType: "default", alpha, beta}`` |

An old grant's project ``*`` (or none) becomes ``projectId: null`` (every project), its id
``<profile>.<project>`` (``.all``). Old execution cells (``{pool, runtime, allowed}``) have no
daemon counterpart and are kept as the matrix's extra ``cells`` member. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from .. import _parse as p

__all__ = [
    "DEFAULT_WORK_TYPE",
    "HOST_STATUSES",
    "cell",
    "grant",
    "host",
    "model_profile",
    "pool",
    "posterior",
    "profile",
    "provider",
    "records",
    "row_id",
]

_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_MAX_ITEMS: Final = 1_000_000
_MAX_INT: Final = 2**53 - 1
#: The work type an old posterior arm converts to.
DEFAULT_WORK_TYPE: Final = "default"
#: The host statuses the daemon knows; only ``ready`` places work (others are kept verbatim).
HOST_STATUSES: Final = ("ready", "draining", "unhealthy", "offline")

Reader = Callable[[Any, p.Path], dict[str, Any]]


def row_id(value: Any, path: p.Path) -> str:
    """An id: ``[A-Za-z0-9][A-Za-z0-9._:-]*``, at most 128 characters.

    Raises:
        MalformedError: anything else.
    """
    text = p.string(value, path, max_len=128, verbatim=True)
    if not _ID.match(text):
        raise p.fail(path, f"{text!r} is not an id ([A-Za-z0-9][A-Za-z0-9._:-]*, <= 128)")
    return text


def ids(value: Any, path: p.Path) -> list[str]:
    """A list of unique ids, sorted."""
    items = p.array(value, path)
    out = [row_id(v, p.at(path, i)) for i, v in enumerate(items)]
    if len(set(out)) != len(out):
        raise p.fail(path, "duplicate id")
    return sorted(out)


def _row(value: Any, path: p.Path) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise p.fail(path, "expected an object")
    for key in value:
        if not isinstance(key, str):
            raise p.fail(path, f"field names must be strings, got {key!r}")
    return dict(value)


def _renamed(out: dict[str, Any], old: str, new: str) -> bool:
    """Move an old row's ``old`` member to its name ``new`` (when the row has no ``new``)."""
    if old in out and new not in out:
        out[new] = out.pop(old)
        return True
    return False


def _required(out: dict[str, Any], path: p.Path, *names: str) -> None:
    """Refuse a row without each of ``names``, the first missing named."""
    for name in names:
        if name not in out:
            raise p.fail(p.at(path, name), "required field is missing")


def _opt(out: dict[str, Any], name: str, path: p.Path, check: Callable[[Any, p.Path], Any]) -> None:
    """Type-check ``out[name]`` when present (and not null), replacing it by the checked value."""
    if out.get(name) is not None:
        out[name] = check(out[name], p.at(path, name))


def _text(value: Any, path: p.Path) -> str:
    return p.string(value, path, max_len=4096, min_len=0, verbatim=True)


def _count(value: Any, path: p.Path) -> int:
    return p.integer(value, path, lo=0, hi=_MAX_INT)


def _number(value: Any, path: p.Path) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise p.fail(path, "expected a number")
    if not -1e15 < value < 1e15:
        raise p.fail(path, "number out of range")
    return value


def _texts(value: Any, path: p.Path) -> list[str]:
    return [_text(v, p.at(path, i)) for i, v in enumerate(p.array(value, path))]


def profile(value: Any, path: p.Path) -> dict[str, Any]:
    """A capacity profile: ``id``, ``poolIds`` (old ``pools``) and the daemon's optional
    fields ``name, orderingPolicy, preferenceVector, reservationPosture{mode,timeoutMs},
    burstPosture, disconnectLostAfterMs, disconnectReplace, disconnectReconcile, isOrgDefault,
    revision``."""
    out = _row(value, path)
    _renamed(out, "pools", "poolIds")
    _required(out, path, "id")
    out["id"] = row_id(out["id"], p.at(path, "id"))
    out["poolIds"] = ids(out.get("poolIds") or [], p.at(path, "poolIds"))
    for name in ("name", "orderingPolicy", "description"):
        _opt(out, name, path, _text)
    for name in ("disconnectReplace", "disconnectReconcile", "isOrgDefault"):
        _opt(out, name, path, p.boolean)
    for name in ("disconnectLostAfterMs", "revision"):
        _opt(out, name, path, _count)
    if out.get("reservationPosture") is not None:
        rpath = p.at(path, "reservationPosture")
        rp = _row(out["reservationPosture"], rpath)
        _opt(rp, "mode", rpath, _text)
        _opt(rp, "timeoutMs", rpath, _count)
        out["reservationPosture"] = rp
    return out


def grant(value: Any, path: p.Path) -> dict[str, Any]:
    """A grant: ``id``, ``profileId``, ``projectId`` (``null``: every project), ``isPrimary``;
    an old ``{profile, project}`` row gets the id ``<profile>.<project>`` (``.all`` for every
    project)."""
    out = _row(value, path)
    if "profile" in out and "profileId" not in out:
        project = out.pop("project", None)
        out["profileId"] = out.pop("profile")
        out["projectId"] = None if project in (None, "*") else project
        out.setdefault("isPrimary", False)
        if "id" not in out and isinstance(out["profileId"], str):
            suffix = "all" if out["projectId"] is None else str(out["projectId"])
            out["id"] = f"{out['profileId']}.{suffix}"
    _required(out, path, "profileId")
    out["profileId"] = row_id(out["profileId"], p.at(path, "profileId"))
    project = out.get("projectId")
    if project is not None and project != "*":
        out["projectId"] = row_id(project, p.at(path, "projectId"))
    if "id" not in out:
        out["id"] = f"{out['profileId']}.{'all' if project in (None, '*') else project}"
    out["id"] = row_id(out["id"], p.at(path, "id"))
    _opt(out, "isPrimary", path, p.boolean)
    return out


def pool(value: Any, path: p.Path) -> dict[str, Any]:
    """A pool: ``id``, ``status`` (lowercased; only ``active`` admits a claim) and the
    daemon's ``providerId, displayName, servesPersistent, servesOnDemand, costWeight,
    priority, substrateClass (old kind), allowedProjectIds``."""
    out = _row(value, path)
    _renamed(out, "kind", "substrateClass")
    _required(out, path, "id", "status")
    out["id"] = row_id(out["id"], p.at(path, "id"))
    out["status"] = p.string(out["status"], p.at(path, "status"), max_len=64).lower()
    for name in ("providerId", "displayName", "substrateClass", "description"):
        _opt(out, name, path, _text)
    for name in ("servesPersistent", "servesOnDemand"):
        _opt(out, name, path, p.boolean)
    _opt(out, "costWeight", path, _number)
    _opt(out, "priority", path, lambda v, q: p.integer(v, q, lo=-_MAX_INT, hi=_MAX_INT))
    _opt(out, "allowedProjectIds", path, ids)
    return out


def host(value: Any, path: p.Path) -> dict[str, Any]:
    """A host: ``id``, ``executionPoolId`` (old ``pool``), ``status`` (lowercased; one of
    :data:`HOST_STATUSES` by the daemon's word, any other kept and never placed on), ``os,
    arch, maxSessions, activeSessions, lastHeartbeatMs``."""
    out = _row(value, path)
    _renamed(out, "pool", "executionPoolId")
    for name in ("id", "executionPoolId"):
        _required(out, path, name)
        out[name] = row_id(out[name], p.at(path, name))
    _opt(out, "status", path, lambda v, q: p.string(v, q, max_len=64).lower())
    for name in ("os", "arch"):
        _opt(out, name, path, _text)
    for name in ("maxSessions", "activeSessions", "lastHeartbeatMs"):
        _opt(out, name, path, _count)
    return out


def provider(value: Any, path: p.Path) -> dict[str, Any]:
    """An execution provider: ``id``, ``displayName, configNamespace, supportedAuthModes,
    category`` and ``harnessByAuthMode`` (auth mode -> harness)."""
    out = _row(value, path)
    _required(out, path, "id")
    out["id"] = row_id(out["id"], p.at(path, "id"))
    for name in ("displayName", "configNamespace", "category"):
        _opt(out, name, path, _text)
    _opt(out, "supportedAuthModes", path, _texts)
    if out.get("harnessByAuthMode") is not None:
        hpath = p.at(path, "harnessByAuthMode")
        harness = _row(out["harnessByAuthMode"], hpath)
        out["harnessByAuthMode"] = {k: _text(v, p.at(hpath, k)) for k, v in sorted(harness.items())}
    return out


def model_profile(value: Any, path: p.Path) -> dict[str, Any]:
    """A model profile: an object kept verbatim (``id``, when present, must be a string)."""
    out = _row(value, path)
    _opt(out, "id", path, _text)
    return out


def cell(value: Any, path: p.Path) -> dict[str, Any]:
    """An old execution cell ``{pool, runtime, allowed}`` (kept as the matrix's ``cells``)."""
    d = p.obj(value, path, required=("pool", "runtime"), optional=("allowed",))
    return {
        "pool": row_id(d["pool"], p.at(path, "pool")),
        "runtime": row_id(d["runtime"], p.at(path, "runtime")),
        "allowed": p.boolean(d.get("allowed", True), p.at(path, "allowed")),
    }


def posterior(value: Any, path: p.Path) -> dict[str, Any]:
    """A posterior: ``provider``, ``workType``, ``alpha`` and ``beta`` (positive numbers),
    ``avgReward, totalObservations, lastUpdated``; an old ``{arm, alpha, beta}`` row becomes
    ``{provider: arm, workType: "default"}``."""
    out = _row(value, path)
    if _renamed(out, "arm", "provider"):
        out.setdefault("workType", DEFAULT_WORK_TYPE)
    _required(out, path, "provider", "workType", "alpha", "beta")
    out["provider"] = row_id(out["provider"], p.at(path, "provider"))
    out["workType"] = p.string(out["workType"], p.at(path, "workType"), max_len=128)
    for name in ("alpha", "beta"):
        number = _number(out[name], p.at(path, name))
        if not number > 0:
            raise p.fail(p.at(path, name), "expected a positive number")
        out[name] = number
    _opt(out, "avgReward", path, _number)
    _opt(out, "totalObservations", path, _count)
    if out.get("lastUpdated") is not None and not isinstance(out["lastUpdated"], str | int):
        raise p.fail(p.at(path, "lastUpdated"), "expected a timestamp string or epoch number")
    return out


def records(
    value: Any, path: p.Path, read: Reader, key: Callable[[dict[str, Any]], Any]
) -> tuple[dict[str, Any], ...]:
    """An array of rows read by ``read``, unique and sorted by ``key``.

    Raises:
        MalformedError: a bad row or a duplicate key.
    """
    items = p.array(value, path)
    if len(items) > _MAX_ITEMS:
        raise p.fail(path, f"more than {_MAX_ITEMS} entries")
    out = [read(v, p.at(path, i)) for i, v in enumerate(items)]
    seen: set[Any] = set()
    for i, rec in enumerate(out):
        k = key(rec)
        if k in seen:
            raise p.fail(p.at(path, i), f"duplicate entry {k!r}")
        seen.add(k)
    out.sort(key=lambda r: str(key(r)))
    return tuple(out)
