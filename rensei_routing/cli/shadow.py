"""``rensei shadow ...``: record spawns as shadow decisions, report agreement from the chain, and
the kill switch. Must not hold routing rules (core) or SQL (store); prints data on stdout,
progress (on a terminal), notes and warnings on stderr.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..core.audit.chain import AuditRecord
from ..core.audit.hydraflow import imported_payload
from ..core.shadow.compare import ShadowDecision, is_shadow_payload
from ..core.shadow.report import GROUPINGS, ShadowReport
from ..errors import (
    InputError,
)
from ..plugins.manager import SeamRegistry
from ..shadow.batch import DEFAULT_BATCH
from ..shadow.recorder import set_shadow_enabled, shadow_enabled
from ..shadow.whatif import recorded_since
from ..store.audit import AuditLog
from ._inputs import read_spawn_lines, since_option
from ._output import emit, next_step, note, printable
from ._render import render_report, tally_line
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of, record_spawns

#: Spawns per ``append_many`` transaction in ``shadow record``.


def cli_seams() -> SeamRegistry:
    """The seams of this invocation's plugins (``--no-plugins`` and
    ``RENSEI_ROUTING_LOAD_PLUGINS`` apply).

    Raises:
        PluginError: a plugin is broken or two claim one seam.
    """
    return session().seams()


@cli.group(name="shadow")
def shadow() -> None:
    """Shadow decisions: record spawns beside policy, report agreement, the kill switch."""


# -- the switch ---------------------------------------------------------------------------------


@shadow.command(name="enable")
@home_option
def shadow_enable(home: Path) -> None:
    """Turn shadow recording on for this home (the default)."""
    set_shadow_enabled(home_of(home), True)
    note("shadow recording: on")


@shadow.command(name="disable")
@home_option
def shadow_disable(home: Path) -> None:
    """Turn shadow recording off for this home (the kill switch, live at every seam)."""
    set_shadow_enabled(home_of(home), False)
    note("shadow recording: off")


@shadow.command(name="status")
@home_option
@json_option
def shadow_status(home: Path, json_: bool) -> None:
    """Whether shadow recording is on for this home."""
    on = shadow_enabled(home_of(home))
    if json_:
        echo_json({"enabled": on})
    else:
        emit(printable(f"shadow recording: {'on' if on else 'off'}"))


# -- record -------------------------------------------------------------------------------------


@shadow.command(name="record")
@click.argument("spawns", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--seam", default=None, help="Seam of every line that names none.")
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=100_000),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Spawns per transaction.",
)
@click.option(
    "--trace",
    type=click.Choice(["compact", "full"]),
    default="compact",
    show_default=True,
    help="Explanation each record stores: the winner and its ties with the rest counted "
    "(compact; `rensei audit show SEQ --full` re-derives the full trace), or every policy and "
    "account (full).",
)
@home_option
@json_option
def shadow_record(
    spawns: Path, seam: str | None, batch: int, trace: str, home: Path, json_: bool
) -> None:
    """Record every spawn of SPAWNS.jsonl ('-' for stdin) as a shadow decision.

    Each line is one spawn: seam, principal_id, repo, repo_class, role, model_requirement,
    face, accounts, and either "stages" (with "model" and "account_id") or "route" (the final
    route only). Every line is checked before anything is recorded; the records are appended
    in batches (one transaction each) against one policy revision. Refused while shadow
    recording is off (rensei shadow enable).
    """
    where = home_of(home)
    where.info()  # refuse before reading: an uninitialised home records nothing
    if not shadow_enabled(where):
        raise CommandError("shadow recording is off for this home (rensei shadow enable)")
    registry = cli_seams()
    if seam is not None:
        registry.get(seam)
    items = read_spawn_lines(str(spawns), registry, seam)
    report = ShadowReport()
    recorded = record_spawns(
        where,
        registry,
        items,
        batch=batch,
        report=report,
        trace="full" if trace == "full" else "compact",
    )
    first_seq, last_seq = recorded.first_seq, recorded.last_seq
    snap, state = recorded.snapshot
    total = report.total
    if json_:
        echo_json(
            {
                "recorded": total.spawns,
                "first_seq": first_seq,
                "last_seq": last_seq,
                "policy_revision": snap.revision,
                "snapshot_state": state,
                **total.to_dict(),
            }
        )
        return
    seqs = "" if first_seq is None else f" (seqs {first_seq}..{last_seq})"
    emit(
        printable(
            f"recorded {total.spawns:,} spawns{seqs} against revision {snap.revision} ({state})"
        )
    )
    if total.spawns:
        emit(printable(tally_line(total)))


# -- report -------------------------------------------------------------------------------------


@shadow.command(name="report")
@click.option("--by", type=click.Choice(GROUPINGS), default=None, help="Group the figures.")
@since_option
@click.option(
    "--unverified", is_flag=True, help="Report even though the audit chain does not verify."
)
@home_option
@json_option
def shadow_report(
    by: str | None, since: dt.datetime | None, unverified: bool, home: Path, json_: bool
) -> None:
    """Agreement rate, divergence kinds, ungoverned direct-HTTP share and held/rejected counts
    of the shadow records in the audit chain, per group.

    The chain is verified first and a chain that does not verify is refused (exit 1) unless
    --unverified; only the records verified are counted.
    """
    report = ShadowReport(by)
    unreadable: list[int] = []
    other = 0
    with AuditLog.open(home_of(home)) as log:
        stop: int | None = None
        if not unverified:
            result = log.verify()
            if not result:
                seq = "-" if result.first_broken_seq is None else str(result.first_broken_seq)
                raise CommandError(
                    f"audit log does not verify (seq {seq}: {result.reason}); refusing to "
                    "report from it (--unverified to report anyway)"
                )
            stop = result.records_checked
        for record, payload in _payloads(log, stop, since, unreadable):
            if not is_shadow_payload(payload):
                other += 1
                continue
            try:
                # A stored record is read as stored: redaction markers accepted.
                report.add(
                    ShadowDecision.from_dict(payload, path=f"audit[{record.seq}]", redacted=True)
                )
            except InputError:
                unreadable.append(record.seq)
    if unreadable:
        note(
            f"warning: {len(unreadable):,} record(s) could not be read as shadow decisions "
            f"(first: seq {unreadable[0]}); not counted"
        )
    total = report.total
    if json_:
        echo_json(
            {
                "by": by,
                "verified": not unverified,
                "since": None if since is None else since.isoformat().replace("+00:00", "Z"),
                "other_records": other,
                "unreadable_records": len(unreadable),
                "total": total.to_dict(),
                "groups": [r.to_dict() for r in report.rows()] if by is not None else [],
            }
        )
        return
    if not total.spawns:
        emit(printable("no shadow records" + ("" if since is None else " in that period")))
        if since is None:
            next_step("nothing was recorded in shadow mode", "rensei shadow record SPAWNS.jsonl")
        return
    emit(render_report(by, report.rows() if by is not None else (total,), total))


def _payloads(  # every parseable payload below ``stop`` at or after ``since``
    log: AuditLog, stop: int | None, since: dt.datetime | None, unreadable: list[int]
) -> Iterator[tuple[AuditRecord, Any]]:
    for record in log.records(stop=stop):
        if not recorded_since(record, since):
            continue
        try:
            payload = record.payload
        except InputError:
            unreadable.append(record.seq)
            continue
        yield record, imported_payload(payload)  # an imported HydraFlow record counts as one


# -- index --------------------------------------------------------------------------------------


@shadow.command(name="index")
@home_option
@json_option
def shadow_index_cmd(home: Path, json_: bool) -> None:
    """Bring the shadow index (what `rensei ui` reads agreement figures from) up to the chain's
    head: records appended before this version, or by writers other than the shadow recorder.
    The recorder keeps it up to date as it appends; this never changes the chain."""
    from ..store.shadow_index import catch_up_all

    where = home_of(home)
    where.info()
    before, after = catch_up_all(where)
    if json_:
        echo_json({"indexed_from": before, "indexed_to": after})
    else:
        emit(printable(f"shadow index: seqs {before:,} to {after:,} indexed; up to date"))
