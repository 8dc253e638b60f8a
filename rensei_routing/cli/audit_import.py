"""``rensei audit import``: a HydraFlow audit chain (``shadow-decisions.jsonl``) brought into
the home's chain. Parses and prints; the wire rules are
:mod:`rensei_routing.core.audit.hydraflow`'s, the import :mod:`rensei_routing.store.hydraflow`'s.
Attached to the ``audit`` group; ``rensei audit export --format hydraflow`` (in :mod:`.audit`)
is the way out, ``rensei policy import`` (:mod:`.policy_import`) the policy store's way in.

Every refusal is one ``Error:`` line and exit 1, with nothing written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click

from ..core.audit.archive import MAX_LINE_BYTES
from ..errors import InputError
from ._output import note
from ._root import CommandError, echo_json, home_option, json_option
from ._store import home_of
from .audit import audit

_FORMAT = click.option(
    "format_",
    "--format",
    type=click.Choice(("hydraflow",)),
    required=True,
    help="The source's format: hydraflow (docs/interop.md).",
)


def _lines(path: Path) -> Iterator[str]:
    """The lines of ``path``; bytes that are not UTF-8 become a line that is not JSON (a break
    at that position, not a crash). Lines are read to at most :data:`MAX_LINE_BYTES`.

    Raises:
        InputError: a line is longer than that.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise InputError(f"{path}: line {number:,} is longer than {MAX_LINE_BYTES:,} bytes")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                yield "\x00"


@audit.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@_FORMAT
@home_option
@json_option
def audit_import(file: Path, format_: str, home: Path, json_: bool) -> None:
    """Verify a HydraFlow audit chain FILE by HydraFlow's rule and append its records to the
    chain, each carrying its origin (source chain, file, seq, record hash) and its own
    recorded_at, redacted like every record. Idempotent: importing the same chain again, or a
    longer one, appends only what is new. A chain that does not verify (its first bad seq and
    the reason are named), a fork of a chain imported before, or a record that cannot be
    stored is refused (exit 1) and nothing is written."""
    from ..store.audit import AuditLog
    from ..store.hydraflow import import_chain

    try:
        with AuditLog.open(home_of(home)) as log:
            result = import_chain(log, _lines(file), file=str(file))
    except OSError as e:
        raise CommandError(f"cannot read {file}: {e.strerror or e}") from e
    if json_:
        echo_json(result.to_dict())
        return
    added = result.added
    where = f" (seqs {added.first_seq}..{added.first_seq + added.count - 1})" if added.count else ""
    note(
        f"imported {added.count:,} of {result.records:,} record(s){where} from HydraFlow chain "
        f"{result.chain or '(empty)'}; {result.known:,} imported before"
    )
