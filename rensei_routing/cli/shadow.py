"""``rensei shadow ...``: record spawns as shadow decisions, report agreement from the chain, and
the kill switch. Must not hold routing rules (core) or SQL (store); prints data on stdout,
progress (on a terminal), notes and warnings on stderr.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Final

import click

from ..core.audit.chain import AuditRecord
from ..core.routing.policy import PolicySnapshot
from ..core.shadow.compare import DIVERGENCES, ShadowDecision, is_shadow_payload
from ..core.shadow.report import GROUPINGS, ReportRow, ShadowReport
from ..core.shadow.spawn import Spawn, check_spawn
from ..errors import InputError, MalformedError, RenseiRoutingError, UnknownSeamError
from ..plugins.manager import SeamRegistry, has_observers
from ..shadow.recorder import ShadowRecorder, set_shadow_enabled, shadow_enabled
from ..shadow.whatif import recorded_since
from ..store.audit import AuditLog
from ..store.home import Home
from ._inputs import _label, _named, _read_text, parse_json
from ._output import emit, note, printable
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session
from ._store import notify_observers, now_rfc3339

#: Spawns per ``append_many`` transaction in ``shadow record``.
DEFAULT_BATCH: Final = 5_000
_RELATIVE = re.compile(r"(\d{1,9})([smhd])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def cli_seams() -> SeamRegistry:
    """The seams of this invocation's plugins (``--no-plugins`` and
    ``RENSEI_ROUTING_LOAD_PLUGINS`` apply).

    Raises:
        PluginError: a plugin is broken or two claim one seam.
    """
    return session().seams()


class SinceType(click.ParamType[dt.datetime, Any]):
    """``--since``: an RFC 3339 time (``Z`` or an offset), a date (``YYYY-MM-DD``, midnight
    UTC), or an age such as ``90m``, ``24h``, ``7d`` (before now)."""

    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        text = str(value).strip()
        relative = _RELATIVE.fullmatch(text)
        if relative:
            try:
                return dt.datetime.now(dt.UTC) - dt.timedelta(
                    **{_UNITS[relative[2]]: int(relative[1])}
                )
            except OverflowError:
                self.fail(f"{text!r} reaches back before the year 1")
        try:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r} is not an RFC 3339 time, a date, or an age like 24h or 7d")
        if moment.tzinfo is None:
            if len(text) > 10:  # a time without a zone: refuse to guess one
                self.fail(f"{text!r} has no time zone (add Z or an offset)")
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC)


SINCE = SinceType()


def since_option(f: Any) -> Any:
    return click.option(
        "--since",
        type=SINCE,
        default=None,
        help="Only records at or after TIME (RFC 3339, YYYY-MM-DD, or an age: 90m, 24h, 7d).",
    )(f)


@cli.group(name="shadow")
def shadow() -> None:
    """Shadow decisions: record spawns beside policy, report agreement, the kill switch."""


# -- the switch ---------------------------------------------------------------------------------


@shadow.command(name="enable")
@home_option
def shadow_enable(home: Path) -> None:
    """Turn shadow recording on for this home (the default)."""
    set_shadow_enabled(Home(home), True)
    emit(printable("shadow recording: on"))


@shadow.command(name="disable")
@home_option
def shadow_disable(home: Path) -> None:
    """Turn shadow recording off for this home (the kill switch, live at every seam)."""
    set_shadow_enabled(Home(home), False)
    emit(printable("shadow recording: off"))


@shadow.command(name="status")
@home_option
@json_option
def shadow_status(home: Path, json_: bool) -> None:
    """Whether shadow recording is on for this home."""
    on = shadow_enabled(Home(home))
    if json_:
        echo_json({"enabled": on})
    else:
        emit(printable(f"shadow recording: {'on' if on else 'off'}"))


# -- record -------------------------------------------------------------------------------------


def read_spawn_lines(source: str, registry: SeamRegistry, seam: str | None) -> list[Spawn]:
    """Every spawn of a JSON Lines file (blank lines skipped), each checked against its seam,
    all before any is used.

    Raises:
        InputError: naming the line (and field) of the first bad one.
    """
    label = _label(source)
    spawns = []
    for number, line in enumerate(_read_text(source).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{label}:{number}"
        spawn = _named(
            where, lambda doc: Spawn.from_dict(doc, default_seam=seam), parse_json(line, where)
        )
        if seam is not None and spawn.seam != seam:
            raise MalformedError(f"{where}: seam", f"{spawn.seam!r} contradicts --seam {seam!r}")
        try:
            known = registry.get(spawn.seam)
        except UnknownSeamError as e:
            raise MalformedError(f"{where}: seam", str(e)) from e
        _named(where, functools.partial(check_spawn, seam=known), spawn)
        spawns.append(spawn)
    return spawns


def _tally_line(row: ReportRow) -> str:
    div = ", ".join(f"{k} {v:,}" for k, v in row.divergence if k != "none" and v)
    return (
        f"agreed {row.agreed:,} ({_pct(row.agreement_rate)}); divergence: {div or 'none'}; "
        f"held {row.held:,}, rejected {row.rejected:,}; direct-http {row.direct_http:,} "
        f"({_pct(row.direct_http_share)})"
    )


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
@home_option
@json_option
def shadow_record(spawns: Path, seam: str | None, batch: int, home: Path, json_: bool) -> None:
    """Record every spawn of SPAWNS.jsonl ('-' for stdin) as a shadow decision.

    Each line is one spawn: seam, principal_id, repo, repo_class, role, model_requirement,
    face, accounts, and either "stages" (with "model" and "account_id") or "route" (the final
    route only). Every line is checked before anything is recorded; the records are appended
    in batches (one transaction each) against one policy revision. Refused while shadow
    recording is off (rensei shadow enable).
    """
    where = Home(home)
    where.info()  # refuse before reading: an uninitialised home records nothing
    if not shadow_enabled(where):
        raise CommandError("shadow recording is off for this home (rensei shadow enable)")
    registry = cli_seams()
    if seam is not None:
        registry.get(seam)
    items = read_spawn_lines(str(spawns), registry, seam)
    report = ShadowReport()
    first_seq, last_seq, snapshot = record_spawns(
        where, registry, items, batch=batch, report=report
    )
    snap, state = snapshot
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
        emit(printable(_tally_line(total)))


def record_spawns(
    where: Home,
    registry: SeamRegistry,
    items: list[Spawn],
    *,
    batch: int = DEFAULT_BATCH,
    report: ShadowReport,
    label: str = "recording",
) -> tuple[int | None, int | None, tuple[PolicySnapshot, str]]:
    """Record checked spawns as shadow decisions against one policy revision, in transactions
    of ``batch``, adding each record to ``report`` and telling observers (``shadow record``
    and ``quickstart``). A progress bar on a terminal's stderr for more than one batch.

    Returns ``(first seq, last seq, (policies, load state))``; the seqs are ``None`` when
    nothing was recorded.

    Raises:
        RenseiRoutingError: nothing was recorded; CommandError: a later batch failed (the
            message says what was recorded).
    """
    first_seq: int | None = None
    last_seq: int | None = None
    with ShadowRecorder(
        where,
        registry,
        clock=now_rfc3339,
        vocabulary=session().vocabulary(),
        redactor=session().redactor(),
    ) as recorder:
        snapshot = recorder.snapshot()
        show = sys.stderr.isatty() and len(items) > batch
        bar = (
            click.progressbar(length=len(items), label=label, file=sys.stderr)
            if show
            else nullcontext()
        )
        with bar as progress:
            for start in range(0, len(items), batch):
                chunk = items[start : start + batch]
                try:
                    records, result = recorder.record_many(chunk, snapshot=snapshot)
                except RenseiRoutingError as e:
                    if not start:
                        raise  # nothing was recorded
                    raise CommandError(
                        f"recorded {start:,} of {len(items):,} spawns "
                        f"(seqs {first_seq}..{last_seq}), then: {e}"
                    ) from e
                for r in records:
                    report.add(r)
                if first_seq is None:
                    first_seq = result.first_seq
                last_seq = result.first_seq + result.count - 1
                if progress is not None:
                    progress.update(len(chunk))
    if first_seq is not None and last_seq is not None:
        _notify(where, range(first_seq, last_seq + 1))
    return first_seq, last_seq, snapshot


def _notify(home: Home, seqs: range) -> None:
    """Tell ``decision_recorded`` observers about the committed shadow records, in batches."""
    if not has_observers(session().pm):
        return
    with AuditLog.open(home) as log:
        for start in range(seqs.start, seqs.stop, 1_000):
            notify_observers([log.get(q) for q in range(start, min(start + 1_000, seqs.stop))])


# -- report -------------------------------------------------------------------------------------


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


_HEADER: Final = (
    "spawns",
    "agreed",
    "rate",
    *(k for k in DIVERGENCES if k != "none"),
    "direct-http",
    "share",
    "held",
    "rejected",
)


def render_report(by: str | None, rows: tuple[ReportRow, ...], total: ReportRow) -> str:
    """The report as an aligned text table, one row per group and a total row."""
    table: list[tuple[str, ...]] = [(by or "group", *_HEADER)]

    def cells(row: ReportRow) -> tuple[str, ...]:
        div = dict(row.divergence)
        return (
            printable(row.group),
            f"{row.spawns:,}",
            f"{row.agreed:,}",
            _pct(row.agreement_rate),
            *(f"{div[k]:,}" for k in DIVERGENCES if k != "none"),
            f"{row.direct_http:,}",
            _pct(row.direct_http_share),
            f"{row.held:,}",
            f"{row.rejected:,}",
        )

    table.extend(cells(r) for r in rows)
    if by is not None:
        table.append(cells(total))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = []
    for r in table:
        first = r[0].ljust(widths[0])
        lines.append(
            "  ".join([first, *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])
        )
    return "\n".join(lines)


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
    with AuditLog.open(Home(home)) as log:
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
                report.add(ShadowDecision.from_dict(payload, path=f"audit[{record.seq}]"))
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
        yield record, payload
