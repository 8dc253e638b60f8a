"""``rensei audit import``: a HydraFlow audit chain (``shadow-decisions.jsonl``) brought into
the home's chain. Parses and prints; the wire rules are
:mod:`rensei_routing.core.audit.hydraflow`'s, the import :mod:`rensei_routing.store.hydraflow`'s.
Attached to the ``audit`` group; ``rensei audit export --format hydraflow`` (in :mod:`.audit`)
is the way out, ``rensei policy import`` (:mod:`.policy_import`) the policy store's way in.

Every refusal is one ``Error:`` line and exit 1, with nothing written. A FIFO or device is
copied to a temporary file first: the import reads its source twice.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ..core.audit.archive import MAX_LINE_BYTES
from ..errors import InputError
from ._inputs import INTEROP_FORMAT
from ._output import note
from ._root import CommandError, echo_json, home_option, json_option
from ._store import home_of
from .audit import audit


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


@contextmanager
def _rereadable(path: Path) -> Iterator[Path]:
    """``path`` when it is a regular file (the import reads it twice), else a copy of what it
    yields (a FIFO, a device) in a temporary file, removed afterwards.

    Raises:
        OSError: it cannot be read, or the copy cannot be written.
    """
    if stat.S_ISREG(os.stat(path).st_mode):
        yield path
        return
    with tempfile.NamedTemporaryFile(prefix="rensei-import-", suffix=".jsonl") as spool:
        with open(path, "rb") as f:
            shutil.copyfileobj(f, spool, 1024 * 1024)
        spool.flush()
        yield Path(spool.name)


@audit.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@INTEROP_FORMAT
@home_option
@json_option
def audit_import(file: Path, format_: str, home: Path, json_: bool) -> None:
    """Verify a HydraFlow audit chain FILE by HydraFlow's rule and append its records to the
    chain, each carrying its origin (source chain, file, seq, record hash) and its own
    recorded_at, redacted like every record. The whole file is verified first; the records
    are then appended in batches of 5,000, so other writers wait one batch at most.
    Idempotent and resumable: importing the same chain again, or a longer one, appends only
    what is new, and finishes an import that stopped. A chain that does not verify (its first
    bad seq and the reason are named), a fork of a chain imported before, or a record that
    cannot be stored is refused (exit 1) and nothing is written."""
    from ..store.audit import AuditLog
    from ..store.hydraflow import import_chain

    h = home_of(home)
    try:
        with _rereadable(file) as source, AuditLog.open(h) as log:
            result = import_chain(log, lambda: _lines(source), file=str(file))
    except OSError as e:
        raise CommandError(f"cannot read {file}: {e.strerror or e}") from e
    if json_:
        echo_json(result.to_dict())
        return
    added = result.added
    where = f" (seqs {added.first_seq}..{added.first_seq + added.count - 1})" if added.count else ""
    before = "by an import that stopped before its end" if result.resumed else "before"
    note(
        f"imported {added.count:,} of {result.records:,} record(s){where} from HydraFlow chain "
        f"{result.chain or '(empty)'}; {result.known:,} imported {before}"
    )
