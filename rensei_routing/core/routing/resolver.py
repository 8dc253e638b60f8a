"""The pure, total resolver: ``explain`` and ``explain_batch`` map contexts to decisions.

Pure: no I/O, no clock, no state beyond a memo of each snapshot's compiled index (a function of
the immutable snapshot) and, kept on that index, the memos of single ``explain`` calls (bounded;
answers that are functions of their keys, so a decision is the same with them warm or cold).
Total: for any context and snapshot built by ``from_dict``, every outcome, including a corrupt
snapshot and a tie between policies, is a typed decision with a reason code, never an
exception.

Candidate policies are found through a per-snapshot bitmask index (:mod:`.index`), so the cost
of a decision grows with the policies that could match it, not with the snapshot. What repeats
across one call (whole answers by question, candidates, model steps, account judgements,
redaction checks) is kept in the call's bounded memos (:class:`_Call`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, Literal

from ..redact import DEFAULT_REDACTOR, Redactor
from .context import RouteContext
from .decision import (
    CAPABILITY_UNMAPPED,
    HELD,
    LEGACY_RUNG,
    LITERAL_FAMILY_UNSATISFIABLE,
    MATCHED_POLICY,
    MODEL_NOT_ALLOWED,
    NO_ELIGIBLE_ACCOUNT,
    NO_LEGACY_ROUTE,
    NO_POLICY_APPLIES,
    POLICY_CONFLICT,
    REJECTED,
    SELECTED,
    SNAPSHOT_STATES,
    SNAPSHOT_UNAVAILABLE,
    SOURCE_LEGACY,
    SOURCE_MANAGED,
    SOURCE_NONE,
    STATE_CORRUPT,
    RouteDecision,
    decision_of,
)
from .explanation import (
    ADMINISTRATIVE_DISABLED,
    ADMINISTRATIVE_DRAINING,
    COMPACT_RIVALS,
    LITERAL_FAMILY_INCOMPATIBLE,
    NOT_CONFIGURED,
    NOT_IN_POOL,
    PROVIDER_LOCK_MISMATCH,
    RejectedAccount,
)
from .ids import MEMO_LIMIT, IdPieces, ScanMemo, decision_id, id_question
from .index import ALL, Compiled, TraceSource, compile_index, context_keys
from .members import Account, ModelRequirement
from .policy import PolicySnapshot, RoutingAction, account_key
from .vocabulary import CAPABILITY, CONCRETE_MODEL, DEFAULT_VOCABULARY, LITERAL_FAMILY, Vocabulary

__all__ = [
    "FULL_TRACE_LIMIT",
    "RECORD_TRACE",
    "Trace",
    "decision_id",
    "explain",
    "explain_batch",
    "explain_iter",
]

Trace = Literal["auto", "full", "compact"]

#: Under ``trace="auto"``, snapshots with at most this many policies get a full per-policy trace.
FULL_TRACE_LIMIT: Final = 256

#: The trace a recorder resolves with unless asked for the full one: a record carries a compact
#: explanation, and the full trace is re-derived on demand (``rensei audit show SEQ --full``).
RECORD_TRACE: Final[Trace] = "compact"


def record_trace(trace: Trace) -> Trace:
    """The trace a recorded decision is resolved with when its recorder was given ``trace``:
    ``auto`` means :data:`RECORD_TRACE` (compact) when recording; ``full`` and ``compact`` are
    taken as given."""
    return RECORD_TRACE if trace == "auto" else trace


#: Candidates read first under a compact trace: the winners and their ties, then
#: ``COMPACT_RIVALS`` rivals (none: they are counted); more are read only when the ties fill
#: the first look.
_FIRST_LOOK: Final = COMPACT_RIVALS + 4

#: Kept calls per snapshot (a state x trace x vocabulary x redactor each) before starting again.
_CALLS_KEPT: Final = 8

_ADMIN_REASON: Final = {"disabled": ADMINISTRATIVE_DISABLED, "draining": ADMINISTRATIVE_DRAINING}


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

    __slots__ = (
        "full",
        "gates",
        "ids",
        "judged",
        "lanes",
        "memo",
        "model_steps",
        "open_matches",
        "questions",
        "redactor",
        "rejections",
        "state",
        "trace_source",
        "vocabulary",
    )

    def __init__(
        self,
        state: str,
        vocabulary: Vocabulary,
        full: bool,
        redactor: Redactor,
        compiled: Compiled,
    ) -> None:
        self.state = state
        self.vocabulary = vocabulary
        self.full = full
        self.redactor = redactor
        self.memo = ScanMemo(redactor)
        self.trace_source = TraceSource(compiled, full)
        self.open_matches: dict[tuple[Any, ...], tuple[Sequence[int], int]] = {}
        self.model_steps: dict[
            tuple[int, str, str], tuple[str | None, tuple[str, str] | None, tuple[str, ...] | None]
        ] = {}
        self.lanes: dict[tuple[str, str, str | None], tuple[str, ...] | None] = {}
        # Rejections repeat across a batch (few accounts, six reasons): one shared, immutable
        # value each, and whole judgements of a list of accounts are shared too: a decision
        # carries no objects of its own for them.
        self.rejections: dict[tuple[str, str], RejectedAccount] = {}
        self.judged: dict[
            tuple[Any, ...],
            tuple[tuple[str, ...], tuple[RejectedAccount, ...], str | None, str | None, bool],
        ] = {}
        #: Answers by question (see :func:`_resolve`): a batch's repeat even when its contexts
        #: are distinct (the accounts and the legacy route are not part of the question).
        self.questions: dict[tuple[str | None, ...], _Answer] = {}
        # One object per distinct gate: memo keys compare them by identity.
        self.gates: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: The id's fast path: the preimage's pieces that repeat (:class:`~.ids.IdPieces`).
        self.ids = IdPieces(self.memo, state)

    def rejected(self, account_id: str, reason: str) -> RejectedAccount:
        key = (account_id, reason)
        entry = self.rejections.get(key)
        if entry is None:
            if len(self.rejections) >= MEMO_LIMIT:
                self.rejections.clear()
            entry = self.rejections[key] = RejectedAccount(account_id=account_id, reason=reason)
        return entry

    def lane(
        self, requirement: ModelRequirement | None, mapped: str | None
    ) -> tuple[str, ...] | None:
        """:func:`_lane` as a sorted tuple (a plain value: see :data:`_Answer`)."""
        if requirement is None:
            return None
        key = (requirement.kind, requirement.value, mapped)
        try:
            return self.lanes[key]
        except KeyError:
            if len(self.lanes) >= MEMO_LIMIT:
                self.lanes.clear()
            lane = _lane(requirement, mapped, self.vocabulary)
            kept = self.lanes[key] = None if lane is None else tuple(sorted(lane))
            return kept


def _model_step(
    action: RoutingAction, requirement: ModelRequirement, call: _Call
) -> tuple[str | None, tuple[str, str] | None, tuple[str, ...] | None]:
    """The model half of SEMANTICS step 5 for one winning action: ``(model, failure, lane)``,
    the failure an ``(outcome, reason)`` pair, the lane the bindings that alone may serve."""
    model: str | None = None
    mapped = action.mapped_model(requirement.key)
    failed: tuple[str, str] | None = None
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
    return model, failed, call.lane(requirement, mapped)


#: What a context's question (all but its accounts and legacy route) decides on one call's
#: snapshot: ``(keys, listed, unlisted, beyond, last, level, priority, policy_id, conflicting,
#: winner, model, failed, gate, clean)``, the first five the explanation's trace (``keys``
#: empty for a compact one, which never reads them: its decisions keep no copy), the rest
#: the winner's (none: ``level`` is ``None``; tied and differing: ``conflicting``), ``gate``
#: its accounts' ``(lock, pool, lane)``, ``clean`` its strings known clean for the redactor,
#: ``winner`` its rank position; then ``piece``, the UTF-8 of the question's part of the id
#: preimage (:func:`~.ids.id_question`). Flat, and only strings, numbers and tuples of them: the
#: collector stops tracking an answer in the young generations, so a batch's kept answers
#: never reach the old one (whose full collections walk every context and decision).
_Answer = tuple[Any, ...]
#: A corrupt snapshot's: nothing asked.
_UNANSWERED = ((), (), 0, 0, -1, None, None, None, (), None, None, None, None, False, b"")


def _ask(
    ctx: RouteContext, compiled: Compiled, call: _Call, question: tuple[str | None, ...]
) -> _Answer:
    """Steps 1 to 4 of SEMANTICS ``explain`` for ``ctx``, and the model half of step 5 for the
    winning policy: the :data:`_Answer`, remembered by ``question`` (``ctx``'s members it
    depends on, as given)."""
    keys = context_keys(ctx)
    levels = compiled.levels
    full_trace = call.full
    # A compact trace reads only the first candidates (and counts the rest) unless ties
    # fill the first look; a full one reads them all.
    limit = first_look = ALL if full_trace else _FIRST_LOOK
    while True:
        matched, total = compiled.candidates(
            keys, limit, call.open_matches if limit == first_look else None
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
    unlisted = beyond = 0
    if not full_trace:
        unlisted = len(compiled.policies) - total
        # Bounded: the winners (every tie), then the nearest COMPACT_RIVALS outranked.
        beyond = max(0, total - winners - COMPACT_RIVALS)
        matched = matched[: winners + COMPACT_RIVALS]
    listed = tuple(matched)
    last = matched[winners - 1] if winners else -1
    level = priority = policy_id = winner = model = failed = gate = None
    conflicting: tuple[str, ...] = ()
    if winners:
        policies = compiled.policies
        level, priority = levels[matched[0]]
        if winners > 1 and len({policies[pos].action.canonical() for pos in matched[:winners]}) > 1:
            conflicting = tuple(sorted({policies[pos].id for pos in matched[:winners]}))
        else:
            winner = matched[0]
            first = policies[winner]
            policy_id, action = first.id, first.action
            requirement = ctx.model_requirement
            lane = None
            if requirement is not None:
                # The model step depends only on the action and the requirement, which repeat.
                step_key = (id(action), requirement.kind, requirement.value)
                step = call.model_steps.get(step_key)
                if step is None:
                    if len(call.model_steps) >= MEMO_LIMIT:
                        call.model_steps.clear()
                    step = call.model_steps[step_key] = _model_step(action, requirement, call)
                model, failed, lane = step
            gate = (action.provider_lock, action.account_pool, lane)
            gate = call.gates.setdefault(gate, gate)
    clean = not call.memo.may_redact((*question, policy_id, model, call.state))
    answer: _Answer = (keys if full_trace else (), listed, unlisted, beyond, last, level, priority)
    answer += (policy_id, conflicting, winner, model, failed, gate, clean)
    answer += (id_question(ctx).encode("utf-8"),)
    questions = call.questions
    if len(questions) >= MEMO_LIMIT:
        questions.clear()
    questions[question] = answer
    return answer


def _judge_accounts(
    accounts: tuple[Account, ...], action: RoutingAction, lane: tuple[str, ...] | None, call: _Call
) -> tuple[tuple[str, ...], tuple[RejectedAccount, ...], str | None, str | None, bool]:
    """The accounts half of step 5: ``(eligible ids, rejected entries, chosen id, chosen
    binding, whether the lane excluded any)``, the chosen entry ``None`` when none is
    eligible."""
    lock = action.provider_lock
    pool = action.pool_order() if action.account_pool else None
    eligible: list[Account] = []
    rejected: list[RejectedAccount] = []
    for account in accounts:
        # Each entry on its own, in SEMANTICS order.
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
            rejected.append(call.rejected(account.account_id, why))
    # Stable sorts: entries that share an id keep their context order.
    if len(eligible) > 1:
        if pool is not None:
            eligible.sort(key=lambda a: pool[account_key(a.account_id)])
        else:
            eligible.sort(key=lambda a: a.account_id)
    if len(rejected) > 1:
        rejected.sort(key=lambda r: r.account_id)
    # The chosen *entry*: with duplicate ids, its own binding, not another entry's.
    chosen = eligible[0] if eligible else None
    return (
        tuple([a.account_id for a in eligible]),
        tuple(rejected),
        None if chosen is None else chosen.account_id,
        None if chosen is None else chosen.provider_binding,
        any(r.reason == LITERAL_FAMILY_INCOMPATIBLE for r in rejected),
    )


def _resolve(
    ctx: RouteContext, snapshot: PolicySnapshot, compiled: Compiled, call: _Call
) -> RouteDecision:
    state = call.state
    # The account entries' texts, once (one object per distinct text, kept by value): the
    # judged memo's key and the id's pieces.
    entries = ctx.accounts
    pieces = call.ids
    listed_key = pieces.list_key(entries)
    accounts = pieces.account_lists.get(listed_key)
    if accounts is None:
        accounts = pieces.account_list(listed_key, entries)
    legacy = ctx.legacy_route
    account_id = binding = None
    eligible: tuple[str, ...] = ()
    rejected: tuple[RejectedAccount, ...] = ()
    # What the explanation's trace is built from on first read (no source: nothing listed).
    trace_source: TraceSource | None = call.trace_source
    if state == STATE_CORRUPT:
        answer = _UNANSWERED
    else:
        # The question: the members the answer depends on, as given.
        repo, requirement = ctx.repo, ctx.model_requirement
        question = (
            ctx.principal_id,
            ctx.repo_class,
            ctx.role,
            ctx.request_face,
            None if repo is None else repo.value,
            None if repo is None else repo.version,
            None if requirement is None else requirement.kind,
            None if requirement is None else requirement.value,
        )
        answer = call.questions.get(question) or _ask(ctx, compiled, call, question)
    keys, listed, unlisted, beyond, last, level, priority = answer[:7]
    policy_id, conflicting, winner, model, failed, gate, clean, piece = answer[7:]
    if state == STATE_CORRUPT:
        outcome, reason, source = HELD, SNAPSHOT_UNAVAILABLE, SOURCE_NONE
        trace_source = None
    elif level is None:
        if legacy is None:
            outcome, reason, source = HELD, NO_LEGACY_ROUTE, SOURCE_NONE
        else:
            outcome, reason, source = SELECTED, NO_POLICY_APPLIES, SOURCE_LEGACY
            level = LEGACY_RUNG
            account_id = legacy.account_id
            binding = legacy.provider_binding
            model = legacy.model
    elif conflicting:
        outcome, reason, source = REJECTED, POLICY_CONFLICT, SOURCE_MANAGED
    else:
        # The accounts half of step 5 depends only on the gate and the account entries (their
        # canonical text is their whole value), which repeat. They are judged even when the
        # model step failed, so the explanation says whether any account could have served.
        source = SOURCE_MANAGED
        action = compiled.policies[winner].action
        judged_key = (gate, accounts)
        judged = call.judged.get(judged_key)
        if judged is None:
            if len(call.judged) >= MEMO_LIMIT:
                call.judged.clear()
            judged = call.judged[judged_key] = _judge_accounts(ctx.accounts, action, gate[2], call)
        eligible, rejected, chosen, chosen_binding, lane_excluded = judged
        if failed is not None:
            outcome, reason = failed
            model = None
        elif chosen is None:
            outcome = REJECTED if action.on_unavailable == "reject" else HELD
            reason = LITERAL_FAMILY_UNSATISFIABLE if lane_excluded else NO_ELIGIBLE_ACCOUNT
            model = None
        else:
            outcome, reason = SELECTED, MATCHED_POLICY
            account_id, binding = chosen, chosen_binding
    revision, snapshot_hash = snapshot.revision, snapshot.content_hash
    did = pieces.decision_id(
        ctx,
        accounts,
        piece if clean else None,
        account_id,
        model,
        outcome,
        policy_id,
        reason,
        revision,
        snapshot_hash,
        call.redactor,
    )
    return decision_of(
        did,
        outcome,
        reason,
        source,
        policy_id,
        revision,
        snapshot_hash,
        state,
        level,
        priority,
        account_id,
        binding,
        model,
        ctx,
        eligible,
        rejected,
        conflicting,
        unlisted,
        beyond,
        trace_source,
        keys,
        listed,
        last,
        not call.full,
    )


def _start(
    snapshot: PolicySnapshot,
    snapshot_state: str,
    vocabulary: Vocabulary,
    trace: Trace,
    redactor: Redactor,
    keep: bool = False,
) -> tuple[Compiled, _Call]:
    """The snapshot's index and what one call fixes for all its decisions.

    With ``keep`` (single decisions), the call's state is the one kept on the index for the
    same state, trace, vocabulary and redactor, so its memos stay warm from one decision to
    the next: what a live caller deciding spawn after spawn asks repeats (the host's accounts,
    its repositories, roles and requirements). The memos are bounded (:data:`MEMO_LIMIT`
    entries each) and only ever hold answers that are functions of their keys, so a decision
    is the same whether they are warm or cold. A batch builds its own (dropped with it).
    """
    # Totality: an unknown state string is treated as the worst case, never as "ok".
    state = snapshot_state if snapshot_state in SNAPSHOT_STATES else STATE_CORRUPT
    compiled = compile_index(snapshot)
    full = trace == "full" or (trace == "auto" and len(compiled.policies) <= FULL_TRACE_LIMIT)
    if not keep or type(snapshot_state) is not str or type(trace) is not str:
        return compiled, _Call(state, vocabulary, full, redactor, compiled)
    # Kept by the arguments as given (``explain`` looks them up before calling here); the kept
    # call holds its vocabulary and redactor, so their ids name them while it is kept.
    key = (snapshot_state, trace, id(vocabulary), id(redactor))
    calls = compiled.calls
    call = calls.get(key)
    if call is None or call.vocabulary is not vocabulary or call.redactor is not redactor:
        if len(calls) >= _CALLS_KEPT:
            calls.clear()
        call = calls[key] = _Call(state, vocabulary, full, redactor, compiled)
    assert isinstance(call, _Call)
    compiled.kept = (snapshot_state, trace, vocabulary, redactor, call)
    return compiled, call


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
    :mod:`rensei_routing.core.routing.ids`), so it can be recomputed from a stored record and never
    depends on a redacted secret.
    """
    compiled = snapshot._compiled
    if compiled is not None:
        # The kept call last found, when these are the very arguments it was found by.
        last = compiled.kept
        if (
            last is not None
            and last[0] is snapshot_state
            and last[1] is trace
            and last[2] is vocabulary
            and last[3] is redactor
        ):
            return _resolve(context, snapshot, compiled, last[4])
    compiled, call = _start(snapshot, snapshot_state, vocabulary, trace, redactor, keep=True)
    return _resolve(context, snapshot, compiled, call)


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
    compiled, call = _start(snapshot, snapshot_state, vocabulary, trace, redactor)
    return [_resolve(ctx, snapshot, compiled, call) for ctx in contexts]


def explain_iter(
    contexts: Iterable[RouteContext],
    snapshot: PolicySnapshot,
    *,
    snapshot_state: str = "ok",
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    trace: Trace = "auto",
    redactor: Redactor = DEFAULT_REDACTOR,
) -> Iterator[RouteDecision]:
    """:func:`explain_batch` one decision at a time, as ``contexts`` yields them: a stream of
    any length in constant memory (the call's memos are bounded), with what repeats across it
    (answers by question, model steps, redaction checks) worked out once for the whole stream.
    """
    compiled, call = _start(snapshot, snapshot_state, vocabulary, trace, redactor)
    for ctx in contexts:
        yield _resolve(ctx, snapshot, compiled, call)
