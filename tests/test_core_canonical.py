"""The one canonical encoder: byte-equal to the rfc8785 reference, and its fixed-shape emitters."""

from __future__ import annotations

import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import RouteContext, canonical_bytes, digest
from rensei_routing.errors import CanonicalEncodingError

from .strategies import context_dicts

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def _reference(value: object) -> bytes | None:
    try:
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError:
        return None


@settings(max_examples=400)
@given(json_values)
def test_canonical_bytes_equals_the_rfc8785_reference(value: object) -> None:
    expected = _reference(value)
    if expected is None:  # lone surrogates: no canonical form in either
        with pytest.raises(CanonicalEncodingError):
            canonical_bytes(value)
    else:
        assert canonical_bytes(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\ue000": 2},  # UTF-16 order differs from code-point order
        {"b": 1.0, "a": 1e21, "c": -0.0, "d": 5e-324},
        {"k": 2**53 - 1},
        ["\u2028\u2029\x7f\x00\x1f", "é"],
    ],
    ids=["utf16-key-order", "floats", "max-safe-int", "escapes"],
)
def test_fallback_cases_match_the_reference(value: object) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, {"n": 2**53}, {"s": {1, 2}}, {1: "non-string key"}],
    ids=["nan", "inf", "unsafe-int", "set", "int-key"],
)
def test_values_without_a_canonical_form_raise_typed(value: object) -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_bytes(value)


def test_digest_is_prefixed_sha256_of_canonical_bytes() -> None:
    import hashlib

    value = {"b": [1, "x"], "a": None}
    assert digest(value) == "sha256:" + hashlib.sha256(b'{"a":null,"b":[1,"x"]}').hexdigest()


@settings(max_examples=300)
@given(context_dicts(), st.text(max_size=8))
def test_context_emitter_equals_the_encoder(doc: dict, principal: str) -> None:
    if principal.strip():  # arbitrary Unicode (hypothesis text never holds lone surrogates)
        doc = {**doc, "principal_id": principal}
    ctx = RouteContext.from_dict(doc)
    assert ctx.canonical() == canonical_bytes(ctx.to_dict())
    for account in ctx.accounts:
        assert account.canonical_json().encode() == canonical_bytes(account.to_dict())
    if ctx.legacy_route is not None:
        assert ctx.legacy_route.canonical_json().encode() == canonical_bytes(
            ctx.legacy_route.to_dict()
        )
