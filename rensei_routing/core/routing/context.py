"""What a spawn brings to the resolver: the routing context (repo identity, role, requirement,
accounts, legacy route), its canonical and compact texts, and its readers: the general
``RouteContext.from_dict`` and the quick one it tries first (:func:`quick_context`).

Pure: frozen values with ``from_dict`` / ``to_dict``; no I/O, no clock. ``from_dict`` refuses
what cannot be a context at all (unknown field, wrong type, value outside the vocabulary) with a
:class:`~rensei_routing.errors.MalformedError` naming the field path. The members' own types and
readers are :mod:`.members`; the quick readers of the members are :mod:`._quick_members`, and the
line reader is :mod:`._quick` (which imports this module, never the other way round).

``from_dict(..., redacted=True)`` reads a context as the audit log stored it: a string holding a
redaction marker (``[REDACTED:<label>]``) is taken verbatim (a repo id so rewritten is kept with
its stated version though it is no longer ``owner/repo``), is not held to a length bound (a
marker can be longer than what it replaced), and two accounts whose ids redaction made equal are
both kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from json.encoder import encode_basestring as _e
from typing import Any, Final

from .. import _parse as p
from ..canonical import json_string as _s
from ._quick_members import (
    Memo,
    NotQuick,
    not_quick,
    quick_accounts,
    quick_choice,
    quick_legacy,
    quick_repo,
    quick_requirement,
    quick_text,
    remember_new,
)
from .members import (
    MAX_ID,
    Account,
    LegacyRoute,
    ModelRequirement,
    RepoIdentity,
    length_bound,
    repo_json,
    requirement_json,
)
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = ["CONTEXT_FIELDS", "MATCH_FIELDS", "RouteContext", "quick_context"]


def context_canonical(
    accounts: str,
    legacy: str,
    requirement: str,
    principal: str,
    repo: str,
    repo_class: str,
    face: str,
    role: str,
) -> str:
    """RFC 8785 text of a context from the JSON text of each member (keys sorted)."""
    return (
        f'{{"accounts":{accounts},"legacy_route":{legacy},"model_requirement":{requirement},'
        f'"principal_id":{principal},"repo":{repo},"repo_class":{repo_class},'
        f'"request_face":{face},"role":{role}}}'
    )


def context_display(
    repo: str,
    repo_class: str,
    principal: str,
    role: str,
    requirement: str,
    face: str,
    legacy: str,
    accounts: str,
) -> str:
    """Compact JSON text of a context's ``to_dict`` from the JSON text of each member."""
    return (
        f'{{"repo":{repo},"repo_class":{repo_class},"principal_id":{principal},'
        f'"role":{role},"model_requirement":{requirement},"request_face":{face},'
        f'"legacy_route":{legacy},"accounts":{accounts}}}'
    )


#: The context fields every decision reads: together they pick the winning policy (the match
#: keys of ``core/routing/index.py:context_keys``; ``role`` defaults from ``principal_id``, and
#: ``model_requirement`` also picks the model).
MATCH_FIELDS: Final[tuple[str, ...]] = (
    "repo",
    "repo_class",
    "principal_id",
    "role",
    "model_requirement",
    "request_face",
)
CONTEXT_FIELDS: Final[tuple[str, ...]] = (*MATCH_FIELDS, "legacy_route", "accounts")


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteContext:
    """One spawn's routing question. ``role`` is the canonical worker role, or ``None``."""

    repo: RepoIdentity | None = None
    repo_class: str | None = None
    principal_id: str | None = None
    role: str | None = None
    model_requirement: ModelRequirement | None = None
    request_face: str = "unknown"
    legacy_route: LegacyRoute | None = None
    accounts: tuple[Account, ...] = ()
    _canonical: str | None = field(default=None, init=False, repr=False, compare=False)
    _display: str | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": None if self.repo is None else self.repo.to_dict(),
            "repo_class": self.repo_class,
            "principal_id": self.principal_id,
            "role": self.role,
            "model_requirement": None
            if self.model_requirement is None
            else self.model_requirement.to_dict(),
            "request_face": self.request_face,
            "legacy_route": None if self.legacy_route is None else self.legacy_route.to_dict(),
            "accounts": [a.to_dict() for a in self.accounts],
        }

    def canonical(self) -> bytes:
        """RFC 8785 bytes of :meth:`to_dict` (the UTF-8 of :meth:`canonical_text`)."""
        return self.canonical_text().encode("utf-8")

    def canonical_text(self, accounts: str | None = None) -> str:
        """RFC 8785 text of :meth:`to_dict`, written directly and computed once per value.

        The resolver hashes every context it decides; this skips building the dict, and passes
        ``accounts`` (its entries' canonical texts joined with commas) when it holds them
        already. The test suite checks it equals ``canonical_bytes(self.to_dict())`` on
        generated contexts.
        """
        cached = self._canonical
        if cached is None:
            legacy = self.legacy_route
            if accounts is None:
                accounts = ",".join([a.canonical_json() for a in self.accounts])
            cached = context_canonical(
                f"[{accounts}]",
                "null" if legacy is None else legacy.canonical_json(),
                requirement_json(self.model_requirement),
                _s(self.principal_id),
                repo_json(self.repo),
                _s(self.repo_class),
                _e(self.request_face),
                _s(self.role),
            )
            object.__setattr__(self, "_canonical", cached)
        return cached

    def display_text(self) -> str:
        """Compact JSON text of :meth:`to_dict` (``json.dumps`` with ``separators=(",", ":")``
        and ``ensure_ascii=False``), written directly and computed once per value."""
        cached = self._display
        if cached is None:
            legacy = self.legacy_route
            cached = context_display(
                repo_json(self.repo),
                _s(self.repo_class),
                _s(self.principal_id),
                _s(self.role),
                requirement_json(self.model_requirement),
                _e(self.request_face),
                "null" if legacy is None else legacy.display_json(),
                f"[{','.join([a.display_json() for a in self.accounts])}]",
            )
            object.__setattr__(self, "_display", cached)
        return cached

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> RouteContext:
        """Read a context document. ``repo`` may be a plain ``"owner/name"`` string;
        ``role``, when absent, is the canonical role of ``principal_id`` (or ``None``).
        ``redacted`` reads a context as the audit log stored it (see the module docstring).

        Raises:
            MalformedError: naming the first offending field path.
        """
        if not redacted:
            quick = quick_context(data, vocabulary)  # the common case, without field paths
            if quick is not None:
                return quick
        d: Mapping[str, Any] = p.obj(data, path, optional=CONTEXT_FIELDS)
        repo = d.get("repo")
        repo_class = d.get("repo_class")
        principal = p.opt_string(
            d.get("principal_id"),
            p.at(path, "principal_id"),
            max_len=length_bound(d.get("principal_id"), MAX_ID, redacted),
        )
        role_in = d.get("role")
        if role_in is not None:
            role = vocabulary.canonical_worker_role(
                p.string(role_in, p.at(path, "role"), max_len=MAX_ID)
            )
        else:
            role = vocabulary.canonical_worker_role(principal)
        requirement = d.get("model_requirement")
        legacy = d.get("legacy_route")
        accounts_path = p.at(path, "accounts")
        accounts = tuple(
            Account.from_dict(
                a, path=p.at(accounts_path, i), vocabulary=vocabulary, redacted=redacted
            )
            for i, a in enumerate(p.array(d.get("accounts", []), accounts_path))
        )
        # Account ids need not be unique: the resolver judges each entry on its own.
        return cls(
            repo=None
            if repo is None
            else RepoIdentity.from_dict(repo, path=p.at(path, "repo"), redacted=redacted),
            repo_class=None
            if repo_class is None
            else p.choice(
                repo_class, p.at(path, "repo_class"), vocabulary.repo_classes, what="repo class"
            ),
            principal_id=principal,
            role=role,
            model_requirement=None
            if requirement is None
            else ModelRequirement.from_dict(
                requirement,
                path=p.at(path, "model_requirement"),
                vocabulary=vocabulary,
                redacted=redacted,
            ),
            request_face=p.choice(
                d.get("request_face", "unknown"),
                p.at(path, "request_face"),
                vocabulary.request_faces,
                what="request face",
            ),
            legacy_route=None
            if legacy is None
            else LegacyRoute.from_dict(
                legacy, path=p.at(path, "legacy_route"), vocabulary=vocabulary, redacted=redacted
            ),
            accounts=accounts,
        )


class _ContextFields:
    """A :class:`RouteContext`'s storage, assignable: the same slots in the same order, so
    :func:`context_with_texts` fills one with plain stores and then retypes it (CPython allows
    ``__class__`` to be assigned between such layouts, as ``decision.decision_of`` does for a
    decision). Nothing else ever sees this class."""

    __slots__ = RouteContext.__slots__

    repo: RepoIdentity | None
    repo_class: str | None
    principal_id: str | None
    role: str | None
    model_requirement: ModelRequirement | None
    request_face: str
    legacy_route: LegacyRoute | None
    accounts: tuple[Account, ...]
    _canonical: str | None
    _display: str | None


if (
    tuple(f.name for f in fields(RouteContext))
    != (
        *CONTEXT_FIELDS,
        "_canonical",
        "_display",
    )
    or RouteContext.__slots__ != (*CONTEXT_FIELDS, "_canonical", "_display")
    or hasattr(RouteContext, "__post_init__")
):  # pragma: no cover - a guard at import
    raise ImportError("context_with_texts does not fill RouteContext's fields")


def context_with_texts(
    repo: RepoIdentity | None,
    repo_class: str | None,
    principal_id: str | None,
    role: str | None,
    model_requirement: ModelRequirement | None,
    request_face: str,
    legacy_route: LegacyRoute | None,
    accounts: tuple[Account, ...],
    canonical: str,
    display: str,
) -> RouteContext:
    """``RouteContext(...)`` of these (already read) members, its :meth:`~RouteContext.
    canonical_text` and :meth:`~RouteContext.display_text` set to ``canonical`` and
    ``display``, which the caller built from the same members' texts with
    :func:`context_canonical` and :func:`context_display` (a reader sharing pieces across a
    batch). Fills the slots with plain stores, then retypes the value (see
    :class:`_ContextFields`): a fraction of the keyword constructor's cost."""
    ctx = _ContextFields()
    ctx.repo = repo
    ctx.repo_class = repo_class
    ctx.principal_id = principal_id
    ctx.role = role
    ctx.model_requirement = model_requirement
    ctx.request_face = request_face
    ctx.legacy_route = legacy_route
    ctx.accounts = accounts
    ctx._canonical = canonical
    ctx._display = display
    ctx.__class__ = RouteContext  # type: ignore[assignment]
    assert isinstance(ctx, RouteContext)
    return ctx


# -- the quick reader ---------------------------------------------------------------------------

#: The same fields as the general reader: a document with any other key takes that path.
_CONTEXT_KEYS: Final = frozenset(CONTEXT_FIELDS)
_ABSENT: Final = object()


def quick_context(
    data: Any, vocabulary: Vocabulary, memo: Memo | None = None
) -> RouteContext | None:
    """The context ``RouteContext.from_dict(data, vocabulary=vocabulary)`` reads, when ``data``
    is a plain, valid document; ``None`` when the general reader must look (it then raises or
    reads what this one was unsure of).

    ``memo`` (one per reader of one vocabulary, e.g. per batch) lets repeated pieces (account
    entries, legacy routes, repos, requirements) be read once and their values shared, with
    the text the encoders keep on them.
    """
    if type(data) is not dict or not data.keys() <= _CONTEXT_KEYS:
        return None
    if memo is None:
        memo = {}
    try:
        get = data.get
        principal = get("principal_id")
        if principal is not None:
            principal = quick_text(principal, MAX_ID)
        role_in = get("role")
        role = vocabulary.canonical_worker_role(
            principal if role_in is None else quick_text(role_in, MAX_ID)
        )
        repo, repo_class = get("repo"), get("repo_class")
        requirement, legacy = get("model_requirement"), get("legacy_route")
        accounts = get("accounts", _ABSENT)
        face = get("request_face", "unknown")
        # request_face and repo_class: strings (checked first: a memo key must be one)
        face_key = ("face", face if type(face) is str else not_quick())
        known_face = memo.get(face_key)
        if known_face is None:
            known_face = remember_new(memo, face_key, quick_choice(face, vocabulary.request_faces))
        if repo_class is not None:
            class_key = ("class", repo_class if type(repo_class) is str else not_quick())
            known_class = memo.get(class_key)
            if known_class is None:
                known_class = remember_new(
                    memo, class_key, quick_choice(repo_class, vocabulary.repo_classes)
                )
            repo_class = known_class
        return RouteContext(
            repo=None if repo is None else quick_repo(repo, memo),
            repo_class=repo_class,
            principal_id=principal,
            role=role,
            model_requirement=None
            if requirement is None
            else quick_requirement(requirement, vocabulary, memo),
            request_face=known_face,
            legacy_route=None if legacy is None else quick_legacy(legacy, vocabulary, memo),
            accounts=() if accounts is _ABSENT else quick_accounts(accounts, vocabulary, memo),
        )
    except NotQuick:
        return None
