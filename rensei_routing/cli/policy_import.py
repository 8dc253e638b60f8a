"""``rensei policy import``: HydraFlow's policy store (``policies.json``) saved as the next
policy revision, through the normal validated save. Parses and prints; the format and its hash
are :mod:`rensei_routing.core.routing.interop`'s. Attached to the ``policy`` group.

Every refusal is one ``Error:`` line and exit 1, with nothing written.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import PolicyValidationError
from ._output import note
from ._render import issue_line
from ._root import CommandError, echo_json, home_option, json_option
from ._session import session
from ._store import now_rfc3339, open_policy_store
from .policy import policy

_FORMAT = click.option(
    "format_",
    "--format",
    type=click.Choice(("hydraflow",)),
    required=True,
    help="The source's format: hydraflow (docs/interop.md).",
)


@policy.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@_FORMAT
@home_option
@json_option
def policy_import(file: Path, format_: str, home: Path, json_: bool) -> None:
    """Check a HydraFlow policies.json FILE (its order-independent content hash, its shape) and
    save its policies as the next revision, validated like `policy save`. A corrupt store
    (unparseable, a wrong type, a hash mismatch) or an invalid policy set is refused (exit 1)
    and nothing is written. HydraFlow's revision number is reported, not reused."""
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
            saved = store.save_policies(store_doc.policies, saved_at=now_rfc3339())
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
