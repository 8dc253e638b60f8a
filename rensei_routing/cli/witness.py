"""``rensei witness cosign``: this home as a witness of another log, through files. Parses, calls
:func:`rensei_routing.evidence.cosign.cosign`, prints the cosignature line on stdout (what the
log's ``rensei audit checkpoint --add-cosignature FILE`` takes) and a confirmation on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from ..core.audit.tlog import ADD_CHECKPOINT_MAX_BYTES
from ..errors import InputError
from ..evidence.cosign import cosign
from ..evidence.policy import load_key
from ._clock import now
from ._output import emit, note, printable
from ._root import cli, home_option
from ._store import home_of

_MAX_NOTE: Final = ADD_CHECKPOINT_MAX_BYTES


def read_small(path: Path, what: str) -> bytes:
    """The bytes of ``path``, at most one byte over the bound (the parser then refuses it).

    Raises:
        InputError: the file cannot be read.
    """
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_NOTE + 1)
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror or e}") from e


@cli.group(name="witness")
def witness() -> None:
    """This home as a witness of other logs, through files: cosign their checkpoints."""


@witness.command(name="cosign")
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "proof",
    "--proof",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The consistency proof from the last checkpoint this witness cosigned for the origin "
    "(`rensei audit consistency OLD NEW -o FILE` in the log's home); not needed the first time.",
)
@click.option(
    "trust",
    "--trust",
    required=True,
    metavar="LOGKEY",
    help="The log's key: its vkey (`rensei keys show --vkey` in the log's home), or a file "
    "holding that vkey or its ed25519: public key.",
)
@home_option
def witness_cosign(checkpoint: Path, proof: Path | None, trust: str, home: Path) -> None:
    """Cosign the log's CHECKPOINT (a signed note) with this home's key: print one
    cosignature/v1 line (C2SP tlog-cosignature). The first checkpoint of an origin needs no
    proof; after that one must come proven consistent (--proof) with the last one cosigned for
    that origin, which this home keeps (advanced by compare-and-swap: concurrent requests never
    roll it back). The same checkpoint again is cosigned again. A refusal (backwards, conflict,
    proof-required, old-size-mismatch, inconsistent, wrong-key, other-origin, ...) is one
    Error: line and exit 1; nothing is written."""
    key = load_key(trust)
    data = read_small(checkpoint, "checkpoint")
    proof_data = None if proof is None else read_small(proof, "consistency proof")
    result = cosign(home_of(home), data, proof=proof_data, trust=key, now=int(now().timestamp()))
    emit(result.cosignature.to_line(), nl=False)
    moved = (
        "first view of this origin"
        if result.previous_size is None
        else f"view {result.previous_size:,} -> {result.size:,}"
        if result.advanced
        else "the checkpoint already held, cosigned again"
    )
    note(printable(f"cosigned {result.origin} at size {result.size:,} ({moved})"))


__all__ = ["read_small", "witness"]
