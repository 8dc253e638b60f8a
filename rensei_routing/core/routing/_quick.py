"""The line reader (:func:`quick_line`): a JSON Lines line in the form ``to_dict`` writes, read
into its context without building its dicts, with the per-reader :class:`Pieces` memo; and the
same for a context's canonical text as the audit log stores it (:func:`quick_stored`). Pure: no
I/O.

It accepts only what the general reader accepts and builds the equal value; anything it is not
sure of (a wrong type, a bound crossed, an unknown name, a line in another form) returns ``None``,
and the caller takes the general path, which raises the exact error naming the field path. So an
error reads the same whichever path saw it first; the tests compare the readers on generated
documents and lines, valid and not.

The quick reader of documents is :func:`.context.quick_context` (``RouteContext.from_dict``'s
common case), over the members' quick readers (:mod:`._quick_members`); this module imports both
and re-exports ``quick_context``, ``Memo`` and ``MEMO_LIMIT``, the names batch readers take from
here with the line reader.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .._parse import STRICT_DECODER
from ..canonical import json_string as _s
from ._quick_members import (
    MEMO_LIMIT,
    Memo,
    NotQuick,
    quick_accounts,
    quick_choice,
    quick_legacy,
    quick_repo,
    quick_requirement,
    quick_text,
)
from .context import (
    CONTEXT_FIELDS,
    RouteContext,
    context_canonical,
    context_display,
    context_with_texts,
    quick_context,
)
from .members import MAX_ID, accounts_texts, legacy_texts, repo_json, requirement_json
from .vocabulary import Vocabulary

__all__ = [
    "MEMO_LIMIT",
    "PIECES_LIMIT",
    "Memo",
    "Pieces",
    "quick_context",
    "quick_line",
    "quick_stored",
]

# -- whole lines -------------------------------------------------------------------------------

#: A JSON string holding no escape, quote or control character: its text is its value.
_STRING: Final = r'"([^"\\\x00-\x1f]*)"'
#: ``null`` (the group is ``None``) or such a string.
_OPTIONAL_STRING: Final = rf"(?:null|{_STRING})"
#: ``null``, or an object with no brace inside it (so it ends at the first ``}``), whose text
#: the strict decoder reads on first sight (duplicate keys and all).
_FLAT_OBJECT: Final = r"(null|\{[^{}]*\})"
#: The line head's looser forms of those two, each scanned with one character test (a
#: character class is a test per member for every character): a string's text runs to the
#: next quote, an escape or control character in it refused by its strings piece
#: (:func:`_strings_piece`, once per distinct piece); an object runs to its first ``}``, and
#: one with a ``{`` inside is read by the strict decoder as the general reader reads that
#: member (nested, it is left open there and refused).
_LINE_STRING: Final = r'"([^"]*)"'
_LINE_OPTIONAL_STRING: Final = rf"(?:null|{_LINE_STRING})"
_LINE_OBJECT: Final = r"(null|\{[^}]*\})"
_HEAD_FIELDS: Final = {
    "repo": _LINE_OBJECT,
    "repo_class": _LINE_OPTIONAL_STRING,
    "principal_id": _LINE_OPTIONAL_STRING,
    "role": _LINE_OPTIONAL_STRING,
    "model_requirement": _LINE_OBJECT,
    "request_face": _LINE_STRING,
    "legacy_route": _LINE_OBJECT,
}
if (*_HEAD_FIELDS, "accounts") != CONTEXT_FIELDS:  # pragma: no cover - a guard at import
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
    """The strict decoder's value of ``text`` (one whole JSON value), else :class:`NotQuick`."""
    try:
        return STRICT_DECODER.decode(text)
    except (ValueError, RecursionError):  # not JSON, a duplicate key, nested too deeply
        raise NotQuick from None


def _keep(table: dict[Any, tuple[Any, ...]], key: Any, value: tuple[Any, ...]) -> Any:
    if type(key) is not str or len(key) <= _PIECE_TEXT_LIMIT:
        if len(table) >= PIECES_LIMIT:
            table.clear()
        table[key] = value
    return value


def _repo_piece(raw: str, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    repo = quick_repo(_json(raw), memo)
    text = repo_json(repo)
    return (repo, text, text)


def _requirement_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    requirement = quick_requirement(_json(raw), vocabulary, memo)
    text = requirement_json(requirement)
    return (requirement, text, text)


def _legacy_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    if raw == "null":
        return _NULL_PIECE
    legacy = quick_legacy(_json(raw), vocabulary, memo)
    return (legacy, *legacy_texts(legacy))


def _accounts_piece(raw: str, vocabulary: Vocabulary, memo: Memo) -> tuple[Any, ...]:
    accounts = quick_accounts(_json(raw), vocabulary, memo)
    return (accounts, *accounts_texts(accounts))


#: A JSON string's text that is its own value: no quote, escape or control character.
_PLAIN_TEXT: Final = re.compile(r'[^"\\\x00-\x1f]*')


def _strings_piece(
    principal_raw: str | None,
    role_raw: str | None,
    class_raw: str | None,
    face_raw: str,
    vocabulary: Vocabulary,
) -> tuple[Any, ...]:
    """``quick_context``'s principal, role, repo class and request face, and their texts;
    each raw text must be a JSON string's whole value (no escape or control character)."""
    for raw in (principal_raw, role_raw, class_raw, face_raw):
        if raw is not None and _PLAIN_TEXT.fullmatch(raw) is None:
            raise NotQuick
    principal = None if principal_raw is None else quick_text(principal_raw, MAX_ID)
    role = vocabulary.canonical_worker_role(
        principal if role_raw is None else quick_text(role_raw, MAX_ID)
    )
    repo_class = None if class_raw is None else quick_choice(class_raw, vocabulary.repo_classes)
    face = quick_choice(face_raw, vocabulary.request_faces)
    return (principal, role, repo_class, face, _s(principal), _s(role), _s(repo_class), _s(face))


def quick_line(
    line: str, vocabulary: Vocabulary, memo: Memo, pieces: Pieces
) -> RouteContext | None:
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
    try:
        strings = _strings(pieces, (principal_raw, role_raw, class_raw, face_raw), vocabulary)
    except NotQuick:
        return None
    return _assemble(
        repo_raw,
        requirement_raw,
        legacy_raw,
        line[head.end() : end],
        strings,
        vocabulary,
        memo,
        pieces,
    )


#: A context's RFC 8785 text (keys sorted: how the audit log stores one, in full or in a compact
#: explanation's form, which leaves default members out of accounts and the legacy route), with
#: an accounts array holding no bracket. Every other text is read by the general path.
_STORED: Final = re.compile(
    rf'\{{"accounts":(\[[^\[\]]*\]),"legacy_route":{_FLAT_OBJECT},'
    rf'"model_requirement":{_FLAT_OBJECT},"principal_id":{_OPTIONAL_STRING},'
    rf'"repo":{_FLAT_OBJECT},"repo_class":{_OPTIONAL_STRING},"request_face":{_STRING},'
    rf'"role":{_OPTIONAL_STRING}\}}'
)


def quick_stored(
    text: str, vocabulary: Vocabulary, memo: Memo, pieces: Pieces
) -> RouteContext | None:
    """:func:`quick_line` for a context's canonical text (a stored record's, say): the context
    ``quick_context(json.loads(text))`` reads, or ``None`` (the caller takes the other paths).
    The same pieces, looked up by their exact text, as the line reader's."""
    found = _STORED.fullmatch(text)
    if found is None:
        return None
    (
        accounts_raw,
        legacy_raw,
        requirement_raw,
        principal_raw,
        repo_raw,
        class_raw,
        face_raw,
        role_raw,
    ) = found.groups()
    try:
        if role_raw is None or principal_raw is None:
            strings = _strings(pieces, (principal_raw, role_raw, class_raw, face_raw), vocabulary)
        else:
            # A stored role is read on its own (the principal names it only when it is null),
            # so the other strings are one piece however many principals a chain holds.
            others = _strings(pieces, (None, role_raw, class_raw, face_raw), vocabulary)
            principal = quick_text(principal_raw, MAX_ID)
            strings = (principal, *others[1:4], _s(principal), *others[5:])
    except NotQuick:
        return None
    return _assemble(
        repo_raw, requirement_raw, legacy_raw, accounts_raw, strings, vocabulary, memo, pieces
    )


def _strings(
    pieces: Pieces, key: tuple[str | None, str | None, str | None, str], vocabulary: Vocabulary
) -> tuple[Any, ...]:
    """The strings piece of ``key`` (principal, role, repo class and request face as raw).

    Raises:
        NotQuick: one of them is not quick.
    """
    return pieces.strings.get(key) or _keep(pieces.strings, key, _strings_piece(*key, vocabulary))


def _assemble(
    repo_raw: str,
    requirement_raw: str,
    legacy_raw: str,
    accounts_raw: str,
    strings: tuple[Any, ...],
    vocabulary: Vocabulary,
    memo: Memo,
    pieces: Pieces,
) -> RouteContext | None:
    """The context of a text's raw pieces, each looked up in ``pieces`` by its text, and its
    strings piece; ``None`` when a piece is not quick."""
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
    except NotQuick:
        return None
    principal, role, repo_class, face, principal_text, role_text, class_text, face_text = strings
    return context_with_texts(
        repo[0],
        repo_class,
        principal,
        role,
        requirement[0],
        face,
        legacy[0],
        accounts[0],
        context_canonical(
            accounts[1],
            legacy[1],
            requirement[1],
            principal_text,
            repo[1],
            class_text,
            face_text,
            role_text,
        ),
        context_display(
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
