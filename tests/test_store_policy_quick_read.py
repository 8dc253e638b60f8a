"""The quick reader of a stored revision (``core.routing.stored``): on every body it builds what
``RoutingPolicy.from_dict`` builds or declines, so ``load`` answers exactly as the general reader
would, hash check first; and ``load`` leaves the cyclic collector as it found it."""

from __future__ import annotations

import gc
import hashlib
import json
import threading
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.workload import build_contexts, build_policy_set
from rensei_routing import (
    PolicySnapshot,
    RoutingPolicy,
    canonical_bytes,
    explain_batch,
    hash_policies,
)
from rensei_routing.core import _parse as p
from rensei_routing.core.routing import stored
from rensei_routing.core.routing.policy import RoutingAction, RoutingMatch, policy_canonical
from rensei_routing.core.routing.stored import read_stored
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from rensei_routing.errors import InputError
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore, decode_revision, encode_policies

from .strategies import policy_dicts

V = DEFAULT_VOCABULARY
T = "2026-11-29T12:00:00Z"


def _general(body: bytes, vocabulary: Vocabulary = V) -> tuple[RoutingPolicy, ...] | str:
    """What the general reader makes of ``body``: the policies, or the corrupt detail."""
    path = "revision 1"
    try:
        doc = json.loads(body.decode("utf-8"))
        return tuple(
            RoutingPolicy.from_dict(item, path=p.at(path, i), vocabulary=vocabulary)
            for i, item in enumerate(p.array(doc, path))
        )
    except (ValueError, InputError, RecursionError) as e:
        return f"revision 1 is unparseable: {e}"


def _hash(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _every_slot_set(policies: tuple[RoutingPolicy, ...]) -> None:
    """Reading every slot raises if the quick reader left one empty."""
    for pol in policies:
        for obj in (pol, pol.match, pol.action):
            for name in type(obj).__slots__:
                getattr(obj, name)


def _assert_same_load(body: bytes, vocabulary: Vocabulary = V) -> None:
    """``decode_revision`` of a body whose hash matches answers as the general reader does."""
    loaded = decode_revision(1, _hash(body), body, vocabulary=vocabulary)
    expected = _general(body, vocabulary)
    if isinstance(expected, str):
        assert (loaded.state, loaded.detail) == ("corrupt", expected)
        assert loaded.snapshot == PolicySnapshot.empty()
    else:
        assert loaded.state == "ok" and loaded.detail is None
        assert loaded.snapshot.policies == expected
        _every_slot_set(loaded.snapshot.policies)


def test_the_slot_lists_are_the_classes() -> None:
    assert RoutingPolicy.__slots__ == stored.POLICY_FIELDS
    assert RoutingMatch.__slots__ == stored._MATCH_SLOTS
    assert RoutingAction.__slots__ == stored._ACTION_SLOTS


@pytest.mark.parametrize(("size", "shape"), [(50, "repo"), (600, "repo"), (600, "broad")])
def test_benchmark_sets_read_quickly_into_the_same_policies(size: int, shape: str) -> None:
    chosen = build_policy_set(size, shape=shape)
    body, content_hash = encode_policies(chosen.policies)
    quick = read_stored(body, vocabulary=V)
    assert quick is not None  # the stored form is what the quick reader takes
    general = _general(body)
    assert quick == general
    _every_slot_set(quick)
    assert hash_policies(quick) == content_hash
    assert [pol.to_dict() for pol in quick] == json.loads(body)
    # Same decisions, explanations included, as from the general reader's policies.
    assert isinstance(general, tuple)
    contexts = build_contexts(chosen, 300)
    fast = explain_batch(contexts, PolicySnapshot(revision=3, policies=quick, content_hash="x"))
    slow = explain_batch(contexts, PolicySnapshot(revision=3, policies=general, content_hash="x"))
    assert [d.to_dict() for d in fast] == [d.to_dict() for d in slow]


_MESSY = st.text(alphabet=st.sampled_from(" \t\u00a0aAzZ09-_./*İßǅΣ\u212a"), max_size=8)


@st.composite
def _messy_policy(draw: st.DrawFn) -> dict[str, Any]:
    """A policy document with strings ``from_dict`` strips and lowercases: what it stores is
    each one's fixed point, Unicode case mappings included."""
    doc = draw(policy_dicts())
    doc["id"] = draw(st.one_of(st.sampled_from(["a", "b"]), _MESSY))
    doc["description"] = draw(st.one_of(st.none(), _MESSY))
    doc["match"]["principal_ids"] = draw(st.lists(_MESSY, max_size=3))
    doc["match"]["repo_ids"] = draw(
        st.lists(st.one_of(_MESSY, st.just(" Acme/Widgets ")), max_size=2)
    )
    doc["action"]["account_pool"] = draw(st.lists(_MESSY, max_size=3, unique=True))
    doc["action"]["allowed_patterns"] = draw(st.lists(_MESSY, max_size=3))
    doc["action"]["fallback_on"] = draw(st.lists(_MESSY, max_size=2))
    return doc


def _parsed(docs: list[dict[str, Any]]) -> list[RoutingPolicy]:
    out = []
    for doc in docs:
        try:
            out.append(RoutingPolicy.from_dict(doc, vocabulary=V))
        except InputError:
            continue
    return out


@settings(max_examples=200)
@given(st.lists(st.one_of(policy_dicts(), _messy_policy()), max_size=6))
def test_any_saved_set_reads_quickly_into_the_same_policies(docs: list[dict[str, Any]]) -> None:
    body, _ = encode_policies(_parsed(docs))
    quick = read_stored(body, vocabulary=V)
    assert quick is not None
    assert quick == _general(body)
    _every_slot_set(quick)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _MESSY
    | st.sampled_from(["hold", "ordered", "reviewer", "capability", "balanced", "anthropic"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_MESSY, inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*here, i))
    return out


@st.composite
def _edited_bodies(draw: st.DrawFn) -> bytes:
    """A saved body edited at one place (a value replaced, a field dropped or added), written
    back as any JSON writer might: a hand edit whose content hash was updated to match."""
    docs = draw(st.lists(policy_dicts(), min_size=1, max_size=3))
    doc: Any = json.loads(encode_policies(_parsed(docs))[0])
    where = draw(st.sampled_from(_paths(doc)))
    edit = draw(st.sampled_from(["replace", "drop", "add"]))
    if not where:
        doc = draw(_JSON)
    else:
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        last = where[-1]
        if edit == "drop":
            del parent[last]
        elif edit == "add" and isinstance(parent, dict):
            parent[draw(_MESSY)] = draw(_JSON)
        else:
            parent[last] = draw(_JSON)
    compact = draw(st.booleans())
    text = json.dumps(
        doc,
        sort_keys=draw(st.booleans()),
        ensure_ascii=draw(st.booleans()),
        separators=(",", ":") if compact else (", ", ": "),
    )
    return text.encode("utf-8")


@settings(max_examples=400)
@given(_edited_bodies())
def test_an_edited_body_with_a_matching_hash_loads_as_the_general_reader_says(
    body: bytes,
) -> None:
    quick = read_stored(body, vocabulary=V)
    assert quick is None or quick == _general(body)
    _assert_same_load(body)


@pytest.mark.parametrize(
    "body",
    [
        b'[{"id":"a","enabled":"yes"}]',
        b'[{"action":{},"description":null,"enabled":true,"id":"a","match":{"model_requirements"'
        b':[],"principal_ids":[],"repo_classes":[],"repo_ids":[],"request_faces":[],"roles":'
        b'["wizard"]},"priority":0,"system_safety":false}]',
        b'[{"action":{"account_pool":["x","x"],"allowed_patterns":[],"fallback_on":[],'
        b'"forbid_direct_bypass":false,"on_unavailable":"hold","provider_lock":null,'
        b'"requirement_map":[],"selection":"ordered"},"description":null,"enabled":true,'
        b'"id":"a","match":{},"priority":0,"system_safety":false}]',
        b'[{"description":null,"enabled":1,"id":"a","priority":0,"system_safety":false}]',
        b'[{"id":"a","priority":123456789012345678901234567890}]',
        b'[{"id":"a","description":"\\ud800"}]',
        b'{"id":"a"}',
        b"[1]",
        b"[]x",
        b"\xef\xbb\xbf[]",
    ],
    ids=[
        "not-a-boolean",
        "outside-vocabulary",
        "account-twice",
        "integer-for-boolean",
        "huge-integer",
        "lone-surrogate",
        "not-an-array",
        "not-a-policy",
        "trailing-data",
        "byte-order-mark",
    ],
)
def test_a_malformed_body_with_a_matching_hash_is_corrupt(body: bytes) -> None:
    assert read_stored(body, vocabulary=V) is None
    loaded = decode_revision(1, _hash(body), body, vocabulary=V)
    assert loaded.state == "corrupt" and "unparseable" in (loaded.detail or "")
    _assert_same_load(body)


def _saved_doc() -> dict[str, Any]:
    """One policy as ``save`` stores it: every field present, every value normalised."""
    pol = RoutingPolicy.from_dict(
        {
            "id": "a",
            "description": "d",
            "match": {"repo_ids": ["acme/a"], "model_requirements": ["balanced"]},
            "action": {
                "account_pool": ["x"],
                "requirement_map": [{"requirement": "claude-opus", "model": "m"}],
                "allowed_patterns": ["claude-*"],
            },
        },
        vocabulary=V,
    )
    return pol.to_dict()


def _edited(path: tuple[str, ...], value: Any) -> bytes:
    doc = _saved_doc()
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return json.dumps([doc], sort_keys=True, separators=(",", ":")).encode()


def test_the_saved_form_itself_reads_quickly() -> None:
    body = _edited(("id",), "a")
    assert read_stored(body, vocabulary=V) == _general(body)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("match", "repo_ids"), [" Acme/A "]),
        (("match", "principal_ids"), ["Planner"]),
        (("match", "roles"), ["Reviewer"]),
        (("match", "model_requirements"), [{"kind": "concrete_model", "value": "GLM-5"}]),
        (("match", "model_requirements"), [{"kind": "capability", "value": " balanced"}]),
        (("match", "model_requirements"), ["balanced"]),
        (("description",), " padded "),
        (("action", "account_pool"), [" x "]),
        (("action", "allowed_patterns"), ["CLAUDE-*", "claude-*"]),
        (("action", "fallback_on"), ["b", "a", "a"]),
        (("action", "selection"), "Ordered"),
        (("action", "provider_lock"), " anthropic"),
        (("action", "requirement_map"), {"balanced": "m"}),
        (("action", "requirement_map"), [{"requirement": "balanced", "model": "m"}]),
        (
            ("action", "requirement_map"),
            [{"requirement": {"kind": "capability", "value": "Balanced"}, "model": " m"}],
        ),
        (
            ("action", "requirement_map"),
            [
                {"requirement": {"kind": "capability", "value": "high-reasoning"}, "model": "m"},
                {"requirement": {"kind": "capability", "value": "balanced"}, "model": "m"},
            ],
        ),
    ],
)
def test_a_well_formed_body_not_as_saved_loads_through_the_general_reader(
    path: tuple[str, ...], value: Any
) -> None:
    body = _edited(path, value)
    general = _general(body)
    assert isinstance(general, tuple)  # well formed: it loads, normalised
    quick = read_stored(body, vocabulary=V)
    assert quick is None or quick == general
    _assert_same_load(body)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("enabled",), 1),
        (("priority",), 10_001),
        (("priority",), True),
        (("match", "roles"), ["wizard"]),
        (("match", "model_requirements"), [{"kind": "capability", "value": "mystery"}]),
        (("action", "account_pool"), ["x", "x"]),
        (("action", "on_unavailable"), "later"),
        (("action", "requirement_map"), [{"requirement": "balanced"}]),
        (("match",), []),
        (("id",), 7),
    ],
)
def test_a_full_body_with_a_bad_value_and_a_matching_hash_is_corrupt(
    path: tuple[str, ...], value: Any
) -> None:
    body = _edited(path, value)
    assert read_stored(body, vocabulary=V) is None
    assert decode_revision(1, _hash(body), body, vocabulary=V).state == "corrupt"
    _assert_same_load(body)


@pytest.mark.parametrize(
    ("description", "state"),
    [("caf\u00e9 \u2603 \U0001f600", "ok"), ("\ud800", "corrupt"), ("a\udfff", "corrupt")],
    ids=["escaped", "lone-high-surrogate", "lone-low-surrogate"],
)
def test_a_body_escaped_as_another_writer_would_goes_to_the_general_reader(
    description: str, state: str
) -> None:
    doc = _saved_doc()
    doc["description"] = description
    body = json.dumps([doc], sort_keys=True, separators=(",", ":")).encode()  # \uXXXX escapes
    assert read_stored(body, vocabulary=V) is None
    assert decode_revision(1, _hash(body), body, vocabulary=V).state == state
    _assert_same_load(body)


def test_the_saved_form_is_orjson_s_form_for_every_character() -> None:
    """Why a saved body always takes the quick path: ``canonical_bytes`` and orjson write
    every string alike (the reader's round-trip proof needs orjson's exact bytes)."""
    for start in range(0, 0x110000, 0x1000):
        text = "".join(chr(c) for c in range(start, start + 0x1000) if not 0xD800 <= c <= 0xDFFF)
        value = [text, {"k": text, "n": [0, 10_000, -1, 2**53 - 1, True, False, None]}]
        assert canonical_bytes(value) == orjson.dumps(value)


@pytest.mark.parametrize("role", ["Wizard", " wizard", "wizard "])
def test_a_vocabulary_name_no_reader_can_return_is_not_taken(role: str) -> None:
    vocabulary = replace(V, roles=V.roles | {role})
    body = _edited(("match", "roles"), [role])
    assert read_stored(body, vocabulary=vocabulary) is None
    assert decode_revision(1, _hash(body), body, vocabulary=vocabulary).state == "corrupt"
    _assert_same_load(body, vocabulary)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="test")
    return h


def _rewrite(home: Home, body: bytes) -> None:
    """A hand edit of the body that also rewrites its content hash to match."""
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            conn.execute(
                "UPDATE policy_revisions SET body = ?, content_hash = ?", (body, _hash(body))
            )
    finally:
        conn.close()


def test_a_store_load_reads_back_what_was_saved_and_refuses_a_tampered_body(home: Home) -> None:
    chosen = build_policy_set(60)
    with closing(home.connect(write=True)) as conn:
        saved = PolicyStore(conn).save(chosen.policies, saved_at=T)
        loaded = PolicyStore(conn).load()
        assert loaded.state == "ok" and loaded.snapshot.content_hash == saved.content_hash
        # Stored (and loaded) in the order of their canonical bytes, not the caller's.
        assert loaded.snapshot.policies == tuple(sorted(saved.policies, key=policy_canonical))
        (body,) = conn.execute("SELECT body FROM policy_revisions").fetchone()
    tampered = bytes(body).replace(b'"enabled":true', b'"enabled":false', 1)
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            conn.execute("UPDATE policy_revisions SET body = ?", (tampered,))
    finally:
        conn.close()
    with closing(home.connect()) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "corrupt" and "does not match" in (loaded.detail or "")
    assert loaded.snapshot == PolicySnapshot.empty()
    # The same edit with its hash rewritten is a well-formed set: it loads, as edited.
    _rewrite(home, tampered)
    with closing(home.connect()) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "ok" and loaded.snapshot.policies == _general(tampered)
    assert loaded.snapshot.policies != saved.policies


def test_a_store_load_of_a_malformed_body_with_a_matching_hash_is_corrupt(home: Home) -> None:
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(build_policy_set(10).policies, saved_at=T)
    _rewrite(home, b'[{"id":"a","enabled":"yes"}]')
    with closing(home.connect()) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "corrupt" and "revision 1 is unparseable" in (loaded.detail or "")
    assert loaded.snapshot == PolicySnapshot.empty()


@pytest.mark.parametrize("enabled", [True, False])
def test_load_leaves_the_collector_as_it_found_it(home: Home, enabled: bool) -> None:
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(build_policy_set(30).policies, saved_at=T)
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        with closing(home.connect()) as conn:
            assert PolicyStore(conn).load().state == "ok"
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_concurrent_loads_leave_the_collector_on(home: Home) -> None:
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(build_policy_set(300).policies, saved_at=T)
    assert gc.isenabled()
    states: list[str] = []

    def load() -> None:
        with closing(home.connect()) as conn:
            for _ in range(5):
                states.append(PolicyStore(conn).load().state)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert states == ["ok"] * 20
    assert gc.isenabled()
