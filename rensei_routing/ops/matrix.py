"""The route matrix as a service: read the revisions a matrix or a blast radius compares (the
home's control store, or the console's read-only one), refuse what cannot be shown, and hand
the sets to the pure core (:mod:`rensei_routing.core.routing.matrix`).

Reads only: it never writes, prints or exits. A revision that never existed is the store's
``NotFoundError``; a corrupt revision is refused (``CorruptSnapshotError``) rather than shown as
a matrix of ``snapshot-unavailable`` cells; revision 0 is the empty set (no policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.routing.decision import STATE_CORRUPT
from ..core.routing.matrix import (
    MAX_CELLS,
    BlastRadius,
    Matrix,
    build_axes,
    diff_matrices,
    matrix_accounts,
    named_repos,
    resolve_matrix,
)
from ..core.routing.policy import PolicySnapshot
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import CorruptSnapshotError, NotFoundError
from ..store.policies import SnapshotLoad

__all__ = ["Loader", "MatrixRequest", "blast_radius", "compare", "load_set", "matrix_of"]

#: How the service reads a revision: ``load(None)`` the current one, ``load(n)`` revision n
#: (``ControlStore.load_policies``, ``PolicyStore.load``).
Loader = Callable[[int | None], SnapshotLoad]


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixRequest:
    """The axes asked for; an empty axis takes its default (docs/route-matrix.md)."""

    repo: str | None = None
    roles: tuple[str, ...] = ()
    faces: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    repo_classes: tuple[str, ...] = ()


def load_set(load: Loader, revision: int | None) -> PolicySnapshot:
    """Revision ``revision`` (``None``: the current one; 0: the empty set) as a snapshot.

    Raises:
        NotFoundError: the revision never existed.
        CorruptSnapshotError: the revision is stored but does not verify.
        StoreError: the store cannot be read.
    """
    if revision == 0:
        return PolicySnapshot.empty()
    loaded = load(revision)
    if loaded.state == STATE_CORRUPT:
        which = "the current revision" if revision is None else f"revision {revision}"
        raise CorruptSnapshotError(
            f"{which} is corrupt ({loaded.detail}): no matrix over a corrupt store"
        )
    return loaded.snapshot


def _matrices(
    before: PolicySnapshot,
    after: PolicySnapshot,
    request: MatrixRequest,
    repos: Sequence[str | None],
    vocabulary: Vocabulary,
    max_cells: int,
) -> tuple[Matrix, Matrix]:
    sets = (before, after)
    axes = build_axes(
        sets,
        repos=repos,
        roles=request.roles,
        faces=request.faces,
        requirements=request.requirements,
        repo_classes=request.repo_classes,
        vocabulary=vocabulary,
        max_cells=max_cells,
    )
    accounts = matrix_accounts(sets, vocabulary=vocabulary)
    return (
        resolve_matrix(before, axes=axes, accounts=accounts, vocabulary=vocabulary),
        resolve_matrix(after, axes=axes, accounts=accounts, vocabulary=vocabulary),
    )


def matrix_of(
    load: Loader,
    revision: int | None,
    request: MatrixRequest,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> Matrix:
    """The matrix of one revision (``None``: the current one).

    Raises:
        NotFoundError, CorruptSnapshotError, StoreError: as :func:`load_set`.
        MatrixAxisError, MatrixTooLargeError: as ``build_axes``.
    """
    snapshot = load_set(load, revision)
    return _matrices(snapshot, snapshot, request, (request.repo,), vocabulary, MAX_CELLS)[1]


def compare(
    before: PolicySnapshot,
    after: PolicySnapshot,
    request: MatrixRequest,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> tuple[Matrix, BlastRadius]:
    """The matrix of ``after`` and its blast radius against ``before``, both over the same
    axes and the same matrix host (the accounts both sets name).

    Raises:
        MatrixAxisError, MatrixTooLargeError: as ``build_axes``.
    """
    old, new = _matrices(before, after, request, (request.repo,), vocabulary, MAX_CELLS)
    return new, diff_matrices(old, new)


def blast_radius(
    load: Loader,
    before: int,
    after: int,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_cells: int = MAX_CELLS,
) -> BlastRadius:
    """What moving from revision ``before`` to ``after`` changes over the default axes, for no
    repository and for every repository either set names (what ``policy save`` reports).

    Raises:
        NotFoundError: either revision never existed.
        CorruptSnapshotError: either revision is corrupt.
        MatrixTooLargeError: the cells of every named repository pass ``max_cells``.
        StoreError: the store cannot be read.
    """
    if before < 0 or after < 0:
        raise NotFoundError(f"no policy revision {min(before, after)}")
    old, new = load_set(load, before), load_set(load, after)
    repos: list[str | None] = [None, *sorted(named_repos((old, new)))]
    first, second = _matrices(old, new, MatrixRequest(), repos, vocabulary, max_cells)
    return diff_matrices(first, second)
