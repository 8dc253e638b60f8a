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
    HELD,
    LEGACY_RUNG,
    LITERAL_FAMILY_UNSATISFIABLE,
    MATCHED_POLICY,
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
from .eligibility import judge_accounts
from .explanation import RejectedAccount
from .ids import MEMO_LIMIT, IdPieces, ScanMemo, decision_id
from .index import ALL, WINNERS_ONLY, Compiled, TraceSource, compile_index, context_keys
from .members import CANONICAL, ModelRequirement, question_texts, repo_json
from .model_step import model_step, provider_lane
from .policy import PolicySnapshot
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

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


#: Kept calls per snapshot (a state x trace x vocabulary x redactor each) before starting again.
_CALLS_KEPT: Final = 8


class _Call:
    """What one ``explain`` / ``explain_batch`` call fixes for all its decisions, and a memo of
    the lanes it computed (keyed by requirement and mapped model; dropped with the call)."""

    __slots__ = (
        "answered",
        "answers",
        "full",
        "gates",
        "ids",
        "judged",
        "lanes",
        "memo",
        "open_best",
        "open_matches",
        "parts",
        "redactor",
        "rejections",
        "repos",
        "state",
        "trace_source",
        "vocabulary",
        "won",
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
        #: The open group's best by the context's keys on dimensions 2..6 (compact traces).
        self.open_best: dict[tuple[Any, ...], tuple[tuple[int, ...], int, Any]] = {}
        #: What a winner decides by its rank position and the requirement (see :func:`_won`).
        self.won: dict[tuple[int, str | None, str | None], tuple[Any, ...]] = {}
        self.lanes: dict[tuple[str, str, str | None], tuple[str, ...] | None] = {}
        # Rejections repeat across a batch (few accounts, six reasons): one shared, immutable
        # value each, and whole judgements of a list of accounts are shared too: a decision
        # carries no objects of its own for them.
        self.rejections: dict[tuple[str, str], RejectedAccount] = {}
        self.judged: dict[
            tuple[Any, ...],
            tuple[tuple[str, ...], tuple[RejectedAccount, ...], str | None, str | None, bool],
        ] = {}
        #: Answers by question (see :func:`_resolve`): one dict of them per repo group (the
        #: policies naming a repo; ``None``: none), by the question's other members, so the
        #: repos naming the same policies share their answers (the repo's own text is added per
        #: decision), and a batch's questions repeat even when its contexts are distinct (the
        #: accounts and the legacy route are not part of the question). ``answered`` counts
        #: them all: at :data:`MEMO_LIMIT` every dict is emptied.
        self.answers: dict[Any, dict[tuple[str | None, ...], _Answer]] = {}
        self.answered = 0
        #: What a question's members but its repo decide (see :func:`_part`).
        self.parts: dict[tuple[str | None, ...], tuple[Any, ...]] = {}
        #: What a repo decides (see :func:`_repo`), and one object per distinct candidate list.
        self.repos: dict[tuple[str | None, str | None], _Repo] = {}
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
            lane = provider_lane(requirement, mapped, self.vocabulary)
            kept = self.lanes[key] = None if lane is None else tuple(sorted(lane))
            return kept


#: What a context's question (all but its accounts and legacy route) decides on one call's
#: snapshot, its repo given by the repo's group (see :meth:`~.index.Compiled.group_of`):
#: ``(listed, unlisted, beyond, last, level, priority, policy_id, conflicting, winner, model,
#: failed, gate, won_clean, clean, before, after)``, the first four the explanation's trace (a
#: full one reads the context's keys from the context), the next nine the winner's (none:
#: ``level`` is ``None``; tied and differing: ``conflicting``), ``gate`` its
#: accounts' ``(lock, pool, lane)``, ``won_clean`` its strings known clean for the redactor,
#: ``winner`` its rank position; then the members' (see :data:`_Part`): ``clean``, their
#: strings known clean, and ``before`` and ``after``, the UTF-8 of the question's part of the
#: id preimage (:func:`~.ids.id_question`) around the repo's text. Flat, and only strings,
#: numbers and tuples of them: the collector stops tracking an answer in the young
#: generations, so a batch's kept answers never reach the old one (whose full collections
#: walk every context and decision).
_Answer = tuple[Any, ...]
#: A corrupt snapshot's: nothing asked.
_UNANSWERED = ((), 0, 0, -1, None, None, None, (), None, None, None, None, False, False, b"", b"")

#: What a repo decides (see :func:`_repo`): ``(text, clean, answers, key, group)``.
_Repo = tuple[Any, ...]
#: The repo key of a context without one.
_NO_REPO: Final = (None, None)
#: A corrupt snapshot's repo: nothing asked.
_UNASKED: Final[_Repo] = (b"null", False, {}, None, None)


#: What a question's members other than its repo decide, kept by them (see :func:`_part`):
#: ``(rest, tail, opened)``, ``rest`` the context's keys on dimensions 2..6 (see
#: :func:`~.index.context_keys`), ``tail`` the end of its :data:`_Answer` (``(clean, before,
#: after)``: whether those members' strings are known clean for the redactor, and the UTF-8 of
#: the id's question piece around the repo's text, :func:`~.members.question_texts`),
#: ``opened`` the open group's best for ``rest`` (:meth:`~.index._Group.best`). Flat, like
#: :data:`_Answer`.
_Part = tuple[Any, ...]


def _part(
    ctx: RouteContext, compiled: Compiled, call: _Call, members: tuple[str | None, ...]
) -> _Part:
    """The :data:`_Part` of ``ctx``, whose question's members but its repo are ``members``."""
    before, after = question_texts(
        ctx.model_requirement, ctx.principal_id, ctx.repo_class, ctx.request_face, ctx.role
    )
    rest = context_keys(ctx)[1:]
    clean = not call.memo.may_redact((*members, call.state))
    part: _Part = (
        rest,
        (clean, before.encode("utf-8"), after.encode("utf-8")),
        compiled.open.best(rest),
    )
    parts = call.parts
    if len(parts) >= MEMO_LIMIT:
        parts.clear()
    parts[members] = part
    return part


def _repo(
    ctx: RouteContext, compiled: Compiled, call: _Call, repo: tuple[str | None, str | None]
) -> _Repo:
    """``(text, clean, answers, key, group)`` of ``ctx``'s repo (given as ``repo``, its value
    and version): the UTF-8 of its JSON text in the id's question piece, whether its strings
    are known clean, the answers kept for its group (see :attr:`_Call.answers`), its key on
    the repo dimension (its value when canonical) and its group."""
    value, version = repo
    key = value if version == CANONICAL else None
    group = compiled.group_of(key)
    answers = call.answers.get(group)
    if answers is None:
        answers = call.answers[group] = {}
    kept = (
        repo_json(ctx.repo).encode("utf-8"),
        not call.memo.may_redact(repo),
        answers,
        key,
        group,
    )
    repos = call.repos
    if len(repos) >= MEMO_LIMIT:
        repos.clear()
    repos[repo] = kept
    return kept


def _won(
    ctx: RouteContext, compiled: Compiled, call: _Call, key: tuple[int, str | None, str | None]
) -> tuple[Any, ...]:
    """``(policy_id, model, failed, gate, clean)`` of the winning policy at rank position
    ``key[0]`` for ``ctx``, whose requirement's kind and value are ``key[1:]``: the model half
    of step 5 (see :func:`~.model_step.model_step`), the gate its accounts are judged by (see
    :data:`_Answer`), and whether its id and model are known clean for the redactor."""
    first = compiled.policies[key[0]]
    policy_id, action = first.id, first.action
    model = failed = lane = None
    requirement = ctx.model_requirement
    if requirement is not None:
        model, failed, lane = model_step(action, requirement, call.vocabulary, call.lane)
    gate = (action.provider_lock, action.account_pool, lane)
    gate = call.gates.setdefault(gate, gate)
    won = (policy_id, model, failed, gate, not call.memo.may_redact((policy_id, model)))
    kept = call.won
    if len(kept) >= MEMO_LIMIT:
        kept.clear()
    kept[key] = won
    return won


def _ask(
    ctx: RouteContext,
    compiled: Compiled,
    call: _Call,
    repo: _Repo,
    members: tuple[str | None, ...],
) -> _Answer:
    """Steps 1 to 4 of SEMANTICS ``explain`` for ``ctx``, and the model half of step 5 for the
    winning policy: the :data:`_Answer`, remembered in its repo's group's answers (``repo``,
    see :func:`_repo`) by ``members`` (``ctx``'s other members it depends on, as given)."""
    # What the question's members but its repo decide repeats across a batch even where
    # whole questions do not (a large snapshot names thousands of repositories).
    rest, tail, opened = call.parts.get(members) or _part(ctx, compiled, call, members)
    matched: Sequence[int]
    if call.full:
        # Every candidate, the winners the leading run at the best level (Compiled.read's
        # full case, written out: the small snapshots a full trace serves ask it most).
        matched = compiled.lookup(repo[3], rest, ALL, call.open_matches)[0]
        winners = unlisted = beyond = 0
        if matched:
            levels = compiled.levels
            best = levels[matched[0]]
            for pos in matched:
                if levels[pos] != best:
                    break
                winners += 1
    elif WINNERS_ONLY:
        # A compact trace's usual case (Compiled.best_in's, written out: the open group's
        # best is kept with the members): as far as the ties go.
        matched, total, level = opened
        group = repo[4]
        if group is not None:
            extra, more, extra_level = group.best(rest)
            if more:
                if not total:
                    matched = extra
                elif extra_level == level:
                    # Tied across the two groups (equal rungs and priorities): in rank order.
                    matched = tuple(sorted((*matched, *extra)))
                elif extra[0] < matched[0]:
                    # Positions are rank order: the lower first holds the better level.
                    matched = extra
                total += more
        winners = len(matched)
        unlisted, beyond = len(compiled.policies) - total, total - winners
    else:
        matched, winners, unlisted, beyond = compiled.read(
            repo[3], rest, False, call.open_matches, call.open_best
        )
    listed = tuple(matched)
    last = matched[winners - 1] if winners else -1
    level = priority = policy_id = winner = model = failed = gate = None
    conflicting: tuple[str, ...] = ()
    won_clean = True
    if winners:
        policies = compiled.policies
        level, priority = compiled.levels[matched[0]]
        if winners > 1 and len({policies[pos].action.canonical() for pos in matched[:winners]}) > 1:
            conflicting = tuple(sorted({policies[pos].id for pos in matched[:winners]}))
        else:
            winner = matched[0]
            # What the winner decides depends only on it and the requirement, which repeat.
            key = (winner, members[4], members[5])
            won = call.won.get(key) or _won(ctx, compiled, call, key)
            policy_id, model, failed, gate, won_clean = won
    answer: _Answer = (listed, unlisted, beyond, last, level, priority, policy_id, conflicting)
    answer += (winner, model, failed, gate, won_clean, *tail)
    if call.answered >= MEMO_LIMIT:
        for kept_answers in call.answers.values():
            kept_answers.clear()
        call.answered = 0
    call.answered += 1
    repo[2][members] = answer
    return answer


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
        kept = _UNASKED
    else:
        # The question: the members the answer depends on, as given: the repo (by its group),
        # then the others.
        repo, requirement = ctx.repo, ctx.model_requirement
        repo_id = _NO_REPO if repo is None else (repo.value, repo.version)
        kept = call.repos.get(repo_id) or _repo(ctx, compiled, call, repo_id)
        members = (
            ctx.principal_id,
            ctx.repo_class,
            ctx.role,
            ctx.request_face,
            None if requirement is None else requirement.kind,
            None if requirement is None else requirement.value,
        )
        answer = kept[2].get(members) or _ask(ctx, compiled, call, kept, members)
    (listed, unlisted, beyond, last, level, priority, policy_id, conflicting,
     winner, model, failed, gate, won_clean, clean, before, after) = answer  # fmt: skip
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
        judged_key = (gate, accounts)
        judged = call.judged.get(judged_key)
        if judged is None:
            if len(call.judged) >= MEMO_LIMIT:
                call.judged.clear()
            judged = call.judged[judged_key] = judge_accounts(
                ctx.accounts, compiled.policies[winner].action, gate[2], call.rejected
            )
        eligible, rejected, chosen, chosen_binding, lane_excluded = judged
        if failed is not None:
            outcome, reason = failed
            model = None
        elif chosen is None:
            on_unavailable = compiled.policies[winner].action.on_unavailable
            outcome = REJECTED if on_unavailable == "reject" else HELD
            reason = LITERAL_FAMILY_UNSATISFIABLE if lane_excluded else NO_ELIGIBLE_ACCOUNT
            model = None
        else:
            outcome, reason = SELECTED, MATCHED_POLICY
            account_id, binding = chosen, chosen_binding
    revision, snapshot_hash = snapshot.revision, snapshot.content_hash
    did = pieces.decision_id(
        ctx,
        accounts,
        before + kept[0] + after if clean and won_clean and kept[1] else None,
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
        (),
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
