"""The stored-context reader (``core._quick.quick_stored``): a context's canonical text, as the
audit log stores it (in full, or with a compact explanation's default members left out), is read
piece by piece. Whatever it accepts, the strict decoder and the quick document reader read alike
(the same value, the same canonical and compact texts); anything else it leaves to them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core._parse import STRICT_DECODER
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing._quick import Pieces, quick_context, quick_stored
from rensei_routing.core.routing._quick_members import Memo
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.explanation import compact_context_text
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY

from .strategies import context_dicts

_NASTY = '\x00\x1b\x7f\x85\u2028\u202e\U000e0001"\\{}[]:, \t'
_ODD_TEXT = st.text(
    alphabet=st.sampled_from(_NASTY) | st.characters(codec="utf-8"), min_size=0, max_size=8
)


def _check(text: str, memo: Memo, pieces: Pieces) -> bool:
    """``quick_stored`` agrees with the document readers on ``text``; whether it read it."""
    got = quick_stored(text, DEFAULT_VOCABULARY, memo, pieces)
    if got is None:
        return False
    want = quick_context(STRICT_DECODER.decode(text), DEFAULT_VOCABULARY)
    assert want is not None, text
    assert got == want
    assert got.canonical_text() == canonical_bytes(want.to_dict()).decode("utf-8")
    compact = json.dumps(want.to_dict(), ensure_ascii=False, separators=(",", ":"))
    assert got.display_text() == compact
    return True


def _stored(doc: dict[str, Any], compact: bool) -> str:
    text = RouteContext.from_dict(doc).canonical_text()
    return compact_context_text(text) if compact else text


@settings(max_examples=300, deadline=None)
@given(context_dicts(), st.booleans())
def test_a_stored_context_is_read_quickly_and_alike(doc: dict[str, Any], compact: bool) -> None:
    text = _stored(doc, compact)
    memo: Memo = {}
    pieces = Pieces()
    for _ in range(2):  # the second read goes through both memos
        assert _check(text, memo, pieces)


@st.composite
def _raw_texts(draw: st.DrawFn) -> str:
    """Canonical texts of documents as a person might write them: not normalised, possibly
    invalid, possibly odd text (escapes, brackets, braces, controls)."""
    doc = draw(context_dicts())
    doc["role"] = draw(st.sampled_from([None, "Planner", " reviewer ", "nobody", ""]))
    for key in ("principal_id", "role", "repo_class", "request_face"):
        if draw(st.integers(0, 5)) == 0:
            doc[key] = draw(_ODD_TEXT)
    if isinstance(doc["repo"], str):
        doc["repo"] = {"value": doc["repo"], "version": "canonical"}
    if doc["accounts"] and draw(st.booleans()):
        doc["accounts"][0]["account_id"] = draw(_ODD_TEXT)
    if draw(st.integers(0, 5)) == 0:
        del doc[draw(st.sampled_from(sorted(doc)))]
    return canonical_bytes(doc).decode("utf-8")


@settings(max_examples=500, deadline=None)
@given(st.lists(_raw_texts() | context_dicts().map(lambda d: _stored(d, False)), min_size=1))
def test_raw_texts_read_as_the_document_readers_read_them(texts: list[str]) -> None:
    """One memo across them all: a memo keyed on too little would hand one text another's piece."""
    memo: Memo = {}
    pieces = Pieces()
    for text in texts + texts:
        _check(text, memo, pieces)


_EDITS = st.sampled_from([*'{}[]",: \n\x00a\u2028', "\\", "null", "1", "true", "\\u0041"])


@settings(max_examples=1000, deadline=None)
@given(context_dicts(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), _EDITS)))
def test_no_edit_of_a_stored_context_makes_the_readers_disagree(
    doc: dict[str, Any], edits: list[tuple[int, int, str]]
) -> None:
    text = _stored(doc, compact=True)
    for where, drop, insert in edits:
        at = where % (len(text) + 1)
        text = text[:at] + insert + text[at + drop :]
    try:
        STRICT_DECODER.decode(text)
    except (ValueError, RecursionError):
        assert quick_stored(text, DEFAULT_VOCABULARY, {}, Pieces()) is None
        return
    _check(text, {}, Pieces())


def test_a_duplicate_or_missing_top_level_key_is_left_to_the_general_path() -> None:
    text = _stored({"repo": "acme/widgets", "principal_id": "planner"}, compact=False)
    assert _check(text, {}, Pieces())
    twice = text.replace('"role":"planner"}', '"role":"planner","role":"reviewer"}')
    missing = text.replace('"repo_class":null,', "")
    for other in (twice, missing, text + " ", text[:-1]):
        assert quick_stored(other, DEFAULT_VOCABULARY, {}, Pieces()) is None
