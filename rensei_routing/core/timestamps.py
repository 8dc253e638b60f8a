"""RFC 3339 UTC timestamps (``...Z``, at most six fraction digits), as the audit chain's
``recorded_at`` and a snapshot's ``compiledAt`` hold them: checking text and formatting a moment;
and the one human form of an age or a duration in text output (:func:`format_age`).

Shared by the core's domains. Pure: never reads the clock (the caller passes the moment) and
knows nothing of records or snapshots.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

from ..errors import MalformedError

__all__ = ["check_timestamp", "format_age", "format_timestamp", "is_timestamp"]

_TIMESTAMP: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z")


def is_timestamp(text: str) -> bool:
    """Whether ``text`` is RFC 3339 UTC (``...Z``, at most 6 fraction digits) naming a real
    date and time."""
    if not _TIMESTAMP.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text[:-1] + "+00:00")
    except ValueError:
        return False
    return True


def check_timestamp(recorded_at: str) -> str:
    """Return ``recorded_at`` if it is RFC 3339 UTC (``...Z``, at most 6 fraction digits).

    Raises:
        MalformedError: anything else.
    """
    if not isinstance(recorded_at, str) or not is_timestamp(recorded_at):
        raise MalformedError("recorded_at", f"not an RFC 3339 UTC timestamp: {recorded_at!r}")
    return recorded_at


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC text of an aware datetime, in microseconds: ``2025-01-02T03:04:05.000000Z``.

    Raises:
        MalformedError: ``moment`` is naive (no time zone).
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise MalformedError("recorded_at", "a naive datetime has no defined UTC instant")
    # isoformat, not strftime: strftime imports the time module on every call (a live request
    # formats a moment or two), and its %Y writes a year before 1000 with fewer than 4 digits.
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def format_age(age_ms: int) -> str:
    """The one human form of an age or a duration in every text output: ``45s``,
    ``13m52s``, ``1h02m`` (whole seconds, rounded down; a negative value reads ``0s``). JSON
    output keeps milliseconds (``snapshotAgeMs``, ``leaseMs``)."""
    seconds = max(0, age_ms) // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
