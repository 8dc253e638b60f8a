"""An envelope's wire text: reading its top level field by field, keeping each value's exact
source text (so the sections can be hashed as they arrived), and the time forms ``compiledAt``
arrives in (RFC 3339, any offset, any fraction). Pure; used by ``envelope``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final

from ...errors import MalformedError, SnapshotFormatError
from .. import _parse as p
from ..timestamps import check_timestamp, format_timestamp

__all__ = ["normalise_time", "parse_time", "scan_top"]

_RFC3339: Final = re.compile(
    r"(\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?:\.(\d{1,18}))?([Zz]|[+-]\d{2}:\d{2})"
)


def _skip(text: str, idx: int) -> int:
    """The index of the first non-whitespace character at or after ``idx``."""
    while idx < len(text) and text[idx] in " \t\n\r":
        idx += 1
    return idx


def _object(
    text: str, idx: int, nested: str | None
) -> tuple[dict[str, Any], dict[str, str], int, dict[str, str]]:
    """The JSON object starting at ``text[idx]`` (``{``): its members, each member's source
    text, the index after it, and, when member ``nested`` is an object, that object's members'
    source texts (read in the same pass)."""
    idx = _skip(text, idx + 1)
    out: dict[str, Any] = {}
    raw: dict[str, str] = {}
    inner: dict[str, str] = {}
    if text[idx : idx + 1] == "}":
        return out, raw, idx + 1, inner
    while True:
        if text[idx : idx + 1] != '"':
            raise ValueError(f"expected a field name at {idx}")
        key, idx = p.PLAIN_DECODER.raw_decode(text, idx)
        idx = _skip(text, idx)
        if text[idx : idx + 1] != ":":
            raise ValueError(f"expected ':' at {idx}")
        idx = _skip(text, idx + 1)
        if key == nested and text[idx : idx + 1] == "{":
            value, inner, end, _ = _object(text, idx, None)
        else:
            value, end = p.PLAIN_DECODER.raw_decode(text, idx)
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key], raw[key] = value, text[idx:end]
        idx = _skip(text, end)
        sep = text[idx : idx + 1]
        idx = _skip(text, idx + 1)
        if sep == "}":
            return out, raw, idx, inner
        if sep != ",":
            raise ValueError(f"expected ',' or '}}' at {idx}")


def scan_top(
    text: str, nested: str | None = None
) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """Parse a top-level JSON object field by field, refusing duplicate top-level keys, and
    return it with the exact source text of each value (so the sections' signed bytes can be
    hashed as they arrived, without re-encoding megabytes of JSON), and the source text of each
    member of the object-valued field ``nested`` (each section's bytes, for its digest).

    Raises:
        ValueError: not a JSON object, or not valid JSON.
    """
    idx = _skip(text, 0)
    if text[idx : idx + 1] != "{":
        raise ValueError("not a JSON object")
    out, raw, idx, inner = _object(text, idx, nested)
    idx = _skip(text, idx)
    if idx != len(text):
        raise ValueError(f"extra data after the object at {idx}")
    return out, raw, inner


def parse_time(compiled_at: Any) -> datetime:
    """A received ``compiledAt``: RFC 3339 with an optional fraction (any number of digits,
    truncated to microseconds) and any offset (``Z``, ``z`` or ``+hh:mm``), as aware UTC.

    Raises:
        SnapshotFormatError: anything else.
    """
    if not isinstance(compiled_at, str):
        raise SnapshotFormatError("compiledAt must be a string")
    m = _RFC3339.fullmatch(compiled_at)
    if m is None:
        raise SnapshotFormatError(f"compiledAt {compiled_at!r} is not an RFC 3339 timestamp")
    fraction = (m.group(2) or "")[:6].ljust(6, "0") if m.group(2) else ""
    offset = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    text = m.group(1) + (f".{fraction}" if fraction else "") + offset
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise SnapshotFormatError(f"compiledAt {compiled_at!r} is not a real moment") from e
    return moment.astimezone(UTC)


def normalise_time(compiled_at: str) -> str:
    """``compiledAt`` as RFC 3339 UTC ``...Z``: our own form unchanged, any other
    (an offset, more than six fraction digits, a lowercase ``z``) rewritten in microseconds.

    Raises:
        SnapshotFormatError: not an RFC 3339 timestamp.
    """
    try:
        return check_timestamp(compiled_at)
    except MalformedError:
        return format_timestamp(parse_time(compiled_at))
