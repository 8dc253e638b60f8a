"""The batch-resolution baseline: a straightforward linear-scan resolver, written here on purpose
(not the library's code), that tests every policy against every context and returns only the
winning policy id.

It does what a first implementation would: no index, no bitmasks; each policy's rank
``(rung, -priority, id)`` is computed once when the scanner is built (it is a property of the
policy, not of the context), and each context is tested against every policy, dimension by
dimension, keeping the best rank seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rensei_routing import RouteContext, RoutingPolicy, precedence_level

__all__ = ["LinearScan"]


class LinearScan:
    """Winner-only resolution by scanning every policy."""

    __slots__ = ("_policies",)

    def __init__(self, policies: Iterable[RoutingPolicy]) -> None:
        self._policies = [(pol, (precedence_level(pol), -pol.priority, pol.id)) for pol in policies]

    def winner(self, ctx: RouteContext) -> str | None:
        """The id of the best-ranked enabled policy matching ``ctx`` on all six dimensions."""
        repo = ctx.repo.value if ctx.repo is not None and ctx.repo.canonical else None
        principal = None if ctx.principal_id is None else ctx.principal_id.lower()
        requirement = None if ctx.model_requirement is None else ctx.model_requirement.key
        best: tuple[int, int, str] | None = None
        for pol, rank in self._policies:
            if not pol.enabled:
                continue
            m = pol.match
            if m.repo_ids and repo not in m.repo_ids:
                continue
            if m.repo_classes and ctx.repo_class not in m.repo_classes:
                continue
            if m.roles and ctx.role not in m.roles:
                continue
            if m.principal_ids and principal not in m.principal_ids:
                continue
            if m.model_requirements and requirement not in m.match_keys():
                continue
            if m.request_faces and ctx.request_face not in m.request_faces:
                continue
            if best is None or rank < best:
                best = rank
        return None if best is None else best[2]

    def winners(self, contexts: Sequence[RouteContext]) -> list[str | None]:
        """:meth:`winner` of each context, in order."""
        return [self.winner(ctx) for ctx in contexts]
