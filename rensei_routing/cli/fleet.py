"""``rensei fleet ...``: trust hosts' keys, ingest hosts' audit exports into the fleet's
PostgreSQL database, report agreement and hosts' state across the fleet, repair a host's held
copy after a fork. Parses and prints; the rules are :mod:`rensei_routing.fleet`'s. Every
refusal is one ``Error:`` line and exit 1.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from .. import signing
from ..errors import FleetError, FleetForkError
from ._output import emit, note, printable
from ._root import CommandError, cli, echo_json, json_option, unused_home_option

F = TypeVar("F", bound=Callable[..., Any])

_URL_ENV = "RENSEI_FLEET_URL"


def _url_option(flag: str) -> Callable[[F], F]:
    return click.option(
        "url",
        flag,
        metavar="URL",
        envvar=_URL_ENV,
        required=True,
        help=f"The fleet database: postgresql://user@host:port/dbname (env {_URL_ENV}).",
    )


@contextmanager
def _connected(url: str) -> Iterator[Any]:
    from ..fleet.db import connect

    conn = connect(url)
    try:
        yield conn
    finally:
        conn.close()


@cli.group(name="fleet")
def fleet() -> None:
    """Fleet evidence in PostgreSQL: trust hosts' keys, ingest their audit exports, report,
    repair."""


@fleet.command(name="trust")
@click.argument("host_id", metavar="HOST_ID")
@click.argument("keyfile", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@_url_option("--to")
@unused_home_option
@json_option
def fleet_trust(host_id: str, keyfile: Path, url: str, json_: bool) -> None:
    """Trust KEYFILE (a host's public key, ed25519:<base64>: its <home>/keys/host.pub) as the
    key that signs HOST_ID's audit checkpoints. Idempotent; another key for a trusted host, or
    a trusted key for another host, is refused."""
    from ..fleet.trust import trust_host

    key = signing.load_public_key(keyfile)
    with _connected(url) as conn:
        result = trust_host(conn, host_id, key)
    if json_:
        echo_json(result.to_dict())
        return
    state = "trusted" if result.added else "already trusted"
    emit(printable(f"{state}: host {result.host_id} with key {result.key_id}"))


@fleet.command(name="ingest")
@click.argument(
    "paths", metavar="FILE...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@_url_option("--to")
@unused_home_option
@json_option
def fleet_ingest(paths: tuple[Path, ...], url: str, json_: bool) -> None:
    """Verify and load hosts' audit exports (`rensei audit export NAME.jsonl`, each with its
    checkpoint `rensei audit checkpoint -o NAME.checkpoint` beside it; a directory: its
    *.jsonl). Each file is verified against its checkpoint and the trusted key of the host that
    signed it before a line is loaded, then loaded in one transaction: only the records not
    held yet, up to the checkpoint. A fork of what was ingested before raises an alarm naming
    the host and seq. Every file is tried; exit 1 if any was refused."""
    from ..fleet.ingest import IngestResult, ingest_paths

    with _connected(url) as conn:
        outcomes = ingest_paths(conn, list(paths))
    refused = [(p, o) for p, o in outcomes if isinstance(o, FleetError)]
    if json_:
        echo_json(
            [o.to_dict() if isinstance(o, IngestResult) else _refusal(p, o) for p, o in outcomes]
        )
    else:
        for _path, outcome in outcomes:
            if isinstance(outcome, IngestResult):
                emit(printable(_ingested_line(outcome)))
    for path, error in refused:
        if not json_ or isinstance(error, FleetForkError):
            label = "ALARM" if isinstance(error, FleetForkError) else "refused"
            note(printable(f"{label}: {path}: {error}"))
    if refused:
        raise CommandError(f"{len(refused):,} of {len(outcomes):,} export(s) refused")


def _refusal(path: Path, error: FleetError) -> dict[str, Any]:
    return {
        "file": str(path),
        "refused": str(error),
        "fork": isinstance(error, FleetForkError),
        "host_id": getattr(error, "host_id", None),
        "seq": getattr(error, "seq", None),
    }


def _ingested_line(r: Any) -> str:
    where = f" (seqs {r.first_added}..{r.first_added + r.added - 1})" if r.added else ""
    beyond = f"; {r.beyond:,} past its checkpoint not loaded" if r.beyond else ""
    return (
        f"{r.file}: host {r.host_id}: added {r.added:,} record(s){where}; holds {r.held:,}, "
        f"head {r.head_hash}{beyond}"
    )


@fleet.command(name="report")
@_url_option("--from")
@click.option(
    "--stale-after",
    type=click.IntRange(min=1),
    default=3600,
    show_default=True,
    metavar="SECONDS",
    help="A host with no ingest for longer has stopped reporting.",
)
@click.option(
    "--revision",
    type=click.IntRange(min=0),
    default=None,
    help="The snapshot revision hosts should run (default: the newest any host of the org cites).",
)
@unused_home_option
@json_option
def fleet_report_command(url: str, stale_after: int, revision: int | None, json_: bool) -> None:
    """Agreement across the fleet by host, repo, role, mechanism and seam; each host's head,
    last ingest, lag and snapshot revision; hosts that forked, stopped reporting or run an old
    revision. Computed in SQL by PostgreSQL (its clock is now)."""
    from ..fleet.report import fleet_report

    with _connected(url) as conn:
        report = fleet_report(
            conn, stale_after=dt.timedelta(seconds=stale_after), revision=revision
        )
    if json_:
        echo_json(report.to_dict())
        return
    for line in _report_lines(report):
        emit(printable(line))


def _rate(row: Any) -> str:
    rate = row.agreement_rate
    return "-" if rate is None else f"{rate:.1%}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _ago(seconds: float | None) -> str:
    return "never ingested" if seconds is None else f"{_age(seconds)} ago"


def _report_lines(report: Any) -> list[str]:
    t = report.total
    kinds = ", ".join(f"{k} {n:,}" for k, n in t.divergence if n and k != "none") or "none"
    lines = [
        f"fleet: {len(report.hosts):,} host(s), {t.spawns:,} shadow record(s), agreed "
        f"{t.agreed:,} ({_rate(t)}); divergence: {kinds}; held {t.held:,}, rejected "
        f"{t.rejected:,}; direct-http {t.direct_http:,}; other records {report.other_records:,}"
    ]
    for dim, rows in report.groups.items():
        lines.append(f"by {dim}:")
        width = max((len(r.group) for r in rows), default=0)
        lines.extend(
            f"  {r.group:<{width}}  {r.spawns:>9,} spawns  agreed {_rate(r):>6}  "
            f"held {r.held:,}  rejected {r.rejected:,}  direct-http {r.direct_http:,}"
            for r in rows
        )
    lines.append("hosts (records, head, last ingest, lag, snapshot, policy revision, state):")
    for h in report.hosts:
        state = [
            *([f"FORKED at seq {h.forked_seq}"] if h.forked_seq is not None else []),
            *(["STOPPED REPORTING"] if h.stale else []),
            *(["OLD REVISION"] if h.old_revision else []),
        ]
        lines.append(
            f"  {h.host_id}  {h.records:,}  {h.head_hash[:19]}  {_ago(h.since_ingest_s)}  "
            f"lag {_age(h.lag_s)}  {h.ruleset_rev or '-'}  "
            f"{'-' if h.policy_revision is None else h.policy_revision}  "
            f"{', '.join(state) or 'ok'}"
        )
    for label, hosts in (
        ("forked", report.forked),
        ("stopped reporting", report.stale),
        ("old revision", report.old_revision),
    ):
        if hosts:
            lines.append(f"{label}: {', '.join(h.host_id for h in hosts)}")
    return lines


@fleet.command(name="repair")
@click.argument("host_id", metavar="HOST_ID")
@click.option(
    "--at",
    "at",
    type=click.IntRange(min=0),
    default=None,
    metavar="SEQ",
    help="Truncate at this seq (default: the seq of the host's fork).",
)
@_url_option("--to")
@unused_home_option
@json_option
def fleet_repair(host_id: str, at: int | None, url: str, json_: bool) -> None:
    """Truncate HOST_ID's held copy at SEQ after a fork was investigated, in one transaction:
    its records from SEQ on are deleted with their counts in the report, its size and head set
    to SEQ and the record before it, its fork mark cleared (the alarm stays, beside a repair
    row); then ingest its genuine export again. SEQ must not keep a disputed record: the fork's
    seq or below, or the records held (keeping the held copy). Refused, changing nothing: a host
    not trusted, a SEQ past the records held or inside the disputed ones."""
    from ..fleet.repair import repair_host

    with _connected(url) as conn:
        result = repair_host(conn, host_id, at)
    if json_:
        echo_json(result.to_dict())
        return
    cleared = (
        f"; its fork at seq {result.fork_cleared} cleared"
        if result.fork_cleared is not None
        else ""
    )
    emit(
        printable(
            f"repaired: host {result.host_id}: truncated at seq {result.at}, removed "
            f"{result.removed:,} record(s); holds {result.held:,}, head {result.head_hash}"
            f"{cleared}"
        )
    )
