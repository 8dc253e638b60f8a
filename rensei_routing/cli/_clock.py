"""The CLI's clock. ``RENSEI_REHEARSAL_CLOCK_OFFSET_S`` (seconds, may be negative) shifts it,
for outage rehearsals that must cross DegradedAfter and RefuseAfter without waiting half an
hour; a shifted clock is announced on stderr every time it is read by a command, never silent.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Final

import click

from ..core.timestamps import format_timestamp
from ._output import note

OFFSET_ENV: Final = "RENSEI_REHEARSAL_CLOCK_OFFSET_S"
_warned: list[bool] = []


def _offset() -> dt.timedelta:
    raw = os.environ.get(OFFSET_ENV)
    if not raw:
        return dt.timedelta(0)
    try:
        seconds = float(raw)
    except ValueError as e:
        raise click.UsageError(f"{OFFSET_ENV}={raw!r} is not a number of seconds") from e
    if not -1e9 < seconds < 1e9:
        raise click.UsageError(f"{OFFSET_ENV}={raw!r} is out of range")
    if not _warned:
        _warned.append(True)
        note(f"note: rehearsal clock: now is shifted by {seconds:+g} s")
    return dt.timedelta(seconds=seconds)


def now() -> dt.datetime:
    """The current UTC time (shifted in a rehearsal)."""
    return dt.datetime.now(dt.UTC) + _offset()


def now_text() -> str:
    """:func:`now` as RFC 3339 UTC with microseconds."""
    return format_timestamp(now())
