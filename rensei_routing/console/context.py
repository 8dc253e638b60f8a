"""One console's shared state and the request helpers every page uses: the home, the clock,
the background watches, a read-only connection per request, query parameters and the typed
errors a page raises for a bad request or a missing thing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import apsw

from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..store.db import close_quietly
from ..store.home import Home
from .state import Doctor, Verifier, WhatIfJobs

__all__ = ["BadRequest", "Console", "NotFound", "Query", "parse_since"]

_AGE: Final = re.compile(r"^([1-9][0-9]{0,5})([mhd])$")
_UNIT: Final = {"m": 60, "h": 3600, "d": 86400}
_EARLIEST: Final = dt.datetime.min.replace(tzinfo=dt.UTC) + dt.timedelta(days=1)
_LATEST: Final = dt.datetime.max.replace(tzinfo=dt.UTC) - dt.timedelta(days=1)


class BadRequest(Exception):
    """A query parameter that does not read: a 400 page saying which."""


class NotFound(Exception):
    """No such thing (record, revision, candidate file): a 404 page."""


Query = dict[str, str]


@dataclass(slots=True)
class Console:
    """What every page of one ``rensei ui`` reads."""

    home: Home
    clock: Callable[[], dt.datetime]
    whatif_dir: Path | None
    verifier: Verifier
    doctor: Doctor
    whatif: WhatIfJobs
    vocabulary: Vocabulary = DEFAULT_VOCABULARY
    #: The fleet evidence database the fleet page reports on (``rensei ui --fleet URL``).
    fleet_url: str | None = None

    @contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """A read-only connection (``SQLITE_OPEN_READONLY``) for one request."""
        conn = self.home.connect(write=False)
        try:
            yield conn
        finally:
            close_quietly(conn)


def parse_since(text: str, now: dt.datetime) -> dt.datetime | None:
    """A ``since`` filter: empty or ``all`` for none, an age (``90m``, ``24h``, ``7d``), or an
    RFC 3339 time or ``YYYY-MM-DD`` (UTC).

    Raises:
        BadRequest: anything else.
    """
    text = text.strip()
    if not text or text == "all":
        return None
    m = _AGE.match(text)
    try:
        if m:
            moment = now - dt.timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)])
        else:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            moment = moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
        # in UTC, with room for the hour and day the pages round it to
        moment = moment.astimezone(dt.UTC)
        if not _EARLIEST <= moment <= _LATEST:
            raise OverflowError(moment)
    except ValueError:
        raise BadRequest(f"since: {text!r} is not an age (90m, 24h, 7d) or a time") from None
    except OverflowError:
        raise BadRequest(
            f"since: {text!r} is out of range (UTC years 1 to 9999, a day inside either end)"
        ) from None
    return moment


def int_param(
    q: Query, name: str, default: int | None = None, *, maximum: int | None = None
) -> int | None:
    """A non-negative integer parameter (at most ``maximum`` when given).

    Raises:
        BadRequest: present but not such an integer.
    """
    text = q.get(name, "")
    if not text:
        return default
    if not text.isdigit() or len(text) > 18:
        raise BadRequest(f"{name}: {text!r} is not a non-negative integer")
    if maximum is not None and int(text) > maximum:
        raise BadRequest(f"{name}: {text!r} is out of range (at most {maximum})")
    return int(text)
