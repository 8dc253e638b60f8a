"""What one policy write changes, decided without I/O: a repository's slice and a scoped edit
of it, the ids a new set adds, removes and changes, credential-shaped values in what an edit
brings in, the actor label, and the audited mutation record. Pure: the store runs these inside
its write transaction (so they see the revision they replace); nothing here reads or writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import CredentialValueError, InputError, OutOfScopeError
from ..redact import DEFAULT_REDACTOR, Redactor
from .members import canonicalize_repo
from .policy import RoutingPolicy, policy_canonical

__all__ = [
    "ACTION_ROLLBACK",
    "ACTION_SAVE",
    "MAX_ACTOR",
    "MUTATION_RECORD",
    "IdDiff",
    "PolicyEdit",
    "PolicyMutation",
    "check_actor",
    "credential_label",
    "diff_ids",
    "edited_set",
    "in_slice",
    "scope_repo",
]

#: ``record_type`` of a policy mutation's record on the audit chain.
MUTATION_RECORD: Final = "policy-mutation"
ACTION_SAVE: Final = "save"
ACTION_ROLLBACK: Final = "rollback"
#: The longest actor label accepted.
MAX_ACTOR: Final = 128
_MARKER: Final = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")
_ACTOR_TEXT: Final = re.compile(r"[^\x00-\x1f\x7f]+")


def scope_repo(value: str) -> str:
    """The canonical ``owner/name`` of a ``--scope-repo`` value.

    Raises:
        InputError: not exactly one canonical repository.
    """
    repo = canonicalize_repo(value)
    if repo is None:
        raise InputError(f"scope repository {value!r} is not a canonical owner/name")
    return repo


def in_slice(policy: RoutingPolicy, repo: str) -> bool:
    """Whether ``policy`` belongs to ``repo``'s slice: its match names exactly that one
    repository, no repository class, and it is not a system-safety policy."""
    m = policy.match
    return m.repo_ids == frozenset((repo,)) and not m.repo_classes and not policy.system_safety


@dataclass(frozen=True, slots=True, kw_only=True)
class IdDiff:
    """The policy ids a new set adds, removes and changes (content differs), each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def brought_in(self) -> frozenset[str]:
        """The ids whose policies the new set introduces (added or changed)."""
        return frozenset(self.added) | frozenset(self.changed)


def _by_id(policies: Iterable[RoutingPolicy]) -> dict[str, RoutingPolicy]:
    return {p.id: p for p in policies}


def diff_ids(before: Iterable[RoutingPolicy], after: Iterable[RoutingPolicy]) -> IdDiff:
    """What going from ``before`` to ``after`` adds, removes and changes, by policy id."""
    old, new = _by_id(before), _by_id(after)
    changed = (
        i for i in old.keys() & new.keys() if policy_canonical(old[i]) != policy_canonical(new[i])
    )
    return IdDiff(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(changed)),
    )


def edited_set(
    current: Iterable[RoutingPolicy], proposed: Iterable[RoutingPolicy], repo: str | None
) -> tuple[RoutingPolicy, ...]:
    """The set a write stores: ``proposed`` as it is (no scope), or, scoped to ``repo``,
    the current set with ``repo``'s slice replaced by ``proposed``'s. ``proposed`` may be the
    whole set or the slice alone: a slice policy it lacks is removed, a policy outside the
    slice is carried forward as it is whether ``proposed`` omits it or repeats it unchanged.

    Raises:
        OutOfScopeError: ``proposed`` adds a policy outside the slice, changes one, or moves
            a policy into or out of the slice (the first such id, in id order).
    """
    items = tuple(proposed)
    if repo is None:
        return items
    now = _by_id(current)
    kept: list[RoutingPolicy] = []
    for pol in sorted(items, key=lambda p: p.id):
        held = now.get(pol.id)
        if in_slice(pol, repo):
            if held is not None and not in_slice(held, repo):
                raise OutOfScopeError(pol.id, repo, "would move a policy into the slice")
            kept.append(pol)
            continue
        if held is None:
            raise OutOfScopeError(pol.id, repo, "would be added")
        if policy_canonical(held) != policy_canonical(pol):
            why = "would leave the slice" if in_slice(held, repo) else "would change"
            raise OutOfScopeError(pol.id, repo, why)
    outside = [p for p in now.values() if not in_slice(p, repo)]
    return (*outside, *kept)


def credential_label(value: Any, redactor: Redactor = DEFAULT_REDACTOR) -> str | None:
    """The label of the first redaction pattern that matches anywhere in ``value`` (a policy's
    document, an actor), ``None`` when none does. The matched text is never returned."""
    before = _markers(value)
    redacted = redactor.redact(value)
    if redacted is value:
        return None
    after = _markers(redacted)
    for label in after:
        if after.count(label) > before.count(label):
            return label
    return None


def _markers(value: Any) -> list[str]:
    out: list[str] = []
    if isinstance(value, str):
        out.extend(_MARKER.findall(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            out.extend(_markers(v))
    elif isinstance(value, (list, tuple)):
        for v in value:
            out.extend(_markers(v))
    return out


def check_credentials(
    policies: Iterable[RoutingPolicy], ids: frozenset[str], redactor: Redactor
) -> None:
    """Refuse the first (by id) of ``policies`` whose id is in ``ids`` that holds a
    credential-shaped value; the others are left alone (they never block an edit).

    Raises:
        CredentialValueError: naming the policy and the pattern's label.
    """
    for pol in sorted((p for p in policies if p.id in ids), key=lambda p: p.id):
        label = credential_label(pol.to_dict(), redactor)
        if label is not None:
            raise CredentialValueError(f"policy {pol.id!r}", label)


def check_actor(actor: str, redactor: Redactor = DEFAULT_REDACTOR) -> str:
    """``actor`` when it is a usable label: 1..128 printable characters, not credential-shaped.

    Raises:
        InputError: empty, too long or with control characters.
        CredentialValueError: it looks like a credential (the label is named, not the text).
    """
    if not actor or len(actor) > MAX_ACTOR or not _ACTOR_TEXT.fullmatch(actor):
        raise InputError(
            f"the actor must be 1..{MAX_ACTOR} printable characters (a name, never a credential)"
        )
    label = credential_label(actor, redactor)
    if label is not None:
        raise CredentialValueError("the actor", label)
    return actor


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyEdit:
    """One requested policy write: ``policies`` to save, or ``rollback_to`` a revision's set
    (0: no policy), checked against ``expected_revision`` when given, limited to
    ``scope``'s slice when given, by ``actor``; ``redactor`` holds the credential shapes."""

    actor: str
    policies: tuple[RoutingPolicy, ...] = ()
    rollback_to: int | None = None
    expected_revision: int | None = None
    scope: str | None = None
    redactor: Redactor = DEFAULT_REDACTOR

    @property
    def action(self) -> str:
        return ACTION_SAVE if self.rollback_to is None else ACTION_ROLLBACK

    def plan(
        self, current: tuple[RoutingPolicy, ...], target: tuple[RoutingPolicy, ...] | None
    ) -> tuple[tuple[RoutingPolicy, ...], IdDiff]:
        """The set to store and its diff from ``current``; ``target`` is the rollback
        target's set (scoped: only its slice is brought back; what lies outside the slice is
        the current set's). Everything it brings in is checked for credential shapes.

        Raises:
            OutOfScopeError, CredentialValueError: nothing is to be written.
        """
        proposed = self.policies
        if target is not None:  # a rollback brings back the target's slice (or all of it)
            scope = self.scope
            proposed = target if scope is None else tuple(p for p in target if in_slice(p, scope))
        new = edited_set(current, proposed, self.scope)
        diff = diff_ids(current, new)
        check_credentials(new, diff.brought_in(), self.redactor)
        return new, diff


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyMutation:
    """The audited record of one policy write, committed with its revision."""

    action: str
    actor: str
    prior_revision: int
    revision: int
    content_hash: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    saved_at: str
    rollback_to: int | None = None
    scope: str | None = None
    expected_revision: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record's payload (``record_type`` ``policy-mutation``)."""
        return {
            "record_type": MUTATION_RECORD,
            "schema_version": 1,
            "action": self.action,
            "actor": self.actor,
            "prior_revision": self.prior_revision,
            "revision": self.revision,
            "content_hash": self.content_hash,
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": list(self.changed),
            "saved_at": self.saved_at,
            "rollback_to": self.rollback_to,
            "scope_repo": self.scope,
            "expected_revision": self.expected_revision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PolicyMutation:
        """A stored payload back (the store wrote it: no validation beyond the types)."""
        return cls(
            action=str(d["action"]),
            actor=str(d["actor"]),
            prior_revision=int(d["prior_revision"]),
            revision=int(d["revision"]),
            content_hash=str(d["content_hash"]),
            added=tuple(str(i) for i in d["added"]),
            removed=tuple(str(i) for i in d["removed"]),
            changed=tuple(str(i) for i in d["changed"]),
            saved_at=str(d["saved_at"]),
            rollback_to=None if d.get("rollback_to") is None else int(d["rollback_to"]),
            scope=None if d.get("scope_repo") is None else str(d["scope_repo"]),
            expected_revision=(
                None if d.get("expected_revision") is None else int(d["expected_revision"])
            ),
        )
