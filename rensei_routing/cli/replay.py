"""``rensei audit replay``: every recorded decision decided again from its stored inputs
(:mod:`rensei_routing.ops.replay` owns the rules; this module parses and prints). Attached to
the ``audit`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._inputs import SEQ
from ._output import emit, note, printable
from ._root import CommandError, echo_json, home_option, json_option
from ._session import session
from .audit import audit

if TYPE_CHECKING:
    from ..store.audit import AuditLog


class ReplayMismatchError(CommandError):
    """A replayed decision disagreed with its record: exit 1."""

    exit_code = 1


class ReplayIncompleteError(CommandError):
    """Nothing mismatched, but some records could not be replayed: exit 4, so a script never
    reads a partial replay as a clean one."""

    exit_code = 4


@audit.command(name="replay")
@click.option("--since", type=SEQ, default=0, show_default=True, help="The first seq to replay.")
@click.option(
    "--segment",
    metavar="NAME",
    default=None,
    help="Replay only this segment: a sealed one by its name <first>-<last> (as in "
    "<home>/audit/segments/), or 'live'. With --since, the later of the two starts.",
)
@home_option
@json_option
def audit_replay(since: int, segment: str | None, home: Path, json_: bool) -> None:
    """Re-run the resolver on every recorded decision's stored context against the policy
    revision it cites (and every claim's grant check against its snapshot), and check outcome,
    reason, policy, account, model and decision id, across every segment present (or one,
    with --segment). Exit 0 when every record that carries a decision was replayed and
    matched, 1 on any mismatch (a revision this home never held included), 4 when nothing
    mismatched but some records could not be replayed (a snapshot no longer held, an input
    the decision read lost to redaction: the lines say which)."""
    from ..ops.replay import Sources, replay_chain
    from ..store.audit import AuditLog
    from ._store import home_of

    h = home_of(home)
    vocabulary = session().vocabulary()
    redactor = session().redactor()
    with AuditLog.open(h, redactor=redactor) as log:
        stop = None
        if segment is not None:
            first, stop = _segment_bounds(log, segment)
            since = max(since, first)
        total = max(0, (log.head()[0] if stop is None else stop) - since)
        show = sys.stderr.isatty() and total > 0
        bar = click.progressbar(length=total, label="replaying", file=sys.stderr) if show else None
        seen = [since]

        def progress(seq: int) -> None:
            if bar is not None:
                bar.update(max(0, seq - seen[0]))
                seen[0] = max(seen[0], seq)

        try:
            summary = replay_chain(
                log,
                Sources(h, vocabulary=vocabulary),
                since=since,
                stop=stop,
                vocabulary=vocabulary,
                redactor=redactor,
                progress=progress,
            )
        finally:
            if bar is not None:
                bar.render_finish()
    if json_:
        echo_json(summary.to_dict())
    else:
        for line in summary.lines():
            emit(printable(line))
    if summary.first_mismatch is not None:
        seq, field_name = summary.first_mismatch
        raise ReplayMismatchError(
            f"{summary.mismatched:,} replayed decision(s) disagree with their records "
            f"(first: seq {seq}, field {field_name})"
        )
    if not summary.ok:
        raise ReplayIncompleteError(
            f"{summary.unreplayable_count:,} record(s) could not be replayed; "
            f"none of the {summary.replayed:,} replayed disagreed"
        )
    if not summary.replayed:
        note("note: nothing was replayed")


def _segment_bounds(log: AuditLog, name: str) -> tuple[int, int | None]:
    """``(first seq, stop)`` of the segment called ``name`` (``live``: to the end).

    Raises:
        CommandError: no such segment, or it was pruned.
    """
    from ..store.audit.recovery import catalog_of

    catalog = catalog_of(log)
    if name == "live":
        return (catalog[-1].last_seq + 1 if catalog else 0), None
    for seg in catalog:
        if seg.name == name:
            if seg.pruned:
                raise CommandError(f"segment {name} was pruned: replay its export's home instead")
            return seg.first_seq, seg.last_seq + 1
    known = ", ".join([s.name for s in catalog if not s.pruned] + ["live"])
    raise CommandError(f"no audit segment {name!r} (segments: {known})")
