"""The line reader (``core._quick.quick_line``): a JSON Lines line in the form ``to_dict``
writes is read without its dicts. Whatever it accepts, the strict decoder and the context
readers read alike (duplicate keys refused, every bound and name checked), and its canonical
and compact texts are the encoders'; anything else it leaves to them (``None``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rensei_routing.core.routing._quick as quick
from rensei_routing.cli._inputs import read_context_lines
from rensei_routing.core._parse import STRICT_DECODER
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing._quick import Pieces, quick_line
from rensei_routing.core.routing._quick_members import Memo
from rensei_routing.core.routing.context import CONTEXT_FIELDS, RouteContext
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.errors import InputError, MalformedError, RenseiRoutingError

from .strategies import context_dicts

_NASTY = '\x00\x1b\x7f\x85\u2028\u202e\U000e0001"\\{}[]:, \t'
_ODD_TEXT = st.text(
    alphabet=st.sampled_from(_NASTY) | st.characters(codec="utf-8"), min_size=0, max_size=8
)


def _reference(line: str) -> RouteContext | Exception:
    """What the general path reads from ``line``: the strict decoder, then ``from_dict``."""
    try:
        doc = STRICT_DECODER.decode(line)
    except (ValueError, RecursionError) as e:
        return e
    try:
        return RouteContext.from_dict(doc)
    except MalformedError as e:
        return e


def _check(line: str, memo: Memo, pieces: Pieces) -> bool:
    """``quick_line`` agrees with the general path on ``line``; whether it read it."""
    got = quick_line(line, DEFAULT_VOCABULARY, memo, pieces)
    if got is None:
        return False
    want = _reference(line)
    assert isinstance(want, RouteContext), (line, want)
    assert got == want
    assert got.canonical_text() == canonical_bytes(want.to_dict()).decode("utf-8")
    compact = json.dumps(want.to_dict(), ensure_ascii=False, separators=(",", ":"))
    assert got.display_text() == compact
    return True


def _line(doc: dict[str, Any], compact: bool) -> str:
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(doc, ensure_ascii=False, separators=separators)


def _to_dict_line(doc: dict[str, Any]) -> str:
    return _line(RouteContext.from_dict(doc).to_dict(), compact=True)


@settings(max_examples=300, deadline=None)
@given(context_dicts(), st.booleans())
def test_a_line_as_to_dict_writes_it_is_read_quickly_and_alike(
    doc: dict[str, Any], compact: bool
) -> None:
    ctx = RouteContext.from_dict(doc)
    line = _line(ctx.to_dict(), compact) + "\n"
    memo: Memo = {}
    pieces = Pieces()
    for _ in range(2):  # the second read goes through both memos
        assert _check(line, memo, pieces)


@st.composite
def _raw_lines(draw: st.DrawFn) -> str:
    """Lines in ``to_dict``'s key order whose values are as a person might write them: not
    normalised (case, spaces, a role or none), possibly invalid, possibly odd text."""
    doc = draw(context_dicts())
    repo = doc.get("repo")
    if isinstance(repo, str):
        repo = draw(
            st.sampled_from(
                [{"value": repo}, {"value": repo, "version": "legacy-lossy"}, {"value": repo}]
            )
        )
    doc["repo"] = repo
    doc["role"] = draw(st.sampled_from([None, "Planner", " reviewer ", "nobody", ""]))
    for key in ("principal_id", "role", "repo_class"):
        if draw(st.integers(0, 5)) == 0:
            doc[key] = draw(_ODD_TEXT)
    if doc["accounts"] and draw(st.booleans()):
        doc["accounts"][0]["account_id"] = draw(_ODD_TEXT)
    ordered = {key: doc.get(key) for key in CONTEXT_FIELDS}
    return _line(ordered, draw(st.booleans()))


@settings(max_examples=500, deadline=None)
@given(_raw_lines())
def test_a_raw_line_reads_as_the_general_path_reads_it(line: str) -> None:
    memo: Memo = {}
    pieces = Pieces()
    for _ in range(2):
        _check(line, memo, pieces)


#: Text an edit inserts: JSON's punctuation, escapes, literals, a raw control and separator.
@settings(max_examples=200, deadline=None)
@given(st.lists(_raw_lines() | context_dicts().map(_to_dict_line), min_size=2, max_size=25))
def test_one_memo_reads_a_whole_batch_alike(lines: list[str]) -> None:
    """A memo keyed on too little would hand one line another's piece."""
    memo: Memo = {}
    pieces = Pieces()
    for line in lines + lines:
        _check(line, memo, pieces)


_EDITS = st.sampled_from([*'{}[]",: \n\x00a\u2028', "\\", "null", "1", "true", "\\u0041"])


@settings(max_examples=1000, deadline=None)
@given(context_dicts(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), _EDITS)))
def test_no_edit_of_a_line_makes_the_readers_disagree(
    doc: dict[str, Any], edits: list[tuple[int, int, str]]
) -> None:
    line = _line(RouteContext.from_dict(doc).to_dict(), compact=True)
    for where, drop, text in edits:
        at = where % (len(line) + 1)
        line = line[:at] + text + line[at + drop :]
    _check(line, {}, Pieces())


_DUPLICATES = [
    # inside an account, inside the repo, inside the legacy route, and at the top
    ('"accounts":[{"account_id":"a",', '"accounts":[{"account_id":"b","account_id":"a",'),
    ('"repo":{"value":', '"repo":{"version":"canonical","value":"x/y","value":'),
    ('"legacy_route":{', '"legacy_route":{"model":"m","model":null,'),
    ('"accounts":[', '"accounts":[],"accounts":['),
]


@pytest.mark.parametrize(("old", "new"), _DUPLICATES, ids=["account", "repo", "legacy", "top"])
def test_a_duplicate_key_anywhere_in_a_line_is_refused_with_its_line_number(
    tmp_path: Path, old: str, new: str
) -> None:
    ctx = RouteContext.from_dict(
        {
            "repo": "acme/widgets",
            "principal_id": "planner",
            "legacy_route": {"provider_binding": "anthropic"},
            "accounts": [{"account_id": "a", "provider_binding": "anthropic"}],
        }
    )
    good = _line(ctx.to_dict(), compact=True)
    assert old in good
    bad = good.replace(old, new, 1)
    assert quick_line(bad, DEFAULT_VOCABULARY, {}, Pieces()) is None
    path = tmp_path / "b.jsonl"
    path.write_text(f"{good}\n{good}\n{bad}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"b\.jsonl:3: not valid JSON: duplicate key"):
        read_context_lines(path)


def test_a_long_account_list_is_read_every_time_and_alike() -> None:
    accounts = [{"account_id": f"acct-{i:03d}", "provider_binding": "anthropic"} for i in range(40)]
    ctx = RouteContext.from_dict({"repo": "acme/widgets", "accounts": accounts})
    line = _line(ctx.to_dict(), compact=True)
    pieces = Pieces()
    for _ in range(2):
        assert _check(line, {}, pieces)
    assert not pieces.accounts  # too long to remember


def test_the_piece_memo_starts_again_when_full() -> None:
    pieces = Pieces()
    for i in range(quick.PIECES_LIMIT + 10):
        ctx = RouteContext.from_dict({"repo": f"acme/r{i}"})
        assert _check(_line(ctx.to_dict(), compact=True), {}, pieces)
        assert len(pieces.repo) <= quick.PIECES_LIMIT
    assert len(pieces.repo) < 20  # cleared once, then filled again


@pytest.mark.parametrize(
    "line",
    [
        '{"repo":null,"repo_class":null,"principal_id":"a\\u0041","role":null,'
        '"model_requirement":null,"request_face":"unknown","legacy_route":null,"accounts":[]}',
        '{"repo_class":null,"repo":null,"principal_id":null,"role":null,'
        '"model_requirement":null,"request_face":"unknown","legacy_route":null,"accounts":[]}',
        ' {"repo":null,"repo_class":null,"principal_id":null,"role":null,'
        '"model_requirement":null,"request_face":"unknown","legacy_route":null,"accounts":[]}',
        '{"repo":null,"repo_class":null,"principal_id":null,"role":null,'
        '"model_requirement":null,"request_face":"unknown","legacy_route":null,"accounts":[]}\r\n',
    ],
    ids=["escape", "order", "leading-space", "crlf"],
)
def test_other_forms_are_left_to_the_general_path(line: str) -> None:
    assert quick_line(line, DEFAULT_VOCABULARY, {}, Pieces()) is None
    assert isinstance(_reference(line.strip()), RouteContext)


def test_an_invalid_value_in_a_quick_line_names_its_field(tmp_path: Path) -> None:
    ctx = RouteContext.from_dict({"repo": "acme/widgets", "request_face": "agentic"})
    bad = _line(ctx.to_dict(), compact=True).replace('"agentic"', '"telepathic"')
    path = tmp_path / "b.jsonl"
    path.write_text(bad + "\n", encoding="utf-8")
    with pytest.raises(RenseiRoutingError, match=r"b\.jsonl:1: request_face"):
        read_context_lines(path)


_HEAD = (
    '{"repo":REPO,"repo_class":null,"principal_id":PRINCIPAL,"role":null,'
    '"model_requirement":null,"request_face":"unknown",'
    '"legacy_route":{"provider_binding":"anthropic","model":"m{1"},"accounts":[]}'
)


@pytest.mark.parametrize(
    ("repo", "principal", "read"),
    [
        ('{"value":"acme/widgets","version":"canonical"}', '"planner"', True),
        ('{"value":"acme/widgets","version":{"x":1}}', '"planner"', False),
        ('{"value":{"v":"acme/widgets"},"version":"canonical"}', '"planner"', False),
        ("null", '"plan\\u0041ner"', False),
        ("null", '"plan\\\\ner"', False),
        ("null", '"plan\x01ner"', False),
        ("null", '"plan\\"ner"', False),
        ("null", '"plan{}ner"', True),
    ],
    ids=[
        "braces-in-a-legacy-model",
        "nested",
        "nested-first",
        "escape",
        "backslash",
        "control",
        "quote",
        "braces",
    ],
)
def test_the_head_pattern_s_looser_scans_read_as_the_general_path(
    repo: str, principal: str, read: bool
) -> None:
    """The head's strings run to the next quote and its objects to the first ``}``: an
    escape, a control character or a nested object is refused after the match (the general
    path reads the line), a brace inside a string is read as the strict decoder reads it."""
    line = _HEAD.replace("REPO", repo).replace("PRINCIPAL", principal)
    for memo, pieces in (({}, Pieces()),) * 2:  # the second time from the pieces' memo
        assert _check(line, memo, pieces) is read
