"""``rensei backup DEST`` and ``rensei restore SRC``: the CLI of :mod:`rensei_routing.ops.backup`.
Owns the messages and the name an old home is set aside under; no copying or checks of its own.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..ops.backup import BackupManifest, backup_home, restore_home
from ..store.audit import read_checkpoint
from ._clock import now_text
from ._output import note
from ._root import cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of, require_output_dir


def _summary(m: BackupManifest) -> str:
    revisions = len(m.policy_revisions)
    return (
        f"{m.records:,} audit records (head {m.head_hash}, {m.checkpoints} checkpoint(s)), "
        f"{revisions} policy revision(s), snapshot {m.snapshot or '-'}, org {m.org}, "
        f"key {m.key_id}"
    )


@cli.command(name="backup", short_help="Copy the home, online and verified, to the new DEST.")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@home_option
@json_option
def backup(dest: Path, home: Path, json_: bool) -> None:
    """Copy the home to the new directory DEST while it stays in use: the database through
    SQLite's online backup API (one consistent snapshot; writers keep appending), the keys,
    the host cache and config.toml, and a manifest. The copy is verified (chain, checkpoints,
    policy hashes, snapshot signature) before DEST appears; DEST must not exist. DEST holds
    the private key: keep it as safe as the home."""
    require_output_dir(dest)
    manifest = backup_home(
        home_of(home), dest, created_at=now_text(), vocabulary=session().vocabulary()
    )
    if json_:
        echo_json({"backup": str(dest), **manifest.to_dict()})
        return
    note(f"backed up {home} to {dest}: {_summary(manifest)}")


def _set_aside(target: Path) -> Path:
    stamp = now_text().replace(":", "").replace("-", "").split(".")[0]
    return target.with_name(f"{target.name}.replaced-{stamp}")


@cli.command(
    name="restore", short_help="Restore a backup as the home, verified before it replaces it."
)
@click.argument("src", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing home (it is renamed to <home>.replaced-<time>, not deleted). "
    "Stop every writer first.",
)
@click.option(
    "checkpoint_files",
    "--checkpoint",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint note FILE kept off the host (`rensei audit checkpoint --output`) that the "
    "restored chain must hold (repeatable): catches a backup cut short.",
)
@home_option
@json_option
def restore(
    src: Path, force: bool, checkpoint_files: tuple[Path, ...], home: Path, json_: bool
) -> None:
    """Restore the backup SRC (made by `rensei backup`) as the home. The copy is staged beside
    the home and verified (the manifest's signature by the backup's host key; the database and
    every other file, keys, host cache, trusted keys and config.toml, against the digests the
    manifest names; the chain, its checkpoints and each --checkpoint FILE; every policy
    revision's hash; the snapshot's signature; and that it matches the manifest) before it
    takes the home's place; an existing home is refused without --force. Exit 0 restored and
    verified, 1 otherwise (nothing replaced)."""
    checkpoints = [read_checkpoint(p) for p in checkpoint_files]
    manifest, aside = restore_home(
        src,
        home,
        force=force,
        created_at=now_text(),
        set_aside=_set_aside,
        vocabulary=session().vocabulary(),
        checkpoints=checkpoints,
    )
    if aside is not None:
        note(f"the previous home was moved to {aside}")
    if json_:
        echo_json(
            {
                "restored": str(home),
                "previous": None if aside is None else str(aside),
                **manifest.to_dict(),
            }
        )
        return
    note(f"restored {src} to {home}, verified: {_summary(manifest)}")
