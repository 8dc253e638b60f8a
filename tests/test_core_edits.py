"""The pure pieces of a policy write (``core/routing/edits.py``): a repository's slice, the ids
a new set adds, removes and changes, the credential check's label, and the mutation record's
round trip and its line in ``audit tail``."""

from __future__ import annotations

from typing import Any

import pytest

from rensei_routing.core.routing.edits import (
    PolicyMutation,
    credential_label,
    diff_ids,
    in_slice,
)
from rensei_routing.core.routing.policy import RoutingPolicy
from rensei_routing.core.shadow.summary import RecordSummary, summarize


def pol(pid: str, **doc: Any) -> RoutingPolicy:
    return RoutingPolicy.from_dict({"id": pid, **doc})


@pytest.mark.parametrize(
    ("doc", "inside"),
    [
        ({"match": {"repo_ids": ["acme/a"]}}, True),
        ({"match": {"repo_ids": ["ACME/A"], "roles": ["implementer"]}}, True),
        ({"match": {"repo_ids": ["acme/a", "acme/b"]}}, False),
        ({"match": {"repo_ids": ["acme/b"]}}, False),
        ({"match": {"repo_ids": ["acme/a"], "repo_classes": ["client"]}}, False),
        ({"match": {"repo_ids": ["acme/a"]}, "system_safety": True}, False),
        ({"match": {"roles": ["implementer"]}}, False),
        ({}, False),
    ],
    ids=["repo", "repo-role", "two-repos", "other", "class", "safety", "role", "global"],
)
def test_the_slice_is_exactly_one_repository(doc: dict[str, Any], inside: bool) -> None:
    assert in_slice(pol("p", **doc), "acme/a") is inside


def test_ids_added_removed_and_changed() -> None:
    before = [pol("a"), pol("b"), pol("c", priority=1)]
    after = [pol("c", priority=2), pol("b"), pol("d")]
    diff = diff_ids(before, after)
    assert (diff.added, diff.removed, diff.changed) == (("d",), ("a",), ("c",))
    assert diff.brought_in() == {"c", "d"}
    assert diff_ids(after, after).brought_in() == frozenset()


def test_the_credential_label_never_the_text() -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    assert credential_label(pol("p", description=f"x {token}").to_dict()) == "github-token"
    assert credential_label(pol("p", description="plain words").to_dict()) is None
    # a marker already in the text is not a finding of its own
    assert credential_label({"d": "[REDACTED:github-token]"}) is None


def test_the_mutation_record_round_trips_and_reads_in_audit_tail() -> None:
    m = PolicyMutation(
        action="rollback",
        actor="alice",
        prior_revision=4,
        revision=5,
        content_hash="sha256:" + "0" * 64,
        added=("a",),
        removed=("b", "c"),
        changed=(),
        saved_at="2026-11-29T12:00:00.000000Z",
        rollback_to=2,
        scope="acme/a",
        expected_revision=4,
    )
    assert PolicyMutation.from_dict(m.to_dict()) == m
    assert summarize(m.to_dict()) == RecordSummary(
        "policy", "rollback@2:4->5", "+1/-2/~0", "by alice"
    )
