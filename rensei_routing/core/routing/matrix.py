"""The effective-route matrix and the blast radius: every repository x repo class x role x face x
requirement cell of one policy revision, resolved in ONE ``explain_batch``, and the cell-by-cell
difference between two matrices (what a save moves).

Pure: no I/O, no clock, no store. It builds the axes and the matrix's synthetic contexts from
policy snapshots and a vocabulary; which revisions to read (and refusing a corrupt one) is the
service's (:mod:`rensei_routing.ops.matrix`). docs/route-matrix.md states every rule here.

A matrix has no real spawn, so its contexts are fixed by rule (docs/route-matrix.md, "The
matrix host"): the principal is the role itself; the accounts are every account id the compared
sets name in a pool, each available on every provider binding of the vocabulary, plus one
account per binding named after it, all configured and active; and there is **no legacy
route**. A cell no policy claims therefore resolves ``held`` / ``no-legacy-route`` with policy
source ``none``, and only such a cell: the matrix shows it as ``unmanaged`` (legacy routing
decides it), never as a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...errors import MalformedError, MatrixAxisError, MatrixTooLargeError
from .context import RouteContext
from .decision import HELD, NO_LEGACY_ROUTE, REJECTED, SOURCE_NONE, RouteDecision
from .members import Account, ModelRequirement, RepoIdentity, canonicalize_repo
from .policy import PolicySnapshot, account_key
from .resolver import explain_batch
from .vocabulary import CAPABILITY, DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "CELL_COLUMNS",
    "DEFAULT_FACES",
    "MAX_CELLS",
    "UNCLASSIFIED",
    "UNMANAGED",
    "BlastRadius",
    "CellChange",
    "Matrix",
    "MatrixAxes",
    "MatrixCell",
    "build_axes",
    "diff_matrices",
    "matrix_accounts",
    "resolve_matrix",
]

#: The most cells one matrix (or one blast radius) resolves; past it the request is refused.
MAX_CELLS: Final = 5_000
#: A cell's columns, in the order every reader shows them (the CLI's header, the console's table).
CELL_COLUMNS: Final = (
    "repo",
    "repo_class",
    "role",
    "face",
    "requirement",
    "outcome",
    "reason",
    "provider",
    "account",
    "model",
    "policy",
    "rung",
)
#: A cell's outcome when no policy claims it (legacy routing decides it).
UNMANAGED: Final = "unmanaged"
#: The repo-class axis value of a spawn that states no repo class.
UNCLASSIFIED: Final = "unclassified"
#: The request faces a matrix shows by default (``unknown`` is what a spawn says when it
#: cannot tell; a face-matched policy never claims it).
DEFAULT_FACES: Final = ("agentic", "one-shot")


def _req_text(requirement: ModelRequirement) -> str:
    return f"{requirement.kind}:{requirement.value}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixAxes:
    """The axes of a matrix, each in display order. ``repos`` holds canonical ``owner/name``
    ids or ``None`` (no repository: what global and class policies do); ``repo_classes``
    holds class names or ``None`` (unclassified)."""

    repos: tuple[str | None, ...]
    repo_classes: tuple[str | None, ...]
    roles: tuple[str, ...]
    faces: tuple[str, ...]
    requirements: tuple[ModelRequirement, ...]

    @property
    def size(self) -> int:
        """The number of cells (the product of the axes' lengths)."""
        n = 1
        for axis in (self.repos, self.repo_classes, self.roles, self.faces, self.requirements):
            n *= len(axis)
        return n

    def keys(self) -> list[tuple[str | None, str | None, str, str, ModelRequirement]]:
        """Every cell's key, in display order."""
        return [
            (repo, cls, role, face, req)
            for repo in self.repos
            for cls in self.repo_classes
            for role in self.roles
            for face in self.faces
            for req in self.requirements
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "repos": list(self.repos),
            "repo_classes": [UNCLASSIFIED if c is None else c for c in self.repo_classes],
            "roles": list(self.roles),
            "request_faces": list(self.faces),
            "model_requirements": [r.to_dict() for r in self.requirements],
        }


def named_requirements(snapshots: Iterable[PolicySnapshot]) -> set[ModelRequirement]:
    """Every requirement a policy of ``snapshots`` matches on or maps (normalised)."""
    out: set[ModelRequirement] = set()
    for snapshot in snapshots:
        for policy in snapshot.policies:
            out.update(policy.match.model_requirements)
            out.update(m.requirement for m in policy.action.requirement_map)
    return {ModelRequirement(kind=r.kind, value=r.value.lower()) for r in out}


def named_repos(snapshots: Iterable[PolicySnapshot]) -> set[str]:
    """Every canonical repository id a policy of ``snapshots`` matches on."""
    return {
        repo
        for snapshot in snapshots
        for policy in snapshot.policies
        for repo in policy.match.repo_ids
        if canonicalize_repo(repo) == repo
    }


def build_axes(
    snapshots: Sequence[PolicySnapshot],
    *,
    repos: Sequence[str | None] = (None,),
    roles: Sequence[str] = (),
    faces: Sequence[str] = (),
    requirements: Sequence[str] = (),
    repo_classes: Sequence[str] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_cells: int = MAX_CELLS,
) -> MatrixAxes:
    """The axes over ``snapshots`` (the sets a matrix or a diff compares): each given axis as
    given (deduplicated, in order), each empty one its default (docs/route-matrix.md):
    every worker role of the vocabulary; ``agentic`` and ``one-shot``; the requirements the
    sets name plus the vocabulary's first capability class (provider-neutral); every repo
    class of the vocabulary plus unclassified.

    Raises:
        MatrixAxisError: a repository id that is not ``owner/name``, or a role, face,
            requirement or repo class the vocabulary does not know.
        MatrixTooLargeError: the axes hold more than ``max_cells`` cells.
    """
    repo_axis: list[str | None] = []
    for repo in repos:
        canon = None if repo is None else canonicalize_repo(repo)
        if repo is not None and canon is None:
            raise MatrixAxisError(f"repository {repo!r} is not a canonical owner/name id")
        if canon not in repo_axis:
            repo_axis.append(canon)
    role_axis = _named(roles, vocabulary.roles, "role", lower=True) or sorted(vocabulary.roles)
    face_axis = _named(faces, vocabulary.request_faces, "request face", lower=False) or [
        f for f in DEFAULT_FACES if f in vocabulary.request_faces
    ]
    class_axis: list[str | None] = []
    for name in repo_classes:
        value = None if name == UNCLASSIFIED else name
        if value is not None and value not in vocabulary.repo_classes:
            raise MatrixAxisError(f"unknown repo class {name!r} (known: {_known(vocabulary)})")
        if value not in class_axis:
            class_axis.append(value)
    if not class_axis:
        class_axis = [*sorted(vocabulary.repo_classes), None]
    req_axis: list[ModelRequirement] = []
    for text in requirements:
        req = _requirement(text, vocabulary)
        if req not in req_axis:
            req_axis.append(req)
    if not req_axis:
        named = named_requirements(snapshots)
        if vocabulary.capability_classes:
            named.add(ModelRequirement(kind=CAPABILITY, value=min(vocabulary.capability_classes)))
        req_axis = sorted(named, key=lambda r: r.key)
    axes = MatrixAxes(
        repos=tuple(repo_axis),
        repo_classes=tuple(class_axis),
        roles=tuple(role_axis),
        faces=tuple(face_axis),
        requirements=tuple(req_axis),
    )
    if axes.size > max_cells:
        raise MatrixTooLargeError(
            f"the matrix would hold {axes.size} cells, more than the bound of {max_cells}: "
            "narrow it with --repo, --repo-class, --role, --face or --requirement"
        )
    return axes


def _known(vocabulary: Vocabulary) -> str:
    return ", ".join([*sorted(vocabulary.repo_classes), UNCLASSIFIED])


def _named(values: Sequence[str], known: frozenset[str], what: str, *, lower: bool) -> list[str]:
    out: list[str] = []
    for raw in values:
        value = raw.strip().lower() if lower else raw
        if value not in known:
            raise MatrixAxisError(f"unknown {what} {raw!r} (known: {', '.join(sorted(known))})")
        if value not in out:
            out.append(value)
    return out


def _requirement(text: str, vocabulary: Vocabulary) -> ModelRequirement:
    """``KIND:VALUE`` or a bare name (a literal family or capability class of the vocabulary;
    any other bare name is refused, so a misspelt class is never read as a concrete model)."""
    kind, sep, value = text.partition(":")
    try:
        if sep and kind in ("literal_family", "capability", "concrete_model"):
            req = ModelRequirement.from_dict({"kind": kind, "value": value}, vocabulary=vocabulary)
        else:
            req = ModelRequirement.from_dict(text, vocabulary=vocabulary)
            if req.kind == "concrete_model":
                raise MatrixAxisError(
                    f"unknown requirement {text!r}: not a literal family or capability class "
                    "(name a concrete model as concrete_model:ID)"
                )
    except MalformedError as e:
        raise MatrixAxisError(f"unknown requirement {text!r}: {e}") from e
    return ModelRequirement(kind=req.kind, value=req.value.lower())


def matrix_accounts(
    snapshots: Iterable[PolicySnapshot], *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> tuple[Account, ...]:
    """The matrix host's accounts: every account id the sets name in a pool (one spelling per
    pool key, the smallest), on every provider binding, and one account per binding named
    after it on its own binding; configured and active; sorted."""
    spelled: dict[str, str] = {}
    for snapshot in snapshots:
        for policy in snapshot.policies:
            for account in policy.action.account_pool:
                key = account_key(account)
                if key and (key not in spelled or account < spelled[key]):
                    spelled[key] = account
    bindings = sorted(vocabulary.provider_bindings)
    entries = {(a, b) for a in spelled.values() for b in bindings}
    entries.update((b, b) for b in bindings)
    return tuple(Account(account_id=a, provider_binding=b) for a, b in sorted(entries))


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixCell:
    """One cell: its axes' values and what the revision does there. ``outcome`` is the
    decision's (``selected``, ``held``, ``rejected``) or ``unmanaged``."""

    repo: str | None
    repo_class: str | None
    role: str
    face: str
    requirement: ModelRequirement
    outcome: str
    reason: str
    provider: str | None
    account: str | None
    model: str | None
    policy_id: str | None
    rung: int | None
    context: RouteContext

    @property
    def key(self) -> tuple[str | None, str | None, str, str, tuple[str, str]]:
        return (self.repo, self.repo_class, self.role, self.face, self.requirement.key)

    def route(self) -> tuple[Any, ...]:
        """What a diff compares: everything but the axes and the context."""
        return (
            self.outcome,
            self.reason,
            self.provider,
            self.account,
            self.model,
            self.policy_id,
            self.rung,
        )

    def label(self) -> str:
        """``repo class role face kind:value`` (``-`` for no repo)."""
        cls = UNCLASSIFIED if self.repo_class is None else self.repo_class
        return f"{self.repo or '-'} {cls} {self.role} {self.face} {_req_text(self.requirement)}"

    def summary(self) -> str:
        """``outcome reason provider/account model policy@rung`` in one short text."""
        if self.outcome == UNMANAGED:
            return UNMANAGED
        route = f"{self.provider or '-'}/{self.account or '-'} {self.model or '-'}"
        return f"{self.outcome} {self.reason} {route} {self.policy_id or '-'}@{self.rung or '-'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "repo_class": UNCLASSIFIED if self.repo_class is None else self.repo_class,
            "role": self.role,
            "request_face": self.face,
            "model_requirement": self.requirement.to_dict(),
            "outcome": self.outcome,
            "reason": self.reason,
            "provider_binding": self.provider,
            "account_id": self.account,
            "effective_model": self.model,
            "policy_id": self.policy_id,
            "rung": self.rung,
        }


def cell_of(
    key: tuple[str | None, str | None, str, str, ModelRequirement],
    context: RouteContext,
    decision: RouteDecision,
) -> MatrixCell:
    """The cell of one decision: ``unmanaged`` exactly when no policy claimed it."""
    repo, cls, role, face, req = key
    unmanaged = decision.policy_source == SOURCE_NONE and decision.reason == NO_LEGACY_ROUTE
    return MatrixCell(
        repo=repo,
        repo_class=cls,
        role=role,
        face=face,
        requirement=req,
        outcome=UNMANAGED if unmanaged else decision.outcome,
        reason=decision.reason,
        provider=decision.provider_binding,
        account=decision.account_id,
        model=decision.effective_model,
        policy_id=decision.policy_id,
        rung=decision.precedence_level,
        context=context,
    )


def cell_context(
    key: tuple[str | None, str | None, str, str, ModelRequirement], accounts: tuple[Account, ...]
) -> RouteContext:
    """The matrix host's context for one cell (no legacy route, the principal is the role)."""
    repo, cls, role, face, req = key
    return RouteContext(
        repo=None if repo is None else RepoIdentity.from_canonical(repo),
        repo_class=cls,
        principal_id=role,
        role=role,
        model_requirement=req,
        request_face=face,
        legacy_route=None,
        accounts=accounts,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Matrix:
    """Every cell of one policy set over ``axes``, in the axes' order."""

    revision: int
    content_hash: str
    axes: MatrixAxes
    accounts: tuple[Account, ...]
    cells: tuple[MatrixCell, ...]

    def counts(self) -> dict[str, int]:
        """Cells per outcome (every outcome listed, ``unmanaged`` included)."""
        out = {o: 0 for o in ("selected", HELD, REJECTED, UNMANAGED)}
        for cell in self.cells:
            out[cell.outcome] = out.get(cell.outcome, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "content_hash": self.content_hash,
            "axes": self.axes.to_dict(),
            "accounts": [a.to_dict() for a in self.accounts],
            "counts": self.counts(),
            "cells": [c.to_dict() for c in self.cells],
        }


def resolve_matrix(
    snapshot: PolicySnapshot,
    *,
    axes: MatrixAxes,
    accounts: tuple[Account, ...],
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> Matrix:
    """Every cell of ``axes`` against ``snapshot``, resolved in one ``explain_batch`` (every
    cell sees the same revision). The snapshot is read as ``ok`` (the service refuses a corrupt
    one before it gets here)."""
    keys = axes.keys()
    contexts = [cell_context(k, accounts) for k in keys]
    decisions = explain_batch(contexts, snapshot, vocabulary=vocabulary, trace="compact")
    cells = tuple(cell_of(k, c, d) for k, c, d in zip(keys, contexts, decisions, strict=True))
    return Matrix(
        revision=snapshot.revision,
        content_hash=snapshot.content_hash,
        axes=axes,
        accounts=accounts,
        cells=cells,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CellChange:
    """One cell that moves: its route before and after."""

    before: MatrixCell
    after: MatrixCell

    @property
    def becomes(self) -> str | None:
        """``held``, ``rejected`` or ``unmanaged`` when the cell newly becomes that, else
        ``None`` (it moves but keeps its outcome, or becomes ``selected``)."""
        if self.after.outcome != self.before.outcome and self.after.outcome != "selected":
            return self.after.outcome
        return None

    def to_dict(self) -> dict[str, Any]:
        cell = self.after.to_dict()
        axes = {k: cell[k] for k in ("repo", "repo_class", "role", "request_face")}
        axes["model_requirement"] = cell["model_requirement"]
        drop = (*axes, "model_requirement")
        return {
            **axes,
            "before": {k: v for k, v in self.before.to_dict().items() if k not in drop},
            "after": {k: v for k, v in cell.items() if k not in drop},
            "becomes": self.becomes,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class BlastRadius:
    """The cell-by-cell difference of two matrices over the same axes and accounts."""

    before_revision: int
    after_revision: int
    cells: int
    changes: tuple[CellChange, ...]

    def __bool__(self) -> bool:
        """True when any cell moves."""
        return bool(self.changes)

    def becoming(self, outcome: str) -> int:
        """How many cells newly become ``outcome`` (``held``, ``rejected``, ``unmanaged``)."""
        return sum(1 for c in self.changes if c.becomes == outcome)

    def summary(self) -> str:
        """One line: ``blast radius rev A -> rev B: M of N cells move (H become held, R
        become rejected, U become unmanaged)``."""
        return (
            f"blast radius rev {self.before_revision} -> rev {self.after_revision}: "
            f"{len(self.changes)} of {self.cells} cells move ({self.becoming(HELD)} become "
            f"held, {self.becoming(REJECTED)} become rejected, {self.becoming(UNMANAGED)} "
            "become unmanaged)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "before_revision": self.before_revision,
            "after_revision": self.after_revision,
            "cells": self.cells,
            "moved": len(self.changes),
            "become_held": self.becoming(HELD),
            "become_rejected": self.becoming(REJECTED),
            "become_unmanaged": self.becoming(UNMANAGED),
            "changes": [c.to_dict() for c in self.changes],
        }


def diff_matrices(before: Matrix, after: Matrix) -> BlastRadius:
    """Every cell whose route differs between ``before`` and ``after`` (compared on outcome,
    reason, provider, account, effective model, policy id and rung), in the axes' order.

    Raises:
        ValueError: the two matrices do not share their axes and accounts (a programming
            error: build both over the same sets).
    """
    if before.axes != after.axes or before.accounts != after.accounts:
        raise ValueError("a blast radius compares two matrices over the same axes and accounts")
    changes = tuple(
        CellChange(before=b, after=a)
        for b, a in zip(before.cells, after.cells, strict=True)
        if b.route() != a.route()
    )
    return BlastRadius(
        before_revision=before.revision,
        after_revision=after.revision,
        cells=len(after.cells),
        changes=changes,
    )
