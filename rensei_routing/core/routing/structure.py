"""Every structural problem of a policy document, not only the first: what ``policy validate``
lists beside the validation issues of the policies that are well formed.

Pure: no I/O. The readers (``PolicySnapshot.from_dict`` and the ``from_dict`` below it) stop at
the first malformed field; here each policy is read on its own, and after each problem the field
holding it is taken out of a copy of that policy and the policy read again, so one run names
every malformed field of every policy (at most :data:`MAX_ISSUES_PER_POLICY` of one policy),
and of the document around them. A policy with any structural problem is left out of semantic
validation: what it means is not known.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import MalformedError
from .. import _parse as p
from .policy import MAX_REVISION, PolicySnapshot, RoutingPolicy, hash_policies
from .validation import MAX_ISSUES_PER_POLICY, ValidationIssue
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "CONTENT_HASH_MISMATCH",
    "MALFORMED_DOCUMENT",
    "MALFORMED_POLICY",
    "ReadDocument",
    "read_policy_document",
]

#: The document around the policies is malformed (not an object or array, an unknown or
#: missing field, a bad ``revision`` or ``content_hash``).
MALFORMED_DOCUMENT: Final = "malformed-document"
#: One policy is malformed (a field of the wrong type, unknown, missing or out of range).
MALFORMED_POLICY: Final = "malformed-policy"
#: The declared ``content_hash`` is not the policies' own.
CONTENT_HASH_MISMATCH: Final = "content-hash-mismatch"
_TOP_FIELDS: Final = ("policies", "revision", "content_hash")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadDocument:
    """What a policy document holds: the number of policy entries, the well-formed policies,
    and every structural problem (as validation issues, in document order). ``snapshot`` is
    the whole set when the document has no structural problem, else ``None``."""

    entries: int
    policies: tuple[RoutingPolicy, ...]
    issues: tuple[ValidationIssue, ...]
    snapshot: PolicySnapshot | None


def _issue(code: str, policy_id: str | None, error: MalformedError) -> ValidationIssue:
    return ValidationIssue(code=code, policy_id=policy_id, detail=str(error))


def _drop(doc: Any, keys: tuple[str | int, ...]) -> bool:
    """Take out of ``doc`` the deepest object field on the path ``keys`` that is present;
    whether one was (nothing is, for a missing required field at the top or a non-object)."""
    node, found = doc, None
    for key in keys:
        if isinstance(node, dict) and isinstance(key, str) and key in node:
            found = (node, key)
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            break
    if found is None:
        return False
    del found[0][found[1]]
    return True


def _policy_id(item: Any) -> str | None:
    if isinstance(item, Mapping) and isinstance(item.get("id"), str):
        return str(item["id"])
    return None


def _read_policy(
    item: Any, index: int, vocabulary: Vocabulary
) -> tuple[RoutingPolicy | None, list[ValidationIssue]]:
    """The policy at ``policies[index]``, or ``None`` and every structural problem it has."""
    where = p.at("policies", index)
    try:
        return RoutingPolicy.from_dict(item, path=where, vocabulary=vocabulary), []
    except MalformedError as e:
        first = e
    pid = _policy_id(item)
    issues = [_issue(MALFORMED_POLICY, pid, first)]
    work = copy.deepcopy(item) if isinstance(item, dict) else None
    error = first
    # each round takes one field out of the copy (or gives a policy without an id the empty
    # id, once, so its other fields are read), so the loop ends within its number of fields
    while work is not None and len(issues) < MAX_ISSUES_PER_POLICY:
        keys = error.keys[1:]  # keys[0] is ``index``
        if keys == ("id",) and "id" not in work:
            work["id"] = ""
        elif not _drop(work, keys):
            break
        try:
            RoutingPolicy.from_dict(work, path=where, vocabulary=vocabulary)
            break
        except MalformedError as e:
            error = e
            issues.append(_issue(MALFORMED_POLICY, pid, e))
    return None, issues


def read_policy_document(doc: Any, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> ReadDocument:
    """Read a policy document (an array of policies, or ``{"policies": [...]}`` with optional
    ``revision`` and ``content_hash``), collecting every structural problem instead of raising
    at the first; a declared ``content_hash`` that is not the policies' own is one more."""
    issues: list[ValidationIssue] = []
    if isinstance(doc, (list, tuple)):
        doc = {"policies": list(doc)}
    if not isinstance(doc, dict):
        error = p.fail(
            "", f"expected an object, got {'null' if doc is None else type(doc).__name__}"
        )
        return ReadDocument(
            entries=0, policies=(), issues=(_issue(MALFORMED_DOCUMENT, None, error),), snapshot=None
        )
    for key in doc:
        if key not in _TOP_FIELDS:
            issues.append(_issue(MALFORMED_DOCUMENT, None, p.fail(key, "unknown field")))
    revision = 0
    try:
        revision = p.integer(doc.get("revision", 0), "revision", lo=0, hi=MAX_REVISION)
    except MalformedError as e:
        issues.append(_issue(MALFORMED_DOCUMENT, None, e))
    declared = doc.get("content_hash")
    if declared is not None:
        try:
            declared = p.string(declared, "content_hash", max_len=128)
        except MalformedError as e:
            issues.append(_issue(MALFORMED_DOCUMENT, None, e))
            declared = None
    items: list[Any] = []
    if "policies" not in doc:
        issues.append(
            _issue(MALFORMED_DOCUMENT, None, p.fail("policies", "required field is missing"))
        )
    else:
        try:
            items = p.array(doc["policies"], "policies")
        except MalformedError as e:
            issues.append(_issue(MALFORMED_DOCUMENT, None, e))
    policies: list[RoutingPolicy] = []
    for index, item in enumerate(items):
        policy, found = _read_policy(item, index, vocabulary)
        issues.extend(found)
        if policy is not None:
            policies.append(policy)
    snapshot = None
    if not issues:
        actual = hash_policies(policies)
        if declared is not None and declared != actual:
            issues.append(
                ValidationIssue(
                    code=CONTENT_HASH_MISMATCH,
                    policy_id=None,
                    detail=f"declared content_hash {declared} does not match its policies "
                    f"({actual})",
                )
            )
        else:
            snapshot = PolicySnapshot(
                revision=revision, policies=tuple(policies), content_hash=actual
            )
    return ReadDocument(
        entries=len(items), policies=tuple(policies), issues=tuple(issues), snapshot=snapshot
    )
