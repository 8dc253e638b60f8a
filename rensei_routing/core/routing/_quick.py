"""The quick readers of well-formed context documents: :meth:`RouteContext.from_dict`'s common
case without building a field path per value, and (:func:`quick_line`) a JSON Lines line in
the form ``to_dict`` writes, without building its dicts. Pure: no I/O.

They accept only what the general reader accepts and build the equal value; anything they are
not sure of (a wrong type, a bound crossed, an unknown name, a redacted read, a line in another
form) returns ``None``, and the caller takes the general path, which raises the exact error
naming the field path. So an error reads the same whichever path saw it first; the tests
compare the readers on generated documents and lines, valid and not.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .._parse import STRICT_DECODER
from ..canonical import json_string as _s
from . import context as c
from .vocabulary import CAPABILITY, CONCRETE_MODEL, LITERAL_FAMILY, REQUIREMENT_KINDS, Vocabulary

__all__ = ["MEMO_LIMIT", "PIECES_LIMIT", "Memo", "Pieces", "quick_context", "quick_line"]

#: The same fields as the general reader: a document with any other key takes that path.
_CONTEXT_KEYS: Final = frozenset(c.CONTEXT_FIELDS)
_ACCOUNT_KEYS: Final = frozenset(
    ("account_id", "provider_binding", "configured", "administrative_state")
)
_LEGACY_KEYS: Final = frozenset(
    ("provider_binding", "account_id", "model", "mechanism", "mechanism_detail")
)
_REPO_KEYS: Final = frozenset(("value", "version"))
_REQUIREMENT_KEYS: Final = frozenset(("kind", "value"))
_VERSIONS: Final = frozenset((c.CANONICAL, c.LEGACY_LOSSY))
_MAX_ID: Final = 256
_ABSENT: Final = object()


class _No(Exception):
    """Not the quick case: take the general path."""


def _no() -> Any:
    raise _No


def _text(value: Any, max_len: int) -> str:
    """``_parse.string`` (stripped) for a value it accepts, else :class:`_No`."""
    if type(value) is not str:
        raise _No
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _No from None
    text = value.strip()
    if not 1 <= len(text) <= max_len:
        raise _No
    return text


def _verbatim(value: Any, max_len: int) -> str:
    """``_parse.string(..., verbatim=True)``."""
    if type(value) is not str or not 1 <= len(value) <= max_len:
        raise _No
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _No from None
    return value


def _choice(value: Any, allowed: Any) -> str:
    """``_parse.choice``."""
    text = _text(value, 256).lower()
    if text not in allowed:
        raise _No
    return text


def _repo(value: Any) -> c.RepoIdentity:
    if type(value) is str:
        text = _text(value, _MAX_ID)
        canonical = c.canonicalize_repo(text)
        if canonical is not None:
            return c.RepoIdentity(value=canonical, version=c.CANONICAL)
        return c.RepoIdentity.from_runtime_slug(text)
    if type(value) is not dict or "value" not in value or not value.keys() <= _REPO_KEYS:
        raise _No
    text = _text(value["value"], _MAX_ID)
    version = _choice(value.get("version", c.CANONICAL), _VERSIONS)
    if version == c.LEGACY_LOSSY:
        return c.RepoIdentity.from_runtime_slug(text)
    canonical = c.canonicalize_repo(text)
    if canonical is None:
        raise _No
    return c.RepoIdentity(value=canonical, version=c.CANONICAL)


def _repo_memo(value: Any, memo: Memo) -> c.RepoIdentity:
    if type(value) is str:
        key: tuple[Any, ...] = ("repo", value)
    elif type(value) is dict and "value" in value and value.keys() <= _REPO_KEYS:
        key = ("repo", value["value"], value.get("version", c.CANONICAL))
    else:
        raise _No
    repo = _recall(memo, key)
    if repo is None:
        repo = _remember_new(memo, key, _repo(value))
    assert isinstance(repo, c.RepoIdentity)
    return repo


def _requirement_memo(value: Any, vocabulary: Vocabulary, memo: Memo) -> c.ModelRequirement:
    if type(value) is dict and value.keys() == _REQUIREMENT_KEYS:
        key: tuple[Any, ...] = ("requirement", value["kind"], value["value"])
    elif type(value) is str:
        key = ("requirement", value)
    else:
        raise _No
    requirement = _recall(memo, key)
    if requirement is None:
        requirement = _remember_new(memo, key, _requirement(value, vocabulary))
    assert isinstance(requirement, c.ModelRequirement)
    return requirement


def _requirement(value: Any, vocabulary: Vocabulary) -> c.ModelRequirement:
    if type(value) is str:
        text = _text(value, 64)
        lowered = text.lower()
        if lowered in vocabulary.literal_families:
            return c.ModelRequirement(kind=LITERAL_FAMILY, value=lowered)
        if lowered in vocabulary.capability_classes:
            return c.ModelRequirement(kind=CAPABILITY, value=lowered)
        return c.ModelRequirement(kind=CONCRETE_MODEL, value=text)
    if type(value) is not dict or value.keys() != _REQUIREMENT_KEYS:
        raise _No
    kind = _choice(value["kind"], REQUIREMENT_KINDS)
    if kind == LITERAL_FAMILY:
        text = _choice(value["value"], vocabulary.literal_families)
    elif kind == CAPABILITY:
        text = _choice(value["value"], vocabulary.capability_classes)
    else:
        text = _text(value["value"], 64)
    return c.ModelRequirement(kind=kind, value=text)


def _legacy(value: Any, vocabulary: Vocabulary, memo: Memo) -> c.LegacyRoute:
    if (
        type(value) is not dict
        or "provider_binding" not in value
        or not value.keys() <= _LEGACY_KEYS
    ):
        raise _No
    get = value.get
    account, model = get("account_id"), get("model")
    mechanism, detail = get("mechanism"), get("mechanism_detail")
    key = ("legacy", value["provider_binding"], account, model, mechanism, detail)
    legacy = _recall(memo, key)
    if legacy is None:
        legacy = _remember_new(memo, key, _legacy_new(value, vocabulary))
    assert isinstance(legacy, c.LegacyRoute)
    return legacy


def _remember_new(memo: Memo, key: tuple[Any, ...], value: Any) -> Any:
    _remember(memo, key, value)
    return value


def _legacy_new(value: dict[str, Any], vocabulary: Vocabulary) -> c.LegacyRoute:
    get = value.get
    account, model = get("account_id"), get("model")
    mechanism, detail = get("mechanism"), get("mechanism_detail")
    return c.LegacyRoute(
        provider_binding=_verbatim(value["provider_binding"], 64),
        account_id=None if account is None else _verbatim(account, _MAX_ID),
        model=None if model is None else _verbatim(model, 256),
        mechanism=None if mechanism is None else _choice(mechanism, vocabulary.legacy_mechanisms),
        mechanism_detail=None if detail is None else _text(detail, 1024),
    )


def _accounts(value: Any, vocabulary: Vocabulary, memo: Memo) -> tuple[c.Account, ...]:
    if type(value) is not list:
        raise _No
    bindings, states = vocabulary.provider_bindings, vocabulary.administrative_states
    out = []
    for entry in value:
        if (
            type(entry) is not dict
            or "account_id" not in entry
            or "provider_binding" not in entry
            or not entry.keys() <= _ACCOUNT_KEYS
        ):
            raise _No
        configured = entry.get("configured", True)
        if type(configured) is not bool:  # before the memo: True == 1 as a key
            raise _No
        account_id, binding = entry["account_id"], entry["provider_binding"]
        state = entry.get("administrative_state", "active")
        key = ("account", account_id, binding, configured, state)
        account = _recall(memo, key)
        if account is None:
            account = c.Account(
                account_id=_text(account_id, _MAX_ID),
                provider_binding=_choice(binding, bindings),
                configured=configured,
                administrative_state=_choice(state, states),
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
        raise _No from None


def _remember(memo: Memo, key: tuple[Any, ...], value: Any) -> None:
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def quick_context(
    data: Any, vocabulary: Vocabulary, memo: Memo | None = None
) -> c.RouteContext | None:
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
            principal = _text(principal, _MAX_ID)
        role_in = get("role")
        role = vocabulary.canonical_worker_role(
            principal if role_in is None else _text(role_in, _MAX_ID)
        )
        repo, repo_class = get("repo"), get("repo_class")
        requirement, legacy = get("model_requirement"), get("legacy_route")
        accounts = get("accounts", _ABSENT)
        face = get("request_face", "unknown")
        # request_face and repo_class: strings (checked first: a memo key must be one)
        face_key = ("face", face if type(face) is str else _no())
        known_face = memo.get(face_key)
        if known_face is None:
            known_face = _remember_new(memo, face_key, _choice(face, vocabulary.request_faces))
        if repo_class is not None:
            class_key = ("class", repo_class if type(repo_class) is str else _no())
            known_class = memo.get(class_key)
            if known_class is None:
                known_class = _remember_new(
                    memo, class_key, _choice(repo_class, vocabulary.repo_classes)
                )
            repo_class = known_class
        return c.RouteContext(
            repo=None if repo is None else _repo_memo(repo, memo),
            repo_class=repo_class,
            principal_id=principal,
            role=role,
            model_requirement=None
            if requirement is None
            else _requirement_memo(requirement, vocabulary, memo),
            request_face=known_face,
            legacy_route=None if legacy is None else _legacy(legacy, vocabulary, memo),
            accounts=() if accounts is _ABSENT else _accounts(accounts, vocabulary, memo),
        )
    except _No:
        return None


# -- whole lines -------------------------------------------------------------------------------

#: A JSON string holding no escape, quote or control character: its text is its value.
_STRING: Final = r'"([^"\\\x00-\x1f]*)"'
#: ``null`` (the group is ``None``) or such a string.
_OPTIONAL_STRING: Final = rf"(?:null|{_STRING})"
#: ``null``, or an object with no brace inside it (so it ends at the first ``}``), whose text
#: the strict decoder reads on first sight (duplicate keys and all).
_FLAT_OBJECT: Final = r"(null|\{[^{}]*\})"
_HEAD_FIELDS: Final = {
    "repo": _FLAT_OBJECT,
    "repo_class": _OPTIONAL_STRING,
    "principal_id": _OPTIONAL_STRING,
    "role": _OPTIONAL_STRING,
    "model_requirement": _FLAT_OBJECT,
    "request_face": _STRING,
    "legacy_route": _FLAT_OBJECT,
}
if (*_HEAD_FIELDS, "accounts") != c.CONTEXT_FIELDS:  # pragma: no cover - a guard at import
    raise ImportError("the line reader's fields are not RouteContext.to_dict's")
#: A line as ``json.dumps(ctx.to_dict())`` writes it (every field, in ``to_dict``'s order,
#: compact or with the default separators), up to the accounts array, which runs to the
#: line's last ``}``. Every other line is read by the general path.
_LINE_HEAD: Final = re.compile(
    r"\{"
    + ", ?".join(f'"{name}": ?{pattern}' for name, pattern in _HEAD_FIELDS.items())
    + ', ?"accounts": ?'
)


class Pieces:
    """The line reader's memo (one per reader of one vocabulary, beside a :data:`Memo`): the
    raw text of a piece of a line (an object's JSON text; the four short strings together) ->
    its value and the JSON text the encoders write for it, one table per kind of piece. Keyed
    by exact text, so equal keys read alike. Bounded: a table is cleared when it reaches
    :data:`PIECES_LIMIT` entries, and a text longer than a few kilobytes is not remembered."""

    __slots__ = ("accounts", "legacy", "repo", "requirement", "strings")

    def __init__(self) -> None:
        self.repo: dict[str, tuple[Any, ...]] = {}
        self.requirement: dict[str, tuple[Any, ...]] = {}
        self.legacy: dict[str, tuple[Any, ...]] = {}
        self.accounts: dict[str, tuple[Any, ...]] = {}
        self.strings: dict[tuple[str | None, ...], tuple[Any, ...]] = {}


#: Entries a table of a piece memo holds before it starts again.
PIECES_LIMIT: Final = 4_096
#: The longest piece text remembered (a longer one, a long account list, is read every time),
#: which bounds the memo at a few tens of megabytes.
_PIECE_TEXT_LIMIT: Final = 2_048
_NULL_PIECE: Final = (None, "null", "null")


def _json(text: str) -> Any:
    """The strict decoder's value of ``text`` (one whole JSON value), else :class:`_No`."""
    try:
        return STRICT_DECODER.decode(text)
    except (ValueError, RecursionError):  # not JSON, a duplicate key, nested too deeply
        raise _No from None


def _keep(table: dict[Any, tuple[Any, ...]], key: Any, value: tuple[Any, ...]) -> Any:
    if type(key) is not str or len(key) <= _PIECE_TEXT_LIMIT:
        if len(table) >= PIECES_LIMIT:
            table.clear()
        table[key] = value
    return value


def _repo_piece(raw: str, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    repo = _repo_memo(_json(raw), memo)
    text = c.repo_json(repo)
    return (repo, text, text)


def _requirement_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    requirement = _requirement_memo(_json(raw), vocabulary, memo)
    text = c.requirement_json(requirement)
    return (requirement, text, text)


def _legacy_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    legacy = _legacy(_json(raw), vocabulary, memo)
    return (legacy, *c.legacy_texts(legacy))


def _accounts_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    accounts = _accounts(_json(raw), vocabulary, memo)
    return (accounts, *c.accounts_texts(accounts))


def _strings_piece(
    principal_raw: str | None,
    role_raw: str | None,
    class_raw: str | None,
    face_raw: str,
    vocabulary: Vocabulary,
) -> tuple[Any, ...]:
    """``quick_context``'s principal, role, repo class and request face, and their texts."""
    principal = None if principal_raw is None else _text(principal_raw, _MAX_ID)
    role = vocabulary.canonical_worker_role(
        principal if role_raw is None else _text(role_raw, _MAX_ID)
    )
    repo_class = None if class_raw is None else _choice(class_raw, vocabulary.repo_classes)
    face = _choice(face_raw, vocabulary.request_faces)
    return (principal, role, repo_class, face, _s(principal), _s(role), _s(repo_class), _s(face))


def quick_line(
    line: str, vocabulary: Vocabulary, memo: Memo, pieces: Pieces
) -> c.RouteContext | None:
    """The context the general reader reads from ``line`` (one JSON Lines line, its ``\\n``
    included or not), when the line is in the form ``json.dumps(ctx.to_dict())`` writes and
    plain and valid; ``None`` otherwise (the caller parses the line and takes the other paths).

    Only the line's head is matched, by a pattern whose every string is its own text; each
    object in it, and the accounts array after it, is looked up by its exact text, and read
    by the strict decoder and the quick reader's pieces the first time it is seen. So the
    value is the one ``quick_context(json.loads(line))`` reads, and duplicate keys are refused
    as the strict decoder refuses them. The context comes with its canonical and compact
    texts, built from its pieces' (which the memo keeps).
    """
    head = _LINE_HEAD.match(line)
    if head is None:
        return None
    end = len(line) - 1
    if line[end:] == "\n":
        end -= 1
    if end < 0 or line[end] != "}":
        return None
    repo_raw, class_raw, principal_raw, role_raw, requirement_raw, face_raw, legacy_raw = (
        head.groups()
    )
    accounts_raw = line[head.end() : end]
    try:
        table = pieces.repo
        repo = table.get(repo_raw) or _keep(table, repo_raw, _repo_piece(repo_raw, memo))
        table = pieces.requirement
        requirement = table.get(requirement_raw) or _keep(
            table, requirement_raw, _requirement_piece(requirement_raw, vocabulary, memo)
        )
        table = pieces.legacy
        legacy = table.get(legacy_raw) or _keep(
            table, legacy_raw, _legacy_piece(legacy_raw, vocabulary, memo)
        )
        table = pieces.accounts
        accounts = table.get(accounts_raw) or _keep(
            table, accounts_raw, _accounts_piece(accounts_raw, vocabulary, memo)
        )
        key = (principal_raw, role_raw, class_raw, face_raw)
        strings = pieces.strings.get(key) or _keep(
            pieces.strings,
            key,
            _strings_piece(principal_raw, role_raw, class_raw, face_raw, vocabulary),
        )
    except _No:
        return None
    principal, role, repo_class, face, principal_text, role_text, class_text, face_text = strings
    return c.context_with_texts(
        repo[0],
        repo_class,
        principal,
        role,
        requirement[0],
        face,
        legacy[0],
        accounts[0],
        c.context_canonical(
            accounts[1],
            legacy[1],
            requirement[1],
            principal_text,
            repo[1],
            class_text,
            face_text,
            role_text,
        ),
        c.context_display(
            repo[1],
            class_text,
            principal_text,
            role_text,
            requirement[1],
            face_text,
            legacy[2],
            accounts[2],
        ),
    )
