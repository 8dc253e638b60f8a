"""The pure, total resolver: ``explain`` and ``explain_batch`` map contexts to decisions.

Pure: no I/O, no clock, no state beyond a memo of each snapshot's compiled index (a function of
the immutable snapshot). Total: for any context and snapshot built by ``from_dict``, every
outcome, including a corrupt snapshot and a tie between policies, is a typed decision with a
reason code, never an exception.

Candidate policies are found through a per-snapshot index: for each match dimension, a bitmask
of the policies whose set is empty (matches anything) and one per value. Bits are numbered in
rank order ``(rung, -priority, id)``, so the lowest set bit of the intersection is the winner,
and the cost of a decision grows with the policies that could match it, not with the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal

from .context import Account, ModelRequirement, RouteContext
from .decision import (
    ADMINISTRATIVE_DISABLED,
    ADMINISTRATIVE_DRAINING,
    CAPABILITY_UNMAPPED,
    COMPACT_RIVALS,
    HELD,
    LEGACY_RUNG,
    LITERAL_FAMILY_INCOMPATIBLE,
    LITERAL_FAMILY_UNSATISFIABLE,
    MATCHED,
    MATCHED_POLICY,
    MODEL_NOT_ALLOWED,
    NO_ELIGIBLE_ACCOUNT,
    NO_LEGACY_ROUTE,
    NO_POLICY_APPLIES,
    NOT_CONFIGURED,
    NOT_IN_POOL,
    OUTRANKED,
    POLICY_CONFLICT,
    POLICY_DISABLED,
    PRINCIPAL_NOT_IN_SET,
    PROVIDER_LOCK_MISMATCH,
    REJECTED,
    REPO_CLASS_NOT_IN_SET,
    REPO_IDENTITY_NOT_CANONICAL,
    REPO_NOT_IN_SET,
    REQUEST_FACE_NOT_IN_SET,
    REQUIREMENT_NOT_IN_SET,
    ROLE_NOT_CANONICAL,
    ROLE_NOT_IN_SET,
    SELECTED,
    SNAPSHOT_STATES,
    SNAPSHOT_UNAVAILABLE,
    SOURCE_LEGACY,
    SOURCE_MANAGED,
    SOURCE_NONE,
    STATE_CORRUPT,
    ConsideredPolicy,
    Explanation,
    RejectedAccount,
    RouteDecision,
)
from .ids import ScanMemo, decision_id
from .policy import (
    MATCH_DIMENSIONS,
    PolicySnapshot,
    RoutingPolicy,
    account_key,
    dimension_index,
    policy_canonical,
    rank_key,
)
from .redact import DEFAULT_REDACTOR, Redactor
from .vocabulary import CAPABILITY, CONCRETE_MODEL, DEFAULT_VOCABULARY, LITERAL_FAMILY, Vocabulary

__all__ = ["FULL_TRACE_LIMIT", "Trace", "decision_id", "explain", "explain_batch"]

Trace = Literal["auto", "full", "compact"]

#: Under ``trace="auto"``, snapshots with at most this many policies get a full per-policy trace.
FULL_TRACE_LIMIT: Final = 256

#: "No limit" for candidate lookups (more than any snapshot holds).
_ALL: Final = 1 << 62
#: Candidates read first under a compact trace: the winners and their ties, then
#: ``COMPACT_RIVALS`` rivals; more are read only when the ties fill the first look.
_FIRST_LOOK: Final = 32

_ADMIN_REASON: Final = {"disabled": ADMINISTRATIVE_DISABLED, "draining": ADMINISTRATIVE_DRAINING}


def _context_keys(ctx: RouteContext) -> tuple[Any, ...]:
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


class _Group:
    """Policies sharing one repo id (or naming none), bit-indexed on the other five dimensions.

    Local bit ``i`` stands for global rank position ``members[i]``; members are in rank order,
    so local bit order is rank order too.
    """

    __slots__ = ("enabled", "lookup", "members", "wild")

    def __init__(self, members: Sequence[int], policies: Sequence[RoutingPolicy]) -> None:
        self.members = tuple(members)
        self.enabled = 0
        group = [policies[pos] for pos in self.members]
        for bit, policy in enumerate(group):
            if policy.enabled:
                self.enabled |= 1 << bit
        self.wild, self.lookup = dimension_index(group, MATCH_DIMENSIONS[1:])

    def matched(self, keys: tuple[Any, ...], limit: int) -> tuple[list[int], int]:
        """Global positions of the first ``limit`` (best) enabled members matching ``keys`` on
        dimensions 2..6, and how many match in all."""
        mask = self.enabled
        wild, lookup = self.wild, self.lookup
        for dim in range(5):
            key = keys[dim + 1]
            mask &= wild[dim] if key is None else lookup[dim].get(key, wild[dim])
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


class _Compiled:
    """A snapshot's policies in rank order, indexed for candidate lookup.

    Policies naming no repo form one group; the policies naming each repo id form another,
    built on first use. A context consults at most two small groups, so the cost of a
    decision follows the policies that could match it, not the size of the snapshot.
    """

    __slots__ = ("_considered", "_groups", "by_repo", "levels", "open", "policies")

    def __init__(self, snapshot: PolicySnapshot) -> None:
        ranked = sorted(snapshot.policies, key=rank_key)
        # Equal rank keys only happen with duplicate ids (an invalid set that still reached
        # us); order those by their bytes so the snapshot's own order never matters.
        i = 0
        while i < len(ranked):
            j = i + 1
            while j < len(ranked) and rank_key(ranked[j]) == rank_key(ranked[i]):
                j += 1
            if j - i > 1:
                ranked[i:j] = sorted(ranked[i:j], key=policy_canonical)
            i = j
        self.policies: tuple[RoutingPolicy, ...] = tuple(ranked)
        self.levels: tuple[tuple[int, int], ...] = tuple(
            (rank_key(pol)[0], pol.priority) for pol in ranked
        )
        self.by_repo: dict[str, list[int]] = {}
        open_members = []
        for pos, pol in enumerate(ranked):
            if not pol.match.repo_ids:
                open_members.append(pos)
            for repo in pol.match.repo_ids:
                self.by_repo.setdefault(repo, []).append(pos)
        self.open = _Group(open_members, self.policies)
        self._groups: dict[str, _Group] = {}
        self._considered: dict[tuple[int, str], ConsideredPolicy] = {}

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

    def candidates(self, keys: tuple[Any, ...], limit: int = _ALL) -> tuple[list[int], int]:
        """Rank positions, best first, of the first ``limit`` enabled policies matching on
        every dimension, and how many match in all."""
        found, count = self.open.matched(keys, limit)
        repo = keys[0]
        if repo is not None:
            group = self._groups.get(repo)
            if group is None:
                members = self.by_repo.get(repo)
                if members is None:
                    return found, count
                group = self._groups[repo] = _Group(members, self.policies)
            extra, more = group.matched(keys, limit)
            if extra:
                found = sorted(found + extra)[:limit] if found else extra
                count += more
        return found, count


def _compiled(snapshot: PolicySnapshot) -> _Compiled:
    compiled = snapshot._compiled
    if compiled is None:
        compiled = _Compiled(snapshot)
        object.__setattr__(snapshot, "_compiled", compiled)
    assert isinstance(compiled, _Compiled)
    return compiled


class _Resolution:
    """The mutable scratch of one decision; turned into a frozen RouteDecision at the end."""

    __slots__ = (
        "account_id",
        "binding",
        "conflicting",
        "eligible",
        "level",
        "model",
        "outcome",
        "policy_id",
        "priority",
        "reason",
        "rejected",
        "source",
    )

    def __init__(self, outcome: str, reason: str, source: str) -> None:
        self.outcome = outcome
        self.reason = reason
        self.source = source
        self.policy_id: str | None = None
        self.level: int | None = None
        self.priority: int | None = None
        self.account_id: str | None = None
        self.binding: str | None = None
        self.model: str | None = None
        self.eligible: tuple[str, ...] = ()
        self.rejected: tuple[RejectedAccount, ...] = ()
        self.conflicting: tuple[str, ...] = ()


def _lane(
    requirement: ModelRequirement | None, mapped: str | None, vocabulary: Vocabulary
) -> frozenset[str] | None:
    """The provider bindings that alone may serve this decision, or ``None`` for any lane.

    SEMANTICS step 5, "The Anthropic lane is required when": a literal family always keeps its
    family's lane (an honest mapping stays on it; a dishonest one is rejected anyway). Otherwise
    an explicit mapping decides by the mapped model's provenance (a capability included), and
    without one a concrete id decides by its own. A bare alias (``opus``, ``sonnet``,
    ``haiku``) counts as the provenance it stands for, as a requirement and as a mapped model.
    """
    if requirement is None:
        return None
    if requirement.kind == LITERAL_FAMILY:
        family = vocabulary.literal_families.get(requirement.value.lower())
        return frozenset() if family is None else family.provenance.provider_bindings
    if mapped is not None:
        provenance = vocabulary.lane_provenance(mapped)
    elif requirement.kind == CONCRETE_MODEL:
        provenance = vocabulary.lane_provenance(requirement.value)
    else:
        return None
    return None if provenance is None else provenance.provider_bindings


class _Call:
    """What one ``explain`` / ``explain_batch`` call fixes for all its decisions, and a memo of
    the lanes it computed (keyed by requirement and mapped model; dropped with the call)."""

    __slots__ = ("full", "lanes", "memo", "redactor", "rejections", "state", "vocabulary")

    def __init__(self, state: str, vocabulary: Vocabulary, full: bool, redactor: Redactor) -> None:
        self.state = state
        self.vocabulary = vocabulary
        self.full = full
        self.redactor = redactor
        self.memo = ScanMemo(redactor)
        self.lanes: dict[tuple[str, str, str | None], frozenset[str] | None] = {}
        # Rejections repeat across a batch (few accounts, six reasons): one shared, immutable
        # value each, so a decision carries no objects of its own for them.
        self.rejections: dict[tuple[str, str], RejectedAccount] = {}

    def rejected(self, account_id: str, reason: str) -> RejectedAccount:
        key = (account_id, reason)
        entry = self.rejections.get(key)
        if entry is None:
            entry = self.rejections[key] = RejectedAccount(account_id=account_id, reason=reason)
        return entry

    def lane(
        self, requirement: ModelRequirement | None, mapped: str | None
    ) -> frozenset[str] | None:
        if requirement is None:
            return None
        key = (requirement.kind, requirement.value, mapped)
        try:
            return self.lanes[key]
        except KeyError:
            lane = self.lanes[key] = _lane(requirement, mapped, self.vocabulary)
            return lane


def _apply_policy(res: _Resolution, policy: RoutingPolicy, ctx: RouteContext, call: _Call) -> None:
    """Step 5 of SEMANTICS ``explain``: the model, then the accounts, for one winning policy.

    The accounts are judged even when the model step failed, so the explanation says whether
    any account could have served; the outcome and reason are then the model step's.
    """
    action = policy.action
    requirement = ctx.model_requirement
    model: str | None = None
    mapped: str | None = None
    failed: tuple[str, str] | None = None
    if requirement is not None:
        mapped = action.mapped_model(requirement.key)
        if mapped is not None:
            if requirement.kind == LITERAL_FAMILY and not call.vocabulary.satisfied_by(
                requirement.kind, requirement.value, mapped
            ):
                failed = (REJECTED, LITERAL_FAMILY_UNSATISFIABLE)
            elif not action.allows(mapped):
                failed = (REJECTED, MODEL_NOT_ALLOWED)
            else:
                model = mapped
        elif requirement.kind == CONCRETE_MODEL:
            if action.allows(requirement.value):
                model = requirement.value
            else:
                failed = (REJECTED, MODEL_NOT_ALLOWED)
        elif requirement.kind == CAPABILITY:
            failed = (HELD, CAPABILITY_UNMAPPED)
    lane = call.lane(requirement, mapped)
    pool = action.pool_order() if action.account_pool else None
    lock = action.provider_lock
    eligible: list[Account] = []
    shared = call.rejections
    rejected: list[RejectedAccount] = []
    for account in ctx.accounts:
        # Each entry on its own, in SEMANTICS order (inlined: this loop is the hot path).
        why: str | None
        if not account.configured:
            why = NOT_CONFIGURED
        else:
            why = _ADMIN_REASON.get(account.administrative_state)
            if why is not None:
                pass
            elif lock is not None and account.provider_binding != lock:
                why = PROVIDER_LOCK_MISMATCH
            elif pool is not None and account_key(account.account_id) not in pool:
                why = NOT_IN_POOL
            elif lane is not None and account.provider_binding not in lane:
                why = LITERAL_FAMILY_INCOMPATIBLE
        if why is None:
            eligible.append(account)
        else:
            entry = shared.get((account.account_id, why))
            rejected.append(call.rejected(account.account_id, why) if entry is None else entry)
    # Stable sorts: entries that share an id keep their context order.
    if len(eligible) > 1:
        if pool is not None:
            eligible.sort(key=lambda a: pool[account_key(a.account_id)])
        else:
            eligible.sort(key=lambda a: a.account_id)
    if len(rejected) > 1:
        rejected.sort(key=lambda r: r.account_id)
    res.eligible = tuple(a.account_id for a in eligible)
    res.rejected = tuple(rejected)
    if failed is not None:
        res.outcome, res.reason = failed
        return
    if not eligible:
        res.outcome = REJECTED if action.on_unavailable == "reject" else HELD
        lane_excluded = any(r.reason == LITERAL_FAMILY_INCOMPATIBLE for r in rejected)
        res.reason = LITERAL_FAMILY_UNSATISFIABLE if lane_excluded else NO_ELIGIBLE_ACCOUNT
        return
    # The chosen *entry*: with duplicate ids, its own binding, not another entry's.
    chosen = eligible[0]
    res.outcome, res.reason = SELECTED, MATCHED_POLICY
    res.account_id = chosen.account_id
    res.binding = chosen.provider_binding
    res.model = model


def _resolve(
    ctx: RouteContext, snapshot: PolicySnapshot, compiled: _Compiled, call: _Call
) -> RouteDecision:
    state, full_trace = call.state, call.full
    trace: Callable[[], tuple[ConsideredPolicy, ...]] | None = None
    unlisted = beyond = 0
    if state == STATE_CORRUPT:
        res = _Resolution(HELD, SNAPSHOT_UNAVAILABLE, SOURCE_NONE)
        winners: list[int] = []
    else:
        keys = _context_keys(ctx)
        policies = compiled.policies
        levels = compiled.levels
        # A compact trace reads only the first candidates (and counts the rest) unless ties
        # fill the first look; a full one reads them all.
        limit = _ALL if full_trace else _FIRST_LOOK
        while True:
            matched, total = compiled.candidates(keys, limit)
            winners = []
            for pos in matched:
                if winners and levels[pos] != levels[winners[0]]:
                    break
                winners.append(pos)
            if len(matched) == total or len(winners) + COMPACT_RIVALS < len(matched):
                break
            limit = _ALL
        if not full_trace:
            unlisted = len(policies) - total
            # Bounded: the winners (every tie), then the nearest COMPACT_RIVALS outranked.
            beyond = max(0, total - len(winners) - COMPACT_RIVALS)
            matched = matched[: len(winners) + COMPACT_RIVALS]
        trace = _Trace(
            compiled, ctx, keys, tuple(matched), winners[-1] if winners else -1, full_trace
        )
        if not winners:
            legacy = ctx.legacy_route
            if legacy is None:
                res = _Resolution(HELD, NO_LEGACY_ROUTE, SOURCE_NONE)
            else:
                res = _Resolution(SELECTED, NO_POLICY_APPLIES, SOURCE_LEGACY)
                res.level = LEGACY_RUNG
                res.account_id = legacy.account_id
                res.binding = legacy.provider_binding
                res.model = legacy.model
        else:
            res = _Resolution(SELECTED, MATCHED_POLICY, SOURCE_MANAGED)
            res.level, res.priority = levels[winners[0]]
            first = policies[winners[0]]
            if len(winners) > 1 and len({policies[pos].action.canonical() for pos in winners}) > 1:
                res.outcome, res.reason = REJECTED, POLICY_CONFLICT
                res.conflicting = tuple(sorted({policies[pos].id for pos in winners}))
            else:
                res.policy_id = first.id
                _apply_policy(res, first, ctx, call)
    did = decision_id(
        ctx,
        snapshot_hash=snapshot.content_hash,
        snapshot_state=state,
        policy_revision=snapshot.revision,
        outcome=res.outcome,
        reason=res.reason,
        policy_id=res.policy_id,
        account_id=res.account_id,
        effective_model=res.model,
        redactor=call.redactor,
        memo=call.memo,
    )
    return RouteDecision(
        decision_id=did,
        outcome=res.outcome,
        reason=res.reason,
        policy_source=res.source,
        policy_id=res.policy_id,
        policy_revision=snapshot.revision,
        snapshot_hash=snapshot.content_hash,
        snapshot_state=state,
        precedence_level=res.level,
        precedence_priority=res.priority,
        account_id=res.account_id,
        provider_binding=res.binding,
        effective_model=res.model,
        explanation=Explanation(
            context=ctx,
            considered=() if trace is None else None,
            trace=trace,
            eligible_account_ids=res.eligible,
            rejected_accounts=res.rejected,
            conflicting_policy_ids=res.conflicting,
            unlisted_policy_count=unlisted,
            unlisted_outranked_count=beyond,
        ),
    )


class _Trace:
    """What an explanation's ``considered`` list is built from, on first read."""

    __slots__ = ("compiled", "ctx", "full", "keys", "last_winner", "matched")

    def __init__(
        self,
        compiled: _Compiled,
        ctx: RouteContext,
        keys: tuple[Any, ...],
        matched: tuple[int, ...],
        last_winner: int,
        full: bool,
    ) -> None:
        self.compiled = compiled
        self.ctx = ctx
        self.keys = keys
        self.matched = matched
        self.last_winner = last_winner
        self.full = full

    def __call__(self) -> tuple[ConsideredPolicy, ...]:
        compiled, last = self.compiled, self.last_winner
        # Winners are the matched positions up to and including the last winner.
        if not self.full:
            return tuple(
                compiled.considered(pos, MATCHED if pos <= last else OUTRANKED)
                for pos in self.matched
            )
        matched = set(self.matched)
        out = []
        for pos, policy in enumerate(compiled.policies):
            if pos in matched:
                reason = MATCHED if pos <= last else OUTRANKED
            else:
                # The index said no: the first failing dimension says why.
                reason = _mismatch(policy, self.ctx, self.keys) or POLICY_DISABLED
            out.append(compiled.considered(pos, reason))
        return tuple(out)


def _check_state(snapshot_state: str) -> str:
    # Totality: an unknown state string is treated as the worst case, never as "ok".
    return snapshot_state if snapshot_state in SNAPSHOT_STATES else STATE_CORRUPT


def explain(
    context: RouteContext,
    snapshot: PolicySnapshot,
    *,
    snapshot_state: str = "ok",
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    trace: Trace = "auto",
    redactor: Redactor = DEFAULT_REDACTOR,
) -> RouteDecision:
    """Resolve one context against one snapshot. Never raises for values built by ``from_dict``.

    ``snapshot_state`` is the load state (``ok``, ``absent`` or ``corrupt``); a corrupt
    snapshot holds with ``snapshot-unavailable``, an absent one resolves normally. ``trace``
    picks the explanation's detail: ``full`` lists every policy with its reason, ``compact``
    lists the matched policies and counts the rest, ``auto`` is full up to
    ``FULL_TRACE_LIMIT`` policies. ``redactor`` is the one the host's audit log redacts
    records with: the decision id is computed over the redacted fields (see
    :mod:`rensei_routing.core.ids`), so it can be recomputed from a stored record and never
    depends on a redacted secret.
    """
    state = _check_state(snapshot_state)
    compiled = _compiled(snapshot)
    full = trace == "full" or (trace == "auto" and len(compiled.policies) <= FULL_TRACE_LIMIT)
    return _resolve(context, snapshot, compiled, _Call(state, vocabulary, full, redactor))


def explain_batch(
    contexts: Iterable[RouteContext],
    snapshot: PolicySnapshot,
    *,
    snapshot_state: str = "ok",
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    trace: Trace = "auto",
    redactor: Redactor = DEFAULT_REDACTOR,
) -> list[RouteDecision]:
    """Resolve many contexts against ONE snapshot: every row sees the same revision.

    Equal to ``[explain(c, snapshot, ...) for c in contexts]``; the snapshot is indexed once.
    """
    state = _check_state(snapshot_state)
    compiled = _compiled(snapshot)
    full = trace == "full" or (trace == "auto" and len(compiled.policies) <= FULL_TRACE_LIMIT)
    call = _Call(state, vocabulary, full, redactor)
    return [_resolve(ctx, snapshot, compiled, call) for ctx in contexts]
