"""``rensei policy import`` and ``rensei policy export``: HydraFlow's policy store
(``policies.json``) saved as the next policy revision, through the normal validated save, and a
revision written as one. Parses and prints; the format, its spelling and its hash are
:mod:`rensei_routing.core.routing.interop`'s. Attached to the ``policy`` group.

Every refusal is one ``Error:`` line and exit 1, with nothing written.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..control.policy_writes import save_policies
from ..errors import PolicyValidationError
from ..files import atomic_write
from ._inputs import INTEROP_FORMAT, POLICY_REVISION
from ._output import note
from ._render import issue_line
from ._root import CommandError, actor_option, echo_json, home_option, json_option
from ._session import session
from ._store import (
    home_of,
    now_rfc3339,
    open_policy_store,
    refuse_home_target,
    require_output_dir,
)
from .policy import policy


@policy.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@INTEROP_FORMAT
@actor_option
@home_option
@json_option
def policy_import(file: Path, format_: str, actor: str | None, home: Path, json_: bool) -> None:
    """Check a HydraFlow policies.json FILE (its order-independent content hash, its shape) and
    save its policies as the next revision, validated like `policy save`. A corrupt store
    (unparseable, a wrong type, a hash mismatch) or an invalid policy set is refused (exit 1)
    and nothing is written. HydraFlow's revision number is reported, not reused. The save is
    audited like `policy save` (its mutation record names the actor)."""
    from ..core.routing.interop import read_hydraflow
    from ..errors import PolicyStoreCorruptError

    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as e:
        raise CommandError(f"cannot read {file}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise PolicyStoreCorruptError(
            f"{file}: corrupt HydraFlow policy store: not UTF-8 (offset {e.start})"
        ) from e
    store_doc = read_hydraflow(text, source=str(file), vocabulary=session().vocabulary())
    with open_policy_store(home, write=True) as store:
        try:
            saved = save_policies(
                store,
                store_doc.policies,
                saved_at=now_rfc3339(),
                actor=actor,
                redactor=session().redactor(),
            ).snapshot
        except PolicyValidationError as e:
            for issue in e.issues:
                click.echo(issue_line(issue), err=True)
            total = len(e.issues) + e.omitted
            raise CommandError(f"{total:,} validation issue(s); nothing was saved") from e
    if json_:
        echo_json(
            {
                "revision": saved.revision,
                "content_hash": saved.content_hash,
                "policy_count": len(saved.policies),
                "hydraflow_revision": store_doc.revision,
                "hydraflow_content_hash": store_doc.content_hash,
            }
        )
        return
    note(
        f"saved revision {saved.revision}: {len(saved.policies):,} policies, {saved.content_hash} "
        f"(HydraFlow revision {store_doc.revision}, {store_doc.content_hash}), imported from {file}"
    )


@policy.command(name="export")
@click.argument("target", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@INTEROP_FORMAT
@POLICY_REVISION
@home_option
def policy_export(target: Path, format_: str, revision: int | None, home: Path) -> None:
    """Write the current (or --rev N) policy revision to FILE as HydraFlow's policies.json
    (every field of its model, effective_model, its content hash, our revision number),
    atomically. A description is left out (HydraFlow's policy has none); a revision that
    does not load is refused and nothing is written."""
    from ..core.routing.interop import write_hydraflow

    h = home_of(home)
    require_output_dir(target)
    with open_policy_store(home, write=False) as store:
        loaded = store.load_policies(revision)
    snap = loaded.snapshot
    if loaded.state == "absent":
        raise CommandError("no policy revision saved yet: nothing to export")
    if loaded.state != "ok":
        detail = f" ({loaded.detail})" if loaded.detail else ""
        raise CommandError(
            f"policy revision {revision or snap.revision} does not load{detail}; nothing exported"
        )
    text, content_hash = write_hydraflow(snap.policies, revision=snap.revision)
    refuse_home_target(h, target)
    try:
        atomic_write(target, text.encode("utf-8"))
    except OSError as e:
        raise CommandError(f"cannot write {target}: {e.strerror or e}") from e
    dropped = sum(1 for pol in snap.policies if pol.description is not None)
    if dropped:
        note(f"note: {dropped} description(s) left out: HydraFlow's policy has no such field")
    note(
        f"exported revision {snap.revision}: {len(snap.policies)} policies, {content_hash} "
        f"(HydraFlow's hash) to {target}"
    )
