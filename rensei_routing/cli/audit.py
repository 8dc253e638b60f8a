"""``rensei audit ...``: verify the hash-chained audit log, sign checkpoints, show records. Must
not hold chain rules (core) or SQL (store); prints data on stdout, progress on a terminal's stderr.

Exit codes of ``audit verify``: 0 intact; 1 broken (the first bad seq and reason are printed, and
an ``Error:`` line goes to stderr), or any other failure (uninitialised home, unreadable
checkpoint file); 2 usage errors.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ..core.chain import AuditRecord, VerifyResult
from ..store.audit import AuditLog, read_checkpoint
from ..store.home import Home
from ._root import CommandError, cli, echo_json, home_option, json_option


class ChainBrokenError(CommandError):
    """``audit verify`` found a broken link, a truncated log or a bad checkpoint: exit 1."""

    exit_code = 1


@cli.group(name="audit")
def audit() -> None:
    """The hash-chained decision log: verify, checkpoint, show, tail."""


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty() or total <= 0:
        yield None
        return
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        done = 0

        def update(checked: int) -> None:
            nonlocal done
            bar.update(checked - done)
            done = checked

        yield update


def _verdict(result: VerifyResult) -> str:
    if result.ok:
        return (
            f"intact: {result.records_checked} records, head {result.head_hash}, "
            f"{result.checkpoints_checked} checkpoint(s) checked"
        )
    where = "checkpoint" if result.first_broken_seq is None else f"seq {result.first_broken_seq}"
    return f"broken at {where}: {result.reason}: {result.detail}"


@audit.command(name="verify")
@click.option(
    "checkpoint_files",
    "--checkpoint",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint note FILE to hold the log to (repeatable).",
)
@home_option
@json_option
def audit_verify(checkpoint_files: tuple[Path, ...], home: Path, json_: bool) -> None:
    """Walk the whole chain; exit 0 when intact, 1 with the first broken seq and reason."""
    checkpoints = [read_checkpoint(p) for p in checkpoint_files]
    with AuditLog.open(Home(home)) as log:
        total = log.count() if sys.stderr.isatty() else 0
        with _progress(total) as progress:
            result = log.verify(checkpoints, progress=progress)
    if json_:
        echo_json(result.to_dict())
    else:
        click.echo(_verdict(result))
    if not result:
        seq = "-" if result.first_broken_seq is None else str(result.first_broken_seq)
        raise ChainBrokenError(f"audit log does not verify (seq {seq}: {result.reason})")


@audit.command(name="checkpoint")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the signed note to FILE (default: print it).",
)
@home_option
def audit_checkpoint(output: Path | None, home: Path) -> None:
    """Verify the log, then sign and store a checkpoint of its size and head hash."""
    with AuditLog.open(Home(home)) as log:
        cp = log.checkpoint(export_to=output)
    if output is None:
        click.echo(cp.to_text(), nl=False)
    else:
        click.echo(f"checkpoint of {cp.size} records ({cp.head_hash}) written to {output}")


def _record_text(record: AuditRecord) -> str:
    payload = json.dumps(record.payload, indent=2, ensure_ascii=False)
    return (
        f"seq:          {record.seq}\n"
        f"recorded_at:  {record.recorded_at}\n"
        f"prev_hash:    {record.prev_hash}\n"
        f"payload_hash: {record.payload_hash}\n"
        f"record_hash:  {record.record_hash}\n"
        f"payload:\n{payload}"
    )


@audit.command(name="show")
@click.argument("seq", type=click.IntRange(min=0))
@home_option
@json_option
def audit_show(seq: int, home: Path, json_: bool) -> None:
    """Show the record with sequence number SEQ (as stored: redacted)."""
    with AuditLog.open(Home(home)) as log:
        record = log.get(seq)
    if json_:
        echo_json(record.to_dict())
    else:
        click.echo(_record_text(record))


@audit.command(name="tail")
@click.option(
    "-n",
    "--lines",
    "n",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the latest records.",
)
@home_option
@json_option
def audit_tail(n: int, home: Path, json_: bool) -> None:
    """The latest N records, oldest first: seq, recorded_at, record hash, payload."""
    with AuditLog.open(Home(home)) as log:
        records = log.tail(n)
    if json_:
        echo_json([r.to_dict() for r in records])
        return
    for r in records:
        payload = json.dumps(r.payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        click.echo(f"{r.seq}\t{r.recorded_at}\t{r.record_hash}\t{payload}")
