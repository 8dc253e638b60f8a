"""The one canonical encoder (RFC 8785, JSON Canonicalization Scheme) and the digests built on it.

Pure: no I/O. Every hash in the package (policy sets, decision ids, audit payloads, snapshot
content) goes through :func:`canonical_bytes`, so two encodings of the same value agree byte for
byte.

The reference implementation is the ``rfc8785`` library. Most of what we hash is a tree of
strings, small integers, booleans and nulls under ASCII keys; for that subset RFC 8785 output
is exactly Python's compact, key-sorted ``json`` output, so a fast path writes it directly and
anything outside the subset (floats, integers beyond 2**53 - 1, non-ASCII keys, lone surrogates)
falls back to the library. The test suite checks the two agree on arbitrary JSON values.
"""

from __future__ import annotations

import hashlib
from json.encoder import encode_basestring
from typing import Any, Final

import rfc8785

from ..errors import CanonicalEncodingError

__all__ = ["SHA256_PREFIX", "canonical_bytes", "digest", "json_string", "sha256_hex"]

SHA256_PREFIX: Final = "sha256:"
_MAX_SAFE_INT: Final = 2**53 - 1


class _Fallback(Exception):
    """Raised inside the fast path: hand this value to the reference encoder."""


def _fast(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif type(value) is int:
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            out.append(str(value))
        else:
            raise _Fallback
    elif isinstance(value, dict):
        keys = list(value)
        for key in keys:
            if type(key) is not str or not key.isascii():
                raise _Fallback
        keys.sort()
        out.append("{")
        first = True
        for key in keys:
            if not first:
                out.append(",")
            first = False
            out.append(encode_basestring(key))
            out.append(":")
            _fast(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _fast(item, out)
        out.append("]")
    else:
        raise _Fallback


def json_string(value: str | None) -> str:
    """The RFC 8785 text of one string (or ``null``), for emitters of fixed-shape values.

    Valid for strings without lone surrogates, which every ``from_dict`` guarantees.
    """
    return "null" if value is None else str(encode_basestring(value))


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Raises:
        CanonicalEncodingError: the value has no canonical form (NaN, infinity, an integer
            outside the IEEE 754 safe range, a non-string key, an unsupported type).
    """
    out: list[str] = []
    try:
        _fast(value, out)
        return "".join(out).encode("utf-8")
    except (_Fallback, UnicodeEncodeError, RecursionError):
        pass
    try:
        return bytes(rfc8785.dumps(value))
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as e:
        raise CanonicalEncodingError(f"no RFC 8785 form: {e}") from e


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:`` + hex SHA-256 of the canonical bytes of ``value``."""
    return SHA256_PREFIX + hashlib.sha256(canonical_bytes(value)).hexdigest()
