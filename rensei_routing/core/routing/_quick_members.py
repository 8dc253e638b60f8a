"""The quick readers of a context's members (:mod:`.members`): each accepts only what the general
reader accepts, builds the equal value, and raises :class:`NotQuick` for anything it is not sure
of, so the caller takes the general path, which raises the exact error naming the field path;
and the per-reader :data:`Memo` that lets repeated pieces be read once.

Pure: no I/O. Builds no context and must not import :mod:`.context`, which assembles these into
``quick_context`` (and :mod:`._quick` into ``quick_line``).
"""

from __future__ import annotations

from typing import Any, Final

from . import members as c
from .members import MAX_ID
from .vocabulary import CAPABILITY, CONCRETE_MODEL, LITERAL_FAMILY, REQUIREMENT_KINDS, Vocabulary

__all__ = ["MEMO_LIMIT", "Memo", "NotQuick"]

_ACCOUNT_KEYS: Final = frozenset(
    ("account_id", "provider_binding", "configured", "administrative_state")
)
_LEGACY_KEYS: Final = frozenset(
    ("provider_binding", "account_id", "model", "mechanism", "mechanism_detail")
)
_REPO_KEYS: Final = frozenset(("value", "version"))
_REQUIREMENT_KEYS: Final = frozenset(("kind", "value"))
_VERSIONS: Final = frozenset((c.CANONICAL, c.LEGACY_LOSSY))


class NotQuick(Exception):
    """Not the quick case: take the general path."""


def not_quick() -> Any:
    raise NotQuick


def quick_text(value: Any, max_len: int) -> str:
    """``_parse.string`` (stripped) for a value it accepts, else :class:`NotQuick`."""
    if type(value) is not str:
        raise NotQuick
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotQuick from None
    text = value.strip()
    if not 1 <= len(text) <= max_len:
        raise NotQuick
    return text


def _verbatim(value: Any, max_len: int) -> str:
    """``_parse.string(..., verbatim=True)``."""
    if type(value) is not str or not 1 <= len(value) <= max_len:
        raise NotQuick
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotQuick from None
    return value


def quick_choice(value: Any, allowed: Any) -> str:
    """``_parse.choice``."""
    text = quick_text(value, 256).lower()
    if text not in allowed:
        raise NotQuick
    return text


def _repo(value: Any) -> c.RepoIdentity:
    if type(value) is str:
        text = quick_text(value, MAX_ID)
        canonical = c.canonicalize_repo(text)
        if canonical is not None:
            return c.RepoIdentity(value=canonical, version=c.CANONICAL)
        return c.RepoIdentity.from_runtime_slug(text)
    if type(value) is not dict or "value" not in value or not value.keys() <= _REPO_KEYS:
        raise NotQuick
    text = quick_text(value["value"], MAX_ID)
    version = quick_choice(value.get("version", c.CANONICAL), _VERSIONS)
    if version == c.LEGACY_LOSSY:
        return c.RepoIdentity.from_runtime_slug(text)
    canonical = c.canonicalize_repo(text)
    if canonical is None:
        raise NotQuick
    return c.RepoIdentity(value=canonical, version=c.CANONICAL)


def quick_repo(value: Any, memo: Memo) -> c.RepoIdentity:
    if type(value) is str:
        key: tuple[Any, ...] = ("repo", value)
    elif type(value) is dict and "value" in value and value.keys() <= _REPO_KEYS:
        key = ("repo", value["value"], value.get("version", c.CANONICAL))
    else:
        raise NotQuick
    repo = _recall(memo, key)
    if repo is None:
        repo = remember_new(memo, key, _repo(value))
    assert isinstance(repo, c.RepoIdentity)
    return repo


def quick_requirement(value: Any, vocabulary: Vocabulary, memo: Memo) -> c.ModelRequirement:
    if type(value) is dict and value.keys() == _REQUIREMENT_KEYS:
        key: tuple[Any, ...] = ("requirement", value["kind"], value["value"])
    elif type(value) is str:
        key = ("requirement", value)
    else:
        raise NotQuick
    requirement = _recall(memo, key)
    if requirement is None:
        requirement = remember_new(memo, key, _requirement(value, vocabulary))
    assert isinstance(requirement, c.ModelRequirement)
    return requirement


def _requirement(value: Any, vocabulary: Vocabulary) -> c.ModelRequirement:
    if type(value) is str:
        text = quick_text(value, 64)
        lowered = text.lower()
        if lowered in vocabulary.literal_families:
            return c.ModelRequirement(kind=LITERAL_FAMILY, value=lowered)
        if lowered in vocabulary.capability_classes:
            return c.ModelRequirement(kind=CAPABILITY, value=lowered)
        return c.ModelRequirement(kind=CONCRETE_MODEL, value=text)
    if type(value) is not dict or value.keys() != _REQUIREMENT_KEYS:
        raise NotQuick
    kind = quick_choice(value["kind"], REQUIREMENT_KINDS)
    if kind == LITERAL_FAMILY:
        text = quick_choice(value["value"], vocabulary.literal_families)
    elif kind == CAPABILITY:
        text = quick_choice(value["value"], vocabulary.capability_classes)
    else:
        text = quick_text(value["value"], 64)
    return c.ModelRequirement(kind=kind, value=text)


def quick_legacy(value: Any, vocabulary: Vocabulary, memo: Memo) -> c.LegacyRoute:
    if (
        type(value) is not dict
        or "provider_binding" not in value
        or not value.keys() <= _LEGACY_KEYS
    ):
        raise NotQuick
    get = value.get
    account, model = get("account_id"), get("model")
    mechanism, detail = get("mechanism"), get("mechanism_detail")
    key = ("legacy", value["provider_binding"], account, model, mechanism, detail)
    legacy = _recall(memo, key)
    if legacy is None:
        legacy = remember_new(memo, key, _legacy_new(value, vocabulary))
    assert isinstance(legacy, c.LegacyRoute)
    return legacy


def remember_new(memo: Memo, key: tuple[Any, ...], value: Any) -> Any:
    _remember(memo, key, value)
    return value


def _legacy_new(value: dict[str, Any], vocabulary: Vocabulary) -> c.LegacyRoute:
    get = value.get
    account, model = get("account_id"), get("model")
    mechanism, detail = get("mechanism"), get("mechanism_detail")
    return c.LegacyRoute(
        provider_binding=_verbatim(value["provider_binding"], 64),
        account_id=None if account is None else _verbatim(account, MAX_ID),
        model=None if model is None else _verbatim(model, 256),
        mechanism=None
        if mechanism is None
        else quick_choice(mechanism, vocabulary.legacy_mechanisms),
        mechanism_detail=None if detail is None else quick_text(detail, 1024),
    )


def quick_accounts(value: Any, vocabulary: Vocabulary, memo: Memo) -> tuple[c.Account, ...]:
    if type(value) is not list:
        raise NotQuick
    bindings, states = vocabulary.provider_bindings, vocabulary.administrative_states
    out = []
    for entry in value:
        if (
            type(entry) is not dict
            or "account_id" not in entry
            or "provider_binding" not in entry
            or not entry.keys() <= _ACCOUNT_KEYS
        ):
            raise NotQuick
        configured = entry.get("configured", True)
        if type(configured) is not bool:  # before the memo: True == 1 as a key
            raise NotQuick
        account_id, binding = entry["account_id"], entry["provider_binding"]
        state = entry.get("administrative_state", "active")
        key = ("account", account_id, binding, configured, state)
        account = _recall(memo, key)
        if account is None:
            account = c.Account(
                account_id=quick_text(account_id, MAX_ID),
                provider_binding=quick_choice(binding, bindings),
                configured=configured,
                administrative_state=quick_choice(state, states),
            )
            _remember(memo, key, account)
        out.append(account)
    return tuple(out)


#: A reader's memo of values already read: raw JSON pieces (strings, booleans, ``None``,
#: under a tag) -> the equal frozen value. Only pieces whose every member is a string, a
#: boolean checked to be one, or ``None`` are keys, so two equal keys always read alike.
Memo = dict[tuple[Any, ...], Any]

#: Entries a memo holds before it starts again.
MEMO_LIMIT: Final = 65_536


def _recall(memo: Memo, key: tuple[Any, ...]) -> Any:
    try:
        return memo.get(key)
    except TypeError:  # an unhashable piece (a list, an object): never read quickly
        raise NotQuick from None


def _remember(memo: Memo, key: tuple[Any, ...], value: Any) -> None:
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value
