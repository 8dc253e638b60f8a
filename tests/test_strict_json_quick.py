"""The quick proof of strict JSON (``core._parse.is_strict_json``, issue 21's verify bar): it
decides exactly as the strict decoder for every input (hand-picked edge cases, generated
documents written by several writers, duplicate keys at any depth, byte-level damage), and a
verify of canonical payloads takes it instead of the strict decoder's per-object hook."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core import _parse
from rensei_routing.core._parse import STRICT_DECODER, is_strict_json
from rensei_routing.core.audit.chain import GENESIS_HASH, encode_payload, link_rows, verify_chain
from rensei_routing.core.canonical import canonical_bytes


def _reference(data: bytes) -> bool:
    """What the walk decided before the quick proof: the strict decoder alone."""
    try:
        STRICT_DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return True


EDGES = [
    b"{}",
    b"[]",
    b'{"a":1}',
    b'{"a":1,"a":1}',
    b'{"a":1,"\\u0061":1}',
    b'{"b":{"a":1,"a":2}}',
    b'[{"x":[{"k":1,"k":1}]}]',
    b"NaN",
    b"[Infinity]",
    b"[-Infinity]",
    b"[1e400]",
    b"[-1e400]",
    b"\xef\xbb\xbf{}",
    b"{} ",
    b" {}",
    b"{}x",
    b"{}{}",
    b'"\\ud800"',
    b'"\xed\xa0\x80"',
    b'"\xff"',
    b"1" * 5000,
    b"[" * 300 + b"]" * 300,
    b"[" * 254 + b"]" * 254,
    b"[" * 255 + b"]" * 255,
    b"[" * 5000 + b"]" * 5000,
    b"-0",
    b"0.0",
    b"-0.0",
    b"1E5",
    b"1e+5",
    b"1e-7",
    b"[1.0]",
    b"01",
    b".5",
    b"1.",
    b"+1",
    b'"\x1f"',
    b'"\\u001f"',
    b'"\\u001F"',
    b'"\x7f"',
    b'"\xe2\x80\xa8"',
    b'"\\/"',
    b'"\\"',
    b"",
    b" ",
    b"true",
    b"[true,false,null]",
    b"tru",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"9223372036854775807",
    b"12345678901234567890123",
    b'{"a":[1,2,{"b":null}],"c":"d"}',
    b'{"a" : 1}',
    b'{"a":1,}',
    b"[1,]",
    b'{"a":1}\x00',
    b'{"\xf0\x9f\x98\x80":1,"\xef\xbf\xbf":2}',
]


@pytest.mark.parametrize("data", EDGES)
def test_edge_cases_decide_as_the_strict_decoder(data: bytes) -> None:
    assert is_strict_json(data) is _reference(data)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(
            st.tuples(st.sampled_from(["a", "b", "\u00e9", "a\u0000", "\U0001f600"]), inner),
            max_size=4,
        )
    ),
    max_leaves=20,
)


def _text(value: Any, spaced: bool) -> str:
    """JSON text of ``value``, where a list of (key, value) tuples is an object that may repeat
    a key (the writers below cannot)."""
    sep = ", " if spaced else ","
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        items = sep.join(f"{json.dumps(k)}:{_text(v, spaced)}" for k, v in value)
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + sep.join(_text(v, spaced) for v in value) + "]"
    return json.dumps(value)


def _plain(value: Any) -> Any:
    """``value`` with each object as a dict (a repeated key: the last wins)."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans())
def test_generated_documents_decide_as_the_strict_decoder(value: Any, spaced: bool) -> None:
    texts = [_text(value, spaced).encode("utf-8", "surrogatepass")]
    plain = _plain(value)
    texts.append(json.dumps(plain, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    texts.append(json.dumps(plain, separators=(",", ":")).encode())
    with contextlib.suppress(Exception):  # integers past 2**53, ...: no canonical form
        texts.append(canonical_bytes(plain))
    with contextlib.suppress(TypeError):  # past 64 bits, a lone surrogate: orjson writes none
        texts.append(orjson.dumps(plain))
    for data in texts:
        assert is_strict_json(data) is _reference(data), data


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_damaged_payloads_decide_as_the_strict_decoder(data: st.DataObject) -> None:
    text = bytearray(canonical_bytes({"a": [1, 2.5, "x\u00e9"], "b": {"c": None, "d": True}}))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text) - 1))
        how = data.draw(st.sampled_from(["set", "insert", "delete"]))
        byte = data.draw(st.sampled_from(b'{}[]",:\\ 0-9eE.tfnu\x00\x1f\x7f\xc3\xa9\xff'))
        if how == "set":
            text[at] = byte
        elif how == "insert":
            text.insert(at, byte)
        elif len(text) > 1:
            del text[at]
    assert is_strict_json(bytes(text)) is _reference(bytes(text))


def test_a_lowered_recursion_limit_leaves_the_decision_to_the_strict_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    class Counting:
        def decode(self, text: str) -> Any:
            calls.append(text)
            return STRICT_DECODER.decode(text)

    monkeypatch.setattr(_parse, "STRICT_DECODER", Counting())
    assert is_strict_json(b'{"a":1}') and calls == []
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(_parse.QUICK_MIN_RECURSION_LIMIT - 1)
        assert is_strict_json(b'{"a":1}') and calls == ['{"a":1}']
    finally:
        sys.setrecursionlimit(limit)


def test_verify_proves_canonical_payloads_without_the_strict_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk's strict parse of canonical payloads is the quick proof: the strict decoder
    (its per-object duplicate-key hook, most of a walk's time) is not called for them."""
    payloads = [
        encode_payload({"seq": i, "decision": {"pool": "p", "scores": [0.5, i]}, "at": "x"})
        for i in range(200)
    ]
    rows = link_rows(payloads, seq=0, prev_hash=GENESIS_HASH, recorded_at="2026-12-01T00:00:00Z")
    calls: list[str] = []

    class Counting:
        def decode(self, text: str) -> Any:
            calls.append(text)
            return STRICT_DECODER.decode(text)

    monkeypatch.setattr(_parse, "STRICT_DECODER", Counting())
    result = verify_chain(rows)
    assert result.ok and result.records_checked == 200
    assert calls == []
    # a duplicate key (rehashed) is still found, by the strict decoder
    bad = payloads[:]
    bad[150] = b'{"a":1,"a":1}'
    rows = link_rows(bad, seq=0, prev_hash=GENESIS_HASH, recorded_at="2026-12-01T00:00:00Z")
    result = verify_chain(rows)
    assert (result.first_broken_seq, result.reason) == (150, "unparseable-record")
