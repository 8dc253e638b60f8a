"""``rensei init``: create or confirm a home directory, its database and host key. Prints where
the home is and the public key id; must never print the private key."""

from __future__ import annotations

from pathlib import Path

import click

from ..control.snapshots import (
    control_store,
    ensure_serve_token,
    set_snapshot_key_id,
    snapshot_key_id,
    start_snapshots_after,
)
from ..errors import ConfigurationError
from ..files import removed_on_failure
from ..store.backends import attach_postgres, is_postgres_url
from ..store.home import DEFAULT_ORG
from ._output import note
from ._root import CommandError, cli, echo_json, home_option, json_option
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
@click.option(
    "--key-id",
    "key_id",
    default=None,
    metavar="ID",
    help="The key id this home's snapshots carry as signingKeyId (1..128 of [A-Za-z0-9._:-]; "
    "default: derived from the key). Set once: hosts trust the key under it.",
)
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="Keep the control side's data (policy revisions, org data, snapshots, its audit "
    "records) in this PostgreSQL database (postgresql://...; needs rensei-routing[postgres]); "
    "written to config.toml as [store] url. Keys, config and the host side stay in the home.",
)
@home_option
@json_option
def init(
    org: str | None,
    start_after: int | None,
    key_id: str | None,
    store_url: str | None,
    home: Path,
    json_: bool,
) -> None:
    """Create the home, its SQLite store, the host signing key and the snapshot endpoint's
    bearer token (idempotent; an existing key or token is never replaced). With --store, the
    control data lives in PostgreSQL, shared by every replica initialised with the same URL
    (and the same keys/: copy it from the first replica)."""
    if store_url is not None and not is_postgres_url(store_url):
        raise CommandError("--store must be a postgresql:// URL")
    with removed_on_failure(*home_of(home).init_outputs()):  # a failed init leaves nothing
        info = home_of(home).init(org=org)
        where = str(home_of(home).db_path)
        if store_url is not None:
            where = attach_postgres(home_of(home), store_url)
        elif home_of(home).store_url() is not None:
            with control_store(home_of(home)) as store:
                where = store.where
        ensure_serve_token(home_of(home))
        if start_after is not None:
            start_snapshots_after(home_of(home), start_after)
        if key_id is not None:
            try:
                set_snapshot_key_id(home_of(home), key_id)
            except ConfigurationError as e:
                raise CommandError(str(e)) from e
        kid = snapshot_key_id(home_of(home))
    for warning in info.warnings:
        note(f"warning: {warning}")
    home_dir = info.path.resolve()
    if json_:
        echo_json({**info.to_dict(), "home": str(home_dir), "snapshotKeyId": kid, "store": where})
        return
    state = "initialised" if info.created else "already initialised"
    after = "" if start_after is None else f"; snapshots start after revision {start_after}"
    if kid != info.key_id:
        after += f"; snapshots signed as key id {kid}"
    note(
        f"{state}: rensei home at {home_dir} (org {info.org}, host key {info.key_id}{after})"
        + ("" if where == str(home_of(home).db_path) else f"; control data in {where}")
    )
