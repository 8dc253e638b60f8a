"""``rensei audit rotate``, ``rensei audit prune`` and ``rensei audit reattest``: seal the live
segment of the audit chain, remove sealed segments that were exported, keeping their anchors,
and re-sign the catalogue rows an earlier release wrote (the rules and the crash safety are
:mod:`rensei_routing.store.audit.rotation`'s and :mod:`rensei_routing.store.audit.reattest`'s;
this module parses and prints). Attached to the ``audit`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._inputs import SEQ
from ._output import emit, note, progress_bar
from ._root import CommandError, echo_json, home_option, json_option
from ._store import home_of
from .audit import audit


@audit.command(name="rotate")
@home_option
@json_option
def audit_rotate(home: Path, json_: bool) -> None:
    """Seal the live segment: verify it, sign a checkpoint of its head with the home's key,
    and move its records to the read-only file <home>/audit/segments/<first>-<last>.db (its
    records, checkpoints, seal and compression dictionaries); the new live segment continues
    the chain (seq and links) from that head. Appends go on meanwhile. A crash at any point
    leaves the old layout or the new one. An empty live segment is refused (exit 1).
    Rotation also happens automatically once the live segment holds [audit]
    rotate_at_records records (config.toml; default 5,000,000; 0: never)."""
    from ..store.audit import AuditLog
    from ..store.audit.rotation import rotate

    with AuditLog.open(home_of(home)) as log:
        total = log.head()[0] if sys.stderr.isatty() else 0
        with progress_bar(total) as progress:
            done = rotate(log, progress=progress)
    assert done is not None  # rotate waits for the lock
    seg = done.segment
    if json_:
        echo_json(done.to_dict())
        return
    emit(
        f"sealed {seg.count:,} record(s) (seq {seg.first_seq:,}..{seg.last_seq:,}, head "
        f"{seg.head_hash}) in {done.path}"
    )
    note(f"the live segment continues at seq {seg.last_seq + 1:,}")


@audit.command(name="prune")
@click.option(
    "--before",
    type=SEQ,
    required=True,
    help="Remove the sealed segments whose records all lie below this seq.",
)
@click.option(
    "exported",
    "--exported",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="An export (`rensei audit export`) holding every record of those segments; several "
    "are one chain, in the order given (repeatable).",
)
@home_option
@json_option
def audit_prune(before: int, exported: tuple[Path, ...], home: Path, json_: bool) -> None:
    """Remove the sealed segments entirely below seq BEFORE, once the --exported files are
    shown to hold every one of their records (they verify as a chain reaching each segment's
    signed head) and each seal verifies. Each pruned segment's bounds, head hash and the
    export's SHA-256 stay in the home, under a prune statement signed with the home's key, as
    the anchor `audit verify` then starts from. Anything else is refused (exit 1) and nothing
    is deleted."""
    from ..store.audit import AuditLog
    from ..store.audit.rotation import prune

    with AuditLog.open(home_of(home)) as log:
        pruned = prune(log, before=before, exported=exported)
    last = pruned[-1]
    if json_:
        echo_json({"pruned": [s.to_dict() for s in pruned], "anchor_seq": last.last_seq + 1})
        return
    names = ", ".join(s.name for s in pruned)
    emit(
        f"pruned segment(s) {names} ({sum(s.count for s in pruned):,} records); verify now "
        f"starts at the anchor: seq {last.last_seq + 1:,}, head {last.head_hash}"
    )


@audit.command(name="reattest")
@click.option(
    "exported",
    "--exported",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="An export (`rensei audit export`) holding the records of the segments an earlier "
    "release pruned; several are one chain, in the order given (repeatable).",
)
@home_option
@json_option
def audit_reattest(exported: tuple[Path, ...], home: Path, json_: bool) -> None:
    """Re-sign the segment rows an earlier release sealed or pruned, which `audit verify`
    reports as segment-unattested: a sealed segment's seal is re-derived from its records
    (they must walk to the head its old seal signed); a pruned segment is signed only with
    --exported, once the export is shown to hold it, as `audit prune` checks. A row that
    cannot be checked is refused and nothing is written (exit 1); pruned rows left without
    an export are named (exit 1)."""
    from ..store.audit import AuditLog
    from ..store.audit.reattest import reattest

    with AuditLog.open(home_of(home)) as log:
        total = log.head()[0] if sys.stderr.isatty() else 0
        with progress_bar(total) as progress:
            done = reattest(log, exported=exported, progress=progress)
    if json_:
        echo_json(done.to_dict())
    else:
        signed = [*done.resealed, *done.attested]
        if signed:
            emit(
                "re-attested segment(s) "
                + ", ".join(f"{s.name} ({'pruned' if s.pruned else 'sealed'})" for s in signed)
            )
        elif not done.pending:
            emit("nothing to re-attest: every segment carries a statement of its kind")
    if done.pending:
        names = ", ".join(s.name for s in done.pending)
        raise CommandError(
            f"pruned segment(s) {names} still need the export that holds them: "
            "rensei audit reattest --exported FILE"
        )
