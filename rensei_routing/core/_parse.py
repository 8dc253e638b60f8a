"""Strict readers for JSON-shaped input: every failure is a MalformedError naming the field path.

Pure: no I/O. Used only by the ``from_dict`` constructors of the core value types.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Any, Final, TypeAlias

import orjson

from ..errors import MalformedError

#: A field path: a string, or ``(parent, key)`` pairs rendered only when an error is raised
#: (formatting every path eagerly was a third of the cost of reading a policy).
Path: TypeAlias = "str | tuple[Path, str | int]"


def at(path: Path, key: str | int) -> Path:
    """Extend a field path; ``render(at("policies[3]", "match"))`` is ``policies[3].match``."""
    return (path, key)


def _split(path: Path) -> tuple[str, tuple[str | int, ...]]:
    """The string root of a field path and the keys below it."""
    keys: list[str | int] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    return path, tuple(reversed(keys))


def render(path: Path) -> str:
    """The text of a field path, e.g. ``policies[3].match.roles[0]``."""
    out, keys = _split(path)
    for key in keys:
        out = f"{out}[{key}]" if isinstance(key, int) else f"{out}.{key}" if out else key
    return out


def fail(path: Path, message: str) -> MalformedError:
    """A MalformedError for ``path`` (to raise), carrying its keys below the string root."""
    return MalformedError(render(path), message, keys=_split(path)[1])


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def obj(
    value: Any,
    path: Path,
    *,
    required: Collection[str] = (),
    optional: Collection[str] = (),
) -> Mapping[str, Any]:
    """A JSON object with only known fields and every required one present."""
    if not isinstance(value, Mapping):
        raise fail(path, f"expected an object, got {_type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise fail(path, f"field names must be strings, got {key!r}")
        if key not in required and key not in optional:
            raise fail(at(path, key), "unknown field")
    for key in required:
        if key not in value:
            raise fail(at(path, key), "required field is missing")
    return value


def string(
    value: Any, path: Path, *, max_len: int = 4096, min_len: int = 1, verbatim: bool = False
) -> str:
    """A well-formed Unicode string of ``min_len..max_len`` characters, stripped unless
    ``verbatim`` (values that must be reported exactly as written, such as ids)."""
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise fail(path, "string is not valid Unicode (lone surrogate)") from e
    text = value if verbatim else value.strip()
    if not min_len <= len(text) <= max_len:
        raise fail(path, f"expected {min_len}..{max_len} characters, got {len(text)}")
    return text


def opt_string(
    value: Any, path: Path, *, max_len: int = 4096, min_len: int = 1, verbatim: bool = False
) -> str | None:
    """``None`` or a string of ``min_len..max_len`` characters."""
    if value is None:
        return None
    return string(value, path, max_len=max_len, min_len=min_len, verbatim=verbatim)


def boolean(value: Any, path: Path) -> bool:
    """A JSON boolean (not 0/1)."""
    if not isinstance(value, bool):
        raise fail(path, f"expected true or false, got {_type_name(value)}")
    return value


def integer(value: Any, path: Path, *, lo: int, hi: int) -> int:
    """A JSON integer in ``lo..hi`` (booleans and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, f"expected an integer, got {_type_name(value)}")
    if not lo <= value <= hi:
        raise fail(path, f"expected {lo}..{hi}, got {value}")
    return value


def choice(value: Any, path: Path, allowed: Collection[str], *, what: str) -> str:
    """A string (compared lowercased) from a closed set."""
    text = string(value, path, max_len=256).lower()
    if text not in allowed:
        names = ", ".join(sorted(allowed))
        raise fail(path, f"unknown {what} {text!r} (known: {names})")
    return text


def array(value: Any, path: Path) -> list[Any]:
    """A JSON array."""
    if not isinstance(value, (list, tuple)):
        raise fail(path, f"expected an array, got {_type_name(value)}")
    return list(value)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a duplicate key (``ValueError``): last-one-wins would let
    two readers of one document disagree."""
    out = dict(pairs)
    if len(out) != len(pairs):  # the C dict constructor, then one comparison: the fast check
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def no_constant(name: str) -> Any:
    """``parse_constant`` refusing ``NaN``, ``Infinity`` and ``-Infinity`` (``ValueError``)."""
    raise ValueError(f"{name} is not a JSON number")


#: The strict decoder for every JSON we read (input files, stored payloads, snapshots): the C
#: scanner, no duplicate keys, no NaN/Infinity. ``decode`` also refuses trailing data.
STRICT_DECODER: Final = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=no_constant)
#: The same without the duplicate-key check, for text already proven to be the canonical bytes
#: (a matching hash: canonical JSON has no duplicate keys).
PLAIN_DECODER: Final = json.JSONDecoder(parse_constant=no_constant)


#: The quick proof of :func:`is_strict_json`: a payload that orjson reads and writes back byte
#: for byte is the output of a JSON writer (see there).
_QUICK_LOADS: Final = orjson.loads
_QUICK_DUMPS: Final = orjson.dumps
#: orjson writes nothing nested deeper than 254 levels; the standard library's parser reads
#: 255 levels under the default recursion limit (1,000) from a caller up to ~740 frames deep.
#: The quick proof is taken only while the limit is at least the default.
QUICK_MIN_RECURSION_LIMIT: Final = 1000


def is_strict_json(data: bytes) -> bool:
    """Whether ``data`` is strict JSON: exactly when ``STRICT_DECODER.decode(data.decode(
    "utf-8"))`` succeeds (UTF-8, no duplicate key, no ``NaN``/``Infinity``, nothing after the
    value), and decided by that call whenever the quick proof does not hold.

    The quick proof, for the common case of bytes a JSON writer produced (every stored audit
    payload is RFC 8785 text): orjson (a C-speed parser that builds the value without the
    per-object duplicate-key hook) reads ``data`` and writes the value back, and the result is
    ``data`` itself. Then ``data`` is orjson's output for a value of dicts, lists, strings,
    64-bit integers, finite floats, booleans and nulls: valid UTF-8 (orjson refuses to write a
    lone surrogate), one compact value with nothing after it, keys unique in each object (they
    came from a dict, and distinct strings are written distinctly), no ``NaN``/``Infinity``
    (orjson writes a non-finite float as ``null``, which would not compare equal), at most 20
    digits an integer, and nested at most 254 deep: all of which the strict decoder accepts
    (the depth, under :data:`QUICK_MIN_RECURSION_LIMIT`, from any caller of this package).
    Bytes a JSON writer would write differently (whitespace, another number form, an escape
    orjson does not use, a duplicate key that reading collapsed, ...) or that orjson refuses
    fall through to the strict decoder, which alone decides them. The proof never accepts what
    the strict decoder refuses, and what it does not prove is decided as before: the verdict
    is the strict decoder's for every input.
    """
    if sys.getrecursionlimit() >= QUICK_MIN_RECURSION_LIMIT:
        try:
            if _QUICK_DUMPS(_QUICK_LOADS(data)) == data:
                return True
        except (ValueError, TypeError):  # orjson.JSONDecodeError, orjson.JSONEncodeError
            pass
    try:
        STRICT_DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return True
