"""``rensei init``: create or confirm a home directory, its database and host key. Prints where
the home is and the public key id; must never print the private key."""

from __future__ import annotations

from pathlib import Path

import click

from ..control.snapshots import ensure_serve_token, start_snapshots_after
from ..store.home import DEFAULT_ORG
from ._output import emit, note, printable
from ._root import cli, echo_json, home_option, json_option
from ._store import home_of


@cli.command(name="init")
@click.option(
    "--org",
    default=None,
    help=f"Organisation id of a new home (default: {DEFAULT_ORG}); an existing home keeps its own.",
)
@click.option(
    "--start-after",
    type=click.IntRange(min=0, max=2**53 - 2),
    default=None,
    metavar="REV",
    help="Publish this home's first snapshot as revision REV+1: a new control home taking over "
    "an org (key rotation) starts after the old home's latest revision, so hosts adopt it.",
)
@home_option
@json_option
def init(org: str | None, start_after: int | None, home: Path, json_: bool) -> None:
    """Create the home, its SQLite store, the host signing key and the snapshot endpoint's
    bearer token (idempotent; an existing key or token is never replaced)."""
    info = home_of(home).init(org=org)
    ensure_serve_token(home_of(home))
    if start_after is not None:
        start_snapshots_after(home_of(home), start_after)
    for warning in info.warnings:
        note(f"warning: {warning}")
    where = info.path.resolve()
    if json_:
        echo_json({**info.to_dict(), "home": str(where)})
        return
    state = "initialised" if info.created else "already initialised"
    after = "" if start_after is None else f"; snapshots start after revision {start_after}"
    emit(
        printable(
            f"{state}: rensei home at {where} (org {info.org}, host key {info.key_id}{after})"
        )
    )
