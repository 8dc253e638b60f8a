"""A snapshot's policies indexed for the resolver: candidate lookup by bitmask (every
candidate, or as far as a compact trace's winners and their ties go), and the per-policy trace
built from it. Pure: no I/O, no clock; the index is a function of the immutable snapshot, kept
on it (``PolicySnapshot._compiled``) once built.

For each match dimension, a bitmask of the policies whose set is empty (matches anything) and
one per value. Bits are numbered in rank order ``(rung, -priority, id)``, so the lowest set bit
of the intersection is the winner, and the cost of a decision grows with the policies that
could match it, not with the snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Final

from .context import RouteContext
from .explanation import (
    COMPACT_RIVALS,
    MATCHED,
    OUTRANKED,
    POLICY_DISABLED,
    PRINCIPAL_NOT_IN_SET,
    REPO_CLASS_NOT_IN_SET,
    REPO_IDENTITY_NOT_CANONICAL,
    REPO_NOT_IN_SET,
    REQUEST_FACE_NOT_IN_SET,
    REQUIREMENT_NOT_IN_SET,
    ROLE_NOT_CANONICAL,
    ROLE_NOT_IN_SET,
    ConsideredPolicy,
)
from .ids import MEMO_LIMIT
from .policy import (
    PolicySnapshot,
    RoutingPolicy,
    policy_canonical,
    rank_key,
)

__all__ = [
    "ALL",
    "FIRST_LOOK",
    "WINNERS_ONLY",
    "Compiled",
    "TraceSource",
    "compile_index",
    "context_keys",
]

#: "No limit" for candidate lookups (more than any snapshot holds).
ALL: Final = 1 << 62

#: Candidates read first under a compact trace: the winners and their ties, then
#: ``COMPACT_RIVALS`` rivals (none: they are counted); more are read only when the ties fill
#: the first look.
FIRST_LOOK: Final = COMPACT_RIVALS + 4

#: A compact trace lists only the winners and their ties (no outranked rivals), which
#: :meth:`Compiled.best` reads directly; otherwise :meth:`Compiled.read` takes the general loop.
WINNERS_ONLY: Final = COMPACT_RIVALS == 0


def context_keys(ctx: RouteContext) -> tuple[Any, ...]:
    """The value a context presents on each match dimension (``None`` = nothing to join)."""
    repo = ctx.repo
    requirement = ctx.model_requirement
    return (
        repo.value if repo is not None and repo.canonical else None,
        ctx.repo_class,
        ctx.role,
        None if ctx.principal_id is None else ctx.principal_id.lower(),
        None if requirement is None else requirement.key,
        ctx.request_face,
    )


def _mismatch(policy: RoutingPolicy, ctx: RouteContext, keys: tuple[Any, ...]) -> str | None:
    """The first dimension on which ``policy`` fails ``ctx`` (SEMANTICS order), or ``None``."""
    if not policy.enabled:
        return POLICY_DISABLED
    m = policy.match
    repo, repo_class, role, principal, requirement, face = keys
    if m.repo_ids:
        if repo is None:
            return REPO_IDENTITY_NOT_CANONICAL
        if repo not in m.repo_ids:
            return REPO_NOT_IN_SET
    if m.repo_classes and repo_class not in m.repo_classes:
        return REPO_CLASS_NOT_IN_SET
    if m.roles:
        if role is None:
            return ROLE_NOT_CANONICAL
        if role not in m.roles:
            return ROLE_NOT_IN_SET
    if m.principal_ids and principal not in m.principal_ids:
        return PRINCIPAL_NOT_IN_SET
    if m.model_requirements and requirement not in m.match_keys():
        return REQUIREMENT_NOT_IN_SET
    if m.request_faces and face not in m.request_faces:
        return REQUEST_FACE_NOT_IN_SET
    return None


#: The values' masks of a dimension no member of a group constrains (never written).
_NO_VALUES: Final[dict[Any, int]] = {}


class _Group:
    """Policies sharing one repo id (or naming none), bit-indexed on the other five dimensions.

    Local bit ``i`` stands for global rank position ``members[i]``; members are in rank order,
    so local bit order is rank order too.
    """

    __slots__ = ("dims", "enabled", "levels", "lookup", "members", "wild")

    def __init__(
        self,
        members: Sequence[int],
        policies: Sequence[RoutingPolicy],
        levels: Sequence[tuple[int, int]],
    ) -> None:
        # What :func:`~.policy.dimension_index` gives over MATCH_DIMENSIONS[1:], written
        # out in one pass over the members: a large snapshot builds thousands of small groups
        # inside the batch that first reads it, and the general loop cost several times this.
        self.members = members = tuple(members)
        self.levels = tuple(map(levels.__getitem__, members))
        enabled = 0
        wild = [0, 0, 0, 0, 0]
        found: list[dict[Any, int] | None] = [None, None, None, None, None]
        bit = 1
        for pos in members:
            policy = policies[pos]
            if policy.enabled:
                enabled |= bit
            m = policy.match
            for d, values in enumerate(
                (
                    m.repo_classes,
                    m.roles,
                    m.principal_ids,
                    m.match_keys(),
                    m.request_faces,
                )
            ):
                if values:
                    table = found[d]
                    if table is None:
                        table = found[d] = {}
                    for value in values:
                        table[value] = table.get(value, 0) | bit
                else:
                    wild[d] |= bit
            bit <<= 1
        self.enabled = enabled
        # Tuples: a large snapshot builds thousands of groups, and the collector stops
        # tracking a tuple of plain values (its dicts hold only values and masks). A
        # dimension no member constrains shares one empty table.
        lookup = tuple(
            [
                _NO_VALUES if table is None else {v: mask | w for v, mask in table.items()}
                for table, w in zip(found, wild, strict=True)
            ]
        )
        self.wild, self.lookup = tuple(wild), lookup
        # The dimensions some member constrains, each as (its index in ``rest``, values'
        # masks, wild mask): on the others every member matches anything, so :meth:`best`
        # reads nothing of them (a large snapshot's repo groups constrain one or two).
        every = bit - 1
        self.dims = tuple([(d, lookup[d], wild[d]) for d in range(5) if wild[d] != every])

    def best(self, rest: tuple[Any, ...]) -> tuple[tuple[int, ...], int, Any]:
        """``(winners, count, level)``: the global positions of the best enabled members
        matching ``rest`` (every one tied at the best level), how many match in all, and that
        level (``None``: none match). :meth:`matched` read as far as the ties go, in one pass."""
        # :meth:`matched`'s intersection over the dimensions some member constrains only.
        mask = self.enabled
        for d, table, wild in self.dims:
            value = rest[d]
            mask &= wild if value is None else table.get(value, wild)
            if not mask:
                return (), 0, None
        if not mask:
            return (), 0, None
        members, levels = self.members, self.levels
        low = mask & -mask
        bit = low.bit_length() - 1
        level = levels[bit]
        rest_mask = mask ^ low
        if not rest_mask or levels[(rest_mask & -rest_mask).bit_length() - 1] != level:
            # The usual case: one winner (equal levels are adjacent in rank order).
            return (members[bit],), mask.bit_count(), level
        winners = [members[bit]]
        while rest_mask:
            low = rest_mask & -rest_mask
            bit = low.bit_length() - 1
            if levels[bit] != level:
                break
            winners.append(members[bit])
            rest_mask ^= low
        return tuple(winners), mask.bit_count(), level

    def matched(self, rest: tuple[Any, ...], limit: int) -> tuple[list[int], int]:
        """Global positions of the first ``limit`` (best) enabled members matching ``rest``
        (a context's keys on dimensions 2..6), and how many match in all."""
        # The five dimensions written out (the loop's indexing was a fifth of the lookup).
        wild, lookup = self.wild, self.lookup
        repo_class, role, principal, requirement, face = rest
        mask = self.enabled & (
            wild[0] if repo_class is None else lookup[0].get(repo_class, wild[0])
        )
        if mask:
            mask &= wild[1] if role is None else lookup[1].get(role, wild[1])
        if mask:
            mask &= wild[2] if principal is None else lookup[2].get(principal, wild[2])
        if mask:
            mask &= wild[3] if requirement is None else lookup[3].get(requirement, wild[3])
        if mask:
            mask &= wild[4] if face is None else lookup[4].get(face, wild[4])
        if not mask:
            return [], 0
        members = self.members
        out = []
        count = mask.bit_count()
        for _ in range(min(count, limit)):
            low = mask & -mask
            out.append(members[low.bit_length() - 1])
            mask ^= low
        return out, count


class Compiled:
    """A snapshot's policies in rank order, indexed for candidate lookup.

    Policies naming no repo form one group; the policies naming each repo id form another,
    built on first use. A context consults at most two small groups, so the cost of a
    decision follows the policies that could match it, not the size of the snapshot.
    """

    __slots__ = (
        "_considered",
        "_groups",
        "_shared",
        "by_repo",
        "calls",
        "kept",
        "levels",
        "open",
        "policies",
    )

    def __init__(self, snapshot: PolicySnapshot) -> None:
        # Each policy's rank key once (a snapshot's index is built inside the first batch
        # that reads it, so its cost is every decision's share).
        given = snapshot.policies
        keyed = sorted(zip(map(rank_key, given), range(len(given)), strict=True), key=itemgetter(0))
        ranked = [given[k] for _, k in keyed]
        keys = [key for key, _ in keyed]
        # Equal rank keys only happen with duplicate ids (an invalid set that still reached
        # us); order those by their bytes so the snapshot's own order never matters.
        i = 0
        while i < len(ranked):
            j = i + 1
            while j < len(ranked) and keys[j] == keys[i]:
                j += 1
            if j - i > 1:
                ranked[i:j] = sorted(ranked[i:j], key=policy_canonical)
            i = j
        self.policies: tuple[RoutingPolicy, ...] = tuple(ranked)
        self.levels: tuple[tuple[int, int], ...] = tuple([(key[0], -key[1]) for key in keys])
        self.by_repo: dict[str, list[int]] = {}
        open_members = []
        for pos, pol in enumerate(ranked):
            if not pol.match.repo_ids:
                open_members.append(pos)
            for repo in pol.match.repo_ids:
                self.by_repo.setdefault(repo, []).append(pos)
        self.open = _Group(open_members, self.policies, self.levels)
        self._groups: dict[str, _Group] = {}
        self._shared: dict[tuple[int, ...], _Group] = {}
        self._considered: dict[tuple[int, str], ConsideredPolicy] = {}
        #: The resolver's per-call state for single ``explain`` calls, kept across calls so
        #: their memos stay warm (the resolver owns the keys and the values).
        self.calls: dict[tuple[Any, ...], Any] = {}
        #: The last of them found, with the arguments that found it (the resolver's too).
        self.kept: tuple[Any, ...] | None = None

    def considered(self, pos: int, reason: str) -> ConsideredPolicy:
        """The (shared, immutable) trace entry for policy ``pos`` with ``reason``."""
        entry = self._considered.get((pos, reason))
        if entry is None:
            rung, priority = self.levels[pos]
            entry = ConsideredPolicy(
                policy_id=self.policies[pos].id,
                precedence_level=rung,
                priority=priority,
                matched=reason in (MATCHED, OUTRANKED),
                reason=reason,
            )
            self._considered[(pos, reason)] = entry
        return entry

    def candidates(
        self,
        keys: tuple[Any, ...],
        limit: int = ALL,
        memo: dict[tuple[Any, ...], tuple[Sequence[int], int]] | None = None,
    ) -> tuple[Sequence[int], int]:
        """Rank positions, best first, of the first ``limit`` enabled policies matching on
        every dimension, and how many match in all. ``memo`` (one per ``limit``) keeps the
        open group's answers by the five dimensions it is indexed on, which repeat across a
        batch far more than whole contexts do (the resolver keeps whole answers itself)."""
        return self.lookup(keys[0], keys[1:], limit, memo)

    def lookup(
        self,
        repo: str | None,
        rest: tuple[Any, ...],
        limit: int = ALL,
        memo: dict[tuple[Any, ...], tuple[Sequence[int], int]] | None = None,
    ) -> tuple[Sequence[int], int]:
        """:meth:`candidates` of the keys ``(repo, *rest)``, given in those two parts."""
        found: Sequence[int]
        if memo is None:
            found, count = self.open.matched(rest, limit)
        else:
            hit = memo.get(rest)
            if hit is None:
                if len(memo) >= MEMO_LIMIT:
                    memo.clear()
                opened, total = self.open.matched(rest, limit)
                hit = memo[rest] = (tuple(opened), total)
            found, count = hit
        if repo is not None:
            group = self._groups.get(repo)
            if group is None:
                members = self.by_repo.get(repo)
                if members is None:
                    return found, count
                group = self._groups[repo] = self._group(members)
            extra, more = group.matched(rest, limit)
            if extra:
                found = tuple(sorted([*found, *extra])[:limit]) if found else tuple(extra)
                count += more
        return found, count

    def _group(self, members: list[int]) -> _Group:
        """The group of the repo whose policies are ``members``: one per distinct list (the
        repos one policy names share their policies' group)."""
        key = tuple(members)
        group = self._shared.get(key)
        if group is None:
            group = self._shared[key] = _Group(key, self.policies, self.levels)
        return group

    def group_of(self, repo: str | None) -> _Group | None:
        """The group of the policies naming the canonical repo id ``repo``, or ``None`` when
        no policy names it (or there is none): its candidates are the open group's alone. Two
        repos have the same candidates for any other keys exactly when this is the same."""
        if repo is None:
            return None
        group = self._groups.get(repo)
        if group is None:
            members = self.by_repo.get(repo)
            if members is None:
                return None
            group = self._groups[repo] = self._group(members)
        return group

    def best(
        self,
        repo: str | None,
        rest: tuple[Any, ...],
        memo: dict[tuple[Any, ...], tuple[tuple[int, ...], int, Any]],
    ) -> tuple[tuple[int, ...], int]:
        """``(winners, count)``: the rank positions of the best enabled policies matching the
        keys ``(repo, *rest)`` (every one tied at the best level, in rank order) and how many
        match in all; what :meth:`lookup` gives read as far as the ties go. ``memo`` keeps the
        open group's by ``rest``, as :meth:`lookup`'s does."""
        return self.best_in(self.group_of(repo), rest, memo)

    def best_in(
        self,
        group: _Group | None,
        rest: tuple[Any, ...],
        memo: dict[tuple[Any, ...], tuple[tuple[int, ...], int, Any]],
    ) -> tuple[tuple[int, ...], int]:
        """:meth:`best` of a repo whose :meth:`group_of` is ``group``."""
        opened = memo.get(rest)
        if opened is None:
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            opened = memo[rest] = self.open.best(rest)
        winners, count, level = opened
        if group is None:
            return winners, count
        extra, more, extra_level = group.best(rest)
        if not more:
            return winners, count
        if not count:
            return extra, more
        if extra_level == level:
            # Tied across the two groups (equal rungs and priorities): in rank order.
            return tuple(sorted((*winners, *extra))), count + more
        # Positions are rank order: the lower first position holds the better level.
        return (extra if extra[0] < winners[0] else winners), count + more

    def read(
        self,
        repo: str | None,
        rest: tuple[Any, ...],
        full: bool,
        matches: dict[tuple[Any, ...], tuple[Sequence[int], int]],
        bests: dict[tuple[Any, ...], tuple[tuple[int, ...], int, Any]],
    ) -> tuple[Sequence[int], int, int, int]:
        """``(listed, winners, unlisted, beyond)`` of a trace for the keys ``(repo, *rest)``:
        the candidates it lists (every match under a full trace; under a compact one the
        winners, every tie, then ``COMPACT_RIVALS`` outranked), how many of them win, and,
        compact only, how many policies go unlisted and how many matches beyond the listed
        ones are counted. ``matches`` and ``bests``: the batch's
        memos of the open group's (see :meth:`lookup`, :meth:`best`)."""
        if WINNERS_ONLY and not full:
            # The compact trace's usual case: read as far as the ties go.
            winning, count = self.best(repo, rest, bests)
            return winning, len(winning), len(self.policies) - count, count - len(winning)
        levels = self.levels
        # The general loop: a compact trace reads only the first candidates (and counts the
        # rest) unless ties fill the first look; a full one reads them all.
        limit = first_look = ALL if full else FIRST_LOOK
        while True:
            matched, total = self.lookup(
                repo, rest, limit, matches if limit == first_look else None
            )
            winners = 0
            if matched:
                best = levels[matched[0]]
                for pos in matched:
                    if levels[pos] != best:
                        break
                    winners += 1
            if len(matched) == total or winners + COMPACT_RIVALS < len(matched):
                break
            limit = ALL
        if full:
            return matched, winners, 0, 0
        # Bounded: the winners (every tie), then the nearest COMPACT_RIVALS outranked.
        beyond = max(0, total - winners - COMPACT_RIVALS)
        return matched[: winners + COMPACT_RIVALS], winners, len(self.policies) - total, beyond


def compile_index(snapshot: PolicySnapshot) -> Compiled:
    compiled = snapshot._compiled
    if compiled is None:
        compiled = Compiled(snapshot)
        object.__setattr__(snapshot, "_compiled", compiled)
    assert isinstance(compiled, Compiled)
    return compiled


class TraceSource:
    """Builds the ``considered`` list of one call's explanations on first read."""

    __slots__ = ("compiled", "full")

    def __init__(self, compiled: Compiled, full: bool) -> None:
        self.compiled = compiled
        self.full = full

    def considered(
        self, context: RouteContext, keys: tuple[Any, ...], matched: tuple[int, ...], last: int
    ) -> tuple[ConsideredPolicy, ...]:
        compiled = self.compiled
        # Winners are the matched positions up to and including the last winner.
        if not self.full:
            return tuple(
                compiled.considered(pos, MATCHED if pos <= last else OUTRANKED) for pos in matched
            )
        if not keys:
            # A batch's decisions share their answers across repos and keep no keys: the
            # context's own, read now.
            keys = context_keys(context)
        found = set(matched)
        out = []
        for pos, policy in enumerate(compiled.policies):
            if pos in found:
                reason = MATCHED if pos <= last else OUTRANKED
            else:
                # The index said no: the first failing dimension says why.
                reason = _mismatch(policy, context, keys) or POLICY_DISABLED
            out.append(compiled.considered(pos, reason))
        return tuple(out)
