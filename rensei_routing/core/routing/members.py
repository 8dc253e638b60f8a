"""The members of a routing context: repository identity, model requirement, account and legacy
route, each a frozen value with its general reader (``from_dict``, every failure naming the field
path) and the JSON texts the encoders keep on it; and the texts of a decision id's preimage
around a context's members (:func:`question_texts`, :func:`id_head`, :func:`id_tail`), which
:mod:`.ids` hashes.

Pure: no I/O, no clock. Knows nothing of the context that holds them (:mod:`.context`) nor of the
quick readers (:mod:`._quick_members`); ``redacted=True`` reads a member as the audit log stored
it (see :mod:`.context`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _e
from typing import Any, Final

from .. import _parse as p
from ..canonical import json_string as _s
from ..redact import MARKER_PREFIX
from .vocabulary import (
    CAPABILITY,
    CONCRETE_MODEL,
    DEFAULT_VOCABULARY,
    LITERAL_FAMILY,
    REQUIREMENT_KINDS,
    Vocabulary,
)

__all__ = [
    "CANONICAL",
    "LEGACY_LOSSY",
    "Account",
    "KeptTexts",
    "LegacyRoute",
    "ModelRequirement",
    "RepoIdentity",
    "canonicalize_repo",
]

CANONICAL: Final = "canonical"
LEGACY_LOSSY: Final = "legacy-lossy"
_SEGMENT: Final = re.compile(r"[a-z0-9_][a-z0-9._-]*")
#: The length bound of an id (repo, account, principal, role) as input allows it.
MAX_ID: Final = 256
#: The length bound of a redacted stored string: what redaction can grow, not what input allows.
_UNBOUNDED: Final = 1 << 30


def _redacted(value: Any, redacted: bool) -> bool:
    """Whether ``value`` is a stored string that redaction rewrote (read back verbatim)."""
    return redacted and isinstance(value, str) and MARKER_PREFIX in value


def length_bound(value: Any, limit: int, redacted: bool) -> int:
    """``limit``, or no bound for a stored string that redaction rewrote."""
    return _UNBOUNDED if _redacted(value, redacted) else limit


class KeptTexts:
    """A frozen value's two JSON texts of its ``to_dict``, each written directly on first read
    and kept on the value (its ``_json`` and ``_display`` fields, which the dataclass declares
    with ``init=False, compare=False``): shared entries are written once. The value writes
    them in :meth:`_write_json` and :meth:`_write_display`; the tests check both equal the
    encoders'."""

    __slots__ = ()
    _json: str | None
    _display: str | None

    def canonical_json(self) -> str:
        """RFC 8785 text of ``to_dict()``."""
        text = self._json
        if text is None:
            text = self._write_json()
            object.__setattr__(self, "_json", text)
        return text

    def display_json(self) -> str:
        """Compact JSON text of ``to_dict()`` in its own key order (what ``json.dumps`` writes
        with ``separators=(",", ":")``)."""
        text = self._display
        if text is None:
            text = self._write_display()
            object.__setattr__(self, "_display", text)
        return text

    def _write_json(self) -> str:
        raise NotImplementedError

    def _write_display(self) -> str:
        raise NotImplementedError


def canonicalize_repo(value: object) -> str | None:
    """``owner/repo`` (stripped, lowercased) when ``value`` is exactly that, else ``None``.

    Exactly one slash between two segments, each starting with ``[a-z0-9_]`` then
    ``[a-z0-9._-]*``, and no ``..``. A bare runtime slug (no slash) is never canonical.
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    owner, slash, name = text.partition("/")
    if not slash or "/" in name or ".." in text:
        return None
    if not (_SEGMENT.fullmatch(owner) and _SEGMENT.fullmatch(name)):
        return None
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequirement:
    """What a spawn asks for.

    ``kind`` is ``literal_family``, ``capability`` or ``concrete_model``.
    """

    kind: str
    value: str

    @property
    def key(self) -> tuple[str, str]:
        """The identity used for matching and mapping: ``(kind, lowercased value)``."""
        return (self.kind, self.value.lower())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> ModelRequirement:
        """Read ``{"kind": ..., "value": ...}``, or a bare string whose kind is inferred.

        A bare string names a literal family or a capability class when the vocabulary knows
        it, and is a concrete model id otherwise.

        Raises:
            MalformedError: unknown kind, unknown family or class, or a bad concrete id.
        """
        if isinstance(data, str):
            text = p.string(data, path, max_len=length_bound(data, 64, redacted))
            lowered = text.lower()
            if lowered in vocabulary.literal_families:
                return cls(kind=LITERAL_FAMILY, value=lowered)
            if lowered in vocabulary.capability_classes:
                return cls(kind=CAPABILITY, value=lowered)
            return cls(kind=CONCRETE_MODEL, value=text)
        d = p.obj(data, path, required=("kind", "value"))
        kind = p.choice(d["kind"], p.at(path, "kind"), REQUIREMENT_KINDS, what="requirement kind")
        vpath = p.at(path, "value")
        if kind == LITERAL_FAMILY:
            value = p.choice(d["value"], vpath, vocabulary.literal_families, what="literal family")
        elif kind == CAPABILITY:
            value = p.choice(
                d["value"], vpath, vocabulary.capability_classes, what="capability class"
            )
        else:
            value = p.string(d["value"], vpath, max_len=length_bound(d["value"], 64, redacted))
        return cls(kind=kind, value=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoIdentity:
    """A repository identity: ``canonical`` (owner/repo) or ``legacy-lossy`` (a runtime slug)."""

    value: str
    version: str

    @classmethod
    def from_canonical(cls, value: str) -> RepoIdentity:
        """The canonical identity of ``owner/repo``.

        Raises:
            MalformedError: ``value`` is not a canonical repository id.
        """
        canonical = canonicalize_repo(value)
        if canonical is None:
            raise p.fail("repo", f"not a canonical owner/repo id: {value!r}")
        return cls(value=canonical, version=CANONICAL)

    @classmethod
    def from_runtime_slug(cls, slug: str) -> RepoIdentity:
        """A lossy identity from a path-safe slug (``/`` became ``-``); it never joins a policy."""
        return cls(value=slug.strip().lower(), version=LEGACY_LOSSY)

    @property
    def canonical(self) -> bool:
        return self.version == CANONICAL

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "version": self.version}

    @classmethod
    def from_dict(cls, data: Any, *, path: p.Path = "", redacted: bool = False) -> RepoIdentity:
        """Read ``"owner/name"`` or ``{"value", "version"}``.

        A plain string that is not canonical becomes a ``legacy-lossy`` identity: the route is
        still resolved, only the join to repo-scoped policies is refused. With ``redacted``, a
        value holding a redaction marker is kept verbatim with its stated version (a plain
        string: ``legacy-lossy``), as the audit log stored it.

        Raises:
            MalformedError: wrong shape, or ``version: canonical`` on a non-canonical value.
        """
        if _redacted(data, redacted):
            return cls(value=p.string(data, path, max_len=_UNBOUNDED), version=LEGACY_LOSSY)
        if isinstance(data, str):
            text = p.string(data, path, max_len=MAX_ID)
            canonical = canonicalize_repo(text)
            if canonical is not None:
                return cls(value=canonical, version=CANONICAL)
            return cls.from_runtime_slug(text)
        d = p.obj(data, path, required=("value",), optional=("version",))
        marked = _redacted(d["value"], redacted)
        value = p.string(d["value"], p.at(path, "value"), max_len=_UNBOUNDED if marked else MAX_ID)
        version = p.choice(
            d.get("version", CANONICAL),
            p.at(path, "version"),
            (CANONICAL, LEGACY_LOSSY),
            what="identity version",
        )
        if marked:
            return cls(value=value, version=version)
        if version == LEGACY_LOSSY:
            return cls.from_runtime_slug(value)
        canonical = canonicalize_repo(value)
        if canonical is None:
            raise p.fail(p.at(path, "value"), f"not a canonical owner/repo id: {value!r}")
        return cls(value=canonical, version=CANONICAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Account(KeptTexts):
    """An account the host can route to, and whether it is usable right now."""

    account_id: str
    provider_binding: str
    configured: bool = True
    administrative_state: str = "active"
    _json: str | None = field(default=None, init=False, repr=False, compare=False)
    _display: str | None = field(default=None, init=False, repr=False, compare=False)

    def _write_json(self) -> str:
        return (
            f'{{"account_id":{_e(self.account_id)},'
            f'"administrative_state":{_e(self.administrative_state)},'
            f'"configured":{"true" if self.configured else "false"},'
            f'"provider_binding":{_e(self.provider_binding)}}}'
        )

    def _write_display(self) -> str:
        return (
            f'{{"account_id":{_e(self.account_id)},'
            f'"provider_binding":{_e(self.provider_binding)},'
            f'"configured":{"true" if self.configured else "false"},'
            f'"administrative_state":{_e(self.administrative_state)}}}'
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "account_id": self.account_id,
            "provider_binding": self.provider_binding,
            "configured": self.configured,
            "administrative_state": self.administrative_state,
        }

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> Account:
        """Raises: MalformedError."""
        d = p.obj(
            data,
            path,
            required=("account_id", "provider_binding"),
            optional=("configured", "administrative_state"),
        )
        return cls(
            account_id=p.string(
                d["account_id"],
                p.at(path, "account_id"),
                max_len=length_bound(d["account_id"], MAX_ID, redacted),
            ),
            provider_binding=p.choice(
                d["provider_binding"],
                p.at(path, "provider_binding"),
                vocabulary.provider_bindings,
                what="provider binding",
            ),
            configured=p.boolean(d.get("configured", True), p.at(path, "configured")),
            administrative_state=p.choice(
                d.get("administrative_state", "active"),
                p.at(path, "administrative_state"),
                vocabulary.administrative_states,
                what="administrative state",
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyRoute(KeptTexts):
    """The route the legacy mechanisms actually took for this spawn, reported as it ran.

    ``provider_binding`` is free text (a legacy provider name such as ``zai`` or ``gateway``),
    because legacy dials never spoke the policy vocabulary.
    """

    provider_binding: str
    account_id: str | None = None
    model: str | None = None
    mechanism: str | None = None
    mechanism_detail: str | None = None
    _json: str | None = field(default=None, init=False, repr=False, compare=False)
    _display: str | None = field(default=None, init=False, repr=False, compare=False)

    def _write_json(self) -> str:
        return (
            f'{{"account_id":{_s(self.account_id)},"mechanism":{_s(self.mechanism)},'
            f'"mechanism_detail":{_s(self.mechanism_detail)},"model":{_s(self.model)},'
            f'"provider_binding":{_e(self.provider_binding)}}}'
        )

    def _write_display(self) -> str:
        return (
            f'{{"account_id":{_s(self.account_id)},'
            f'"provider_binding":{_e(self.provider_binding)},"model":{_s(self.model)},'
            f'"mechanism":{_s(self.mechanism)},'
            f'"mechanism_detail":{_s(self.mechanism_detail)}}}'
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "account_id": self.account_id,
            "provider_binding": self.provider_binding,
            "model": self.model,
            "mechanism": self.mechanism,
            "mechanism_detail": self.mechanism_detail,
        }

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> LegacyRoute:
        """Raises: MalformedError."""
        d = p.obj(
            data,
            path,
            required=("provider_binding",),
            optional=("account_id", "model", "mechanism", "mechanism_detail"),
        )
        mechanism = d.get("mechanism")

        def bound(key: str, limit: int) -> int:
            return length_bound(d.get(key), limit, redacted)

        return cls(
            # Reported exactly as it ran: no case folding, no trimming.
            provider_binding=p.string(
                d["provider_binding"],
                p.at(path, "provider_binding"),
                max_len=bound("provider_binding", 64),
                verbatim=True,
            ),
            account_id=p.opt_string(
                d.get("account_id"),
                p.at(path, "account_id"),
                max_len=bound("account_id", MAX_ID),
                verbatim=True,
            ),
            model=p.opt_string(
                d.get("model"), p.at(path, "model"), max_len=bound("model", 256), verbatim=True
            ),
            mechanism=None
            if mechanism is None
            else p.choice(
                mechanism, p.at(path, "mechanism"), vocabulary.legacy_mechanisms, what="mechanism"
            ),
            mechanism_detail=p.opt_string(
                d.get("mechanism_detail"),
                p.at(path, "mechanism_detail"),
                max_len=bound("mechanism_detail", 1024),
            ),
        )


def repo_json(repo: RepoIdentity | None) -> str:
    """The JSON text of a repo (or ``null``): compact and canonical alike (its keys sort)."""
    return "null" if repo is None else f'{{"value":{_e(repo.value)},"version":{_e(repo.version)}}}'


def requirement_json(requirement: ModelRequirement | None) -> str:
    """The JSON text of a requirement (or ``null``): compact and canonical alike."""
    if requirement is None:
        return "null"
    return f'{{"kind":{_e(requirement.kind)},"value":{_e(requirement.value)}}}'


def question_texts(
    requirement: ModelRequirement | None,
    principal: str | None,
    repo_class: str | None,
    face: str,
    role: str | None,
) -> tuple[str, str]:
    """The canonical text of a context's question members (all but its accounts and legacy
    route) before and after its repo's text (:func:`repo_json`): the id's question piece
    (:func:`.ids.id_question`) is ``before + repo_json(repo) + after``."""
    return (
        f'"model_requirement":{requirement_json(requirement)},'
        f'"principal_id":{"null" if principal is None else _e(principal)},"repo":',
        f',"repo_class":{"null" if repo_class is None else _e(repo_class)},'
        f'"request_face":{_e(face)},"role":{"null" if role is None else _e(role)}}},',
    )


def legacy_texts(legacy: LegacyRoute | None) -> tuple[str, str]:
    """The canonical and the compact JSON text of a legacy route (or ``null``)."""
    if legacy is None:
        return ("null", "null")
    return (legacy.canonical_json(), legacy.display_json())


def accounts_texts(accounts: tuple[Account, ...]) -> tuple[str, str]:
    """The canonical and the compact JSON text of an account list."""
    return (
        f"[{','.join([a.canonical_json() for a in accounts])}]",
        f"[{','.join([a.display_json() for a in accounts])}]",
    )


def id_head(account_id: str | None, accounts: str, legacy: str) -> str:
    """The RFC 8785 text of an id preimage up to its context's ``model_requirement`` member:
    its account id, then the context's ``accounts`` (its entries' canonical texts joined with
    commas) and ``legacy_route`` (its canonical text, or ``null``), trailing comma included.

    ``id_head + id_question + id_tail`` is the preimage :func:`.ids.decision_id` hashes when there
    is nothing to redact; a batch hashes each distinct head once and carries on from a copy of
    the hash's state (the resolver's fast path; the tests check the three make the preimage).
    """
    return (
        f'{{"account_id":{_s(account_id)},"context":{{"accounts":[{accounts}],'
        f'"legacy_route":{legacy},'
    )


def id_tail(
    effective_model: str | None,
    outcome: str,
    policy_id: str | None,
    policy_revision: int,
    reason: str,
    snapshot_hash: str,
    snapshot_state: str,
) -> str:
    """The RFC 8785 text of an id preimage after its context, closing brace included."""
    return (
        f'"effective_model":{_s(effective_model)},"outcome":{_e(outcome)},'
        f'"policy_id":{_s(policy_id)}'
    ) + id_tail_end(policy_revision, reason, snapshot_hash, snapshot_state)


def id_tail_end(policy_revision: int, reason: str, snapshot_hash: str, snapshot_state: str) -> str:
    """The end of :func:`id_tail` after the policy id: what a batch's decisions share most."""
    return (
        f',"policy_revision":{policy_revision},"reason":{_e(reason)},'
        f'"snapshot_hash":{_e(snapshot_hash)},"snapshot_state":{_e(snapshot_state)}}}'
    )
