"""A shadow record reduced to what the agreement figures count: its hour, its five grouping keys
(repo, role, mechanism, seam, transport), its divergence kind and its proposed outcome.

Pure. The store keeps one :class:`ShadowFact` per record (``shadow_index``) and a count per
distinct fact and hour (``shadow_cube``), so the console reads agreement tables from a few rows
instead of parsing the chain; :meth:`~rensei_routing.core.shadow.report.ShadowReport.add_fact`
counts them exactly as :meth:`~rensei_routing.core.shadow.report.ShadowReport.add` counts the
records they came from.
"""

from __future__ import annotations

import datetime as dt
from typing import Final, NamedTuple

from .compare import ShadowDecision

__all__ = ["HOUR_US", "NO_VALUE", "ShadowFact", "fact_of", "micros_of"]

#: Microseconds in an hour: ``at_us // HOUR_US`` is a record's hour (UTC, since the epoch).
HOUR_US: Final = 3_600_000_000
#: The key of a record that has no repo or role (the report's own ``(none)``).
NO_VALUE: Final = "(none)"
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ShadowFact(NamedTuple):
    """One shadow record's counted fields."""

    repo: str
    role: str
    mechanism: str
    seam: str
    transport: str
    divergence: str
    outcome: str


def micros_of(recorded_at: str) -> int:
    """An RFC 3339 UTC ``recorded_at`` (``...Z``) as microseconds since the epoch.

    Raises:
        ValueError: the text is not such a timestamp.
    """
    moment = dt.datetime.fromisoformat(recorded_at.removesuffix("Z") + "+00:00")
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def fact_of(record: ShadowDecision) -> ShadowFact:
    """The counted fields of one shadow record (the groups of
    :func:`~rensei_routing.core.shadow.report.group_key`)."""
    ctx = record.proposed.explanation.context
    return ShadowFact(
        repo=NO_VALUE if ctx.repo is None else ctx.repo.value,
        role=ctx.role or NO_VALUE,
        mechanism=record.actual.mechanism,
        seam=record.seam,
        transport=record.actual.transport,
        divergence=record.divergence,
        outcome=record.proposed.outcome,
    )
