"""Strict readers for JSON-shaped input: every failure is a MalformedError naming the field path.

Pure: no I/O. Used only by the ``from_dict`` constructors of the core value types.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..errors import MalformedError


def at(path: str, key: str | int) -> str:
    """Extend a field path: ``at("policies[3]", "match")`` -> ``policies[3].match``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def obj(
    value: Any,
    path: str,
    *,
    required: Collection[str] = (),
    optional: Collection[str] = (),
) -> Mapping[str, Any]:
    """A JSON object with only known fields and every required one present."""
    if not isinstance(value, Mapping):
        raise MalformedError(path, f"expected an object, got {_type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise MalformedError(path, f"field names must be strings, got {key!r}")
        if key not in required and key not in optional:
            raise MalformedError(at(path, key), "unknown field")
    for key in required:
        if key not in value:
            raise MalformedError(at(path, key), "required field is missing")
    return value


def string(
    value: Any, path: str, *, max_len: int = 4096, min_len: int = 1, verbatim: bool = False
) -> str:
    """A well-formed Unicode string of ``min_len..max_len`` characters, stripped unless
    ``verbatim`` (values that must be reported exactly as written, such as ids)."""
    if not isinstance(value, str):
        raise MalformedError(path, f"expected a string, got {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MalformedError(path, "string is not valid Unicode (lone surrogate)") from e
    text = value if verbatim else value.strip()
    if not min_len <= len(text) <= max_len:
        raise MalformedError(path, f"expected {min_len}..{max_len} characters, got {len(text)}")
    return text


def opt_string(value: Any, path: str, *, max_len: int = 4096, verbatim: bool = False) -> str | None:
    """``None`` or a non-empty string."""
    return None if value is None else string(value, path, max_len=max_len, verbatim=verbatim)


def boolean(value: Any, path: str) -> bool:
    """A JSON boolean (not 0/1)."""
    if not isinstance(value, bool):
        raise MalformedError(path, f"expected true or false, got {_type_name(value)}")
    return value


def integer(value: Any, path: str, *, lo: int, hi: int) -> int:
    """A JSON integer in ``lo..hi`` (booleans and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedError(path, f"expected an integer, got {_type_name(value)}")
    if not lo <= value <= hi:
        raise MalformedError(path, f"expected {lo}..{hi}, got {value}")
    return value


def choice(value: Any, path: str, allowed: Collection[str], *, what: str) -> str:
    """A string (compared lowercased) from a closed set."""
    text = string(value, path, max_len=256).lower()
    if text not in allowed:
        names = ", ".join(sorted(allowed))
        raise MalformedError(path, f"unknown {what} {text!r} (known: {names})")
    return text


def array(value: Any, path: str) -> list[Any]:
    """A JSON array."""
    if not isinstance(value, (list, tuple)):
        raise MalformedError(path, f"expected an array, got {_type_name(value)}")
    return list(value)
