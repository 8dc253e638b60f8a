"""``rensei audit ...``: verify the hash-chained audit log, sign checkpoints, show records. Must
not hold chain rules (core) or SQL (store); prints data on stdout, progress on a terminal's stderr,
confirmations and warnings on stderr.

Exit codes of ``audit verify``: 0 intact; 1 broken (the first bad seq and reason are printed, and
an ``Error:`` line goes to stderr); 2 usage errors; 3 could not verify (uninitialised home,
unreadable database, unreadable or malformed ``--checkpoint`` file: one ``Error:`` line, nothing on
stdout; and a verdict that could not be written to stdout), so a script can tell tampering from
a verification that never ran.

Every text output escapes non-printable characters (see :mod:`._output`): a stored record is
attacker-controlled data once the database is, and must not drive the terminal.

``audit show`` and ``audit tail`` display a damaged record (payload bytes that are not JSON) as
stored, clearly marked, and exit 0: the record ``verify`` points to can always be inspected.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

from .. import signing
from ..core.audit.archive import MAX_LINE_BYTES, export_line, export_start, rows_from_lines
from ..core.audit.chain import (
    AuditRecord,
    Checkpoint,
    VerifyResult,
    note_key_hash,
    verify_chain,
)
from ..core.shadow.summary import summarize
from ..errors import RenseiRoutingError
from ..files import atomic_write, bounded_lines

if TYPE_CHECKING:
    from ..ops.rederive import FullTrace
from ..store.audit import AuditLog, read_checkpoint
from ._inputs import SEQ
from ._output import emit, json_text, next_step, note, printable, progress_bar
from ._render import chain_line, verdict_line
from ._root import CommandError, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of, refuse_home_target, require_output_dir


class ChainBrokenError(CommandError):
    """``audit verify`` found a broken link, a truncated log or a bad checkpoint: exit 1."""

    exit_code = 1


class CouldNotVerifyError(CommandError):
    """``audit verify`` could not run (no home, unreadable store or checkpoint file) or could not
    write its verdict: exit 3."""

    exit_code = 3


#: SQLite's largest integer: the bound of every seq and count the CLI accepts.


@cli.group(name="audit")
def audit() -> None:
    """The hash-chained decision log: verify, replay, checkpoint, rotate, prune, export, import,
    show, tail, prove, verify-proof, consistency."""


@audit.command(name="verify")
@click.option(
    "checkpoint_files",
    "--checkpoint",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint note FILE to hold the log to (repeatable).",
)
@click.option(
    "files",
    "--file",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Verify an export (`rensei audit export`) offline instead of the home's database; "
    "several are one chain, in the order given (repeatable).",
)
@click.option(
    "trust",
    "--trust",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --file: a public key file (ed25519:<base64>, e.g. <home>/keys/host.pub) that "
    "signs the --checkpoint notes (repeatable).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=1024),
    default=None,
    help="Processes that check ranges of the chain at once (default: every core; 1: one "
    "process). The verdict is the same; small logs are always walked in one process.",
)
@click.option(
    "witnesses",
    "--witness",
    multiple=True,
    metavar="KEY",
    help="A witness policy: a witness's cosigner key (vkey, or a file holding it or its "
    "ed25519: key); the checkpoints checked (each --checkpoint, else the newest stored one, with "
    "the cosignatures stored for it) must carry --quorum valid cosignatures (repeatable).",
)
@click.option(
    "--quorum",
    type=click.IntRange(min=0),
    default=None,
    help="How many --witness keys must have cosigned (default: every one given).",
)
@home_option
@json_option
def audit_verify(
    checkpoint_files: tuple[Path, ...],
    files: tuple[Path, ...],
    trust: tuple[Path, ...],
    workers: int | None,
    witnesses: tuple[str, ...],
    quorum: int | None,
    home: Path,
    json_: bool,
) -> None:
    """Walk the whole chain and every checkpoint (stored ones and each --checkpoint FILE), or
    with --file an exported chain, offline (no home needed).

    \b
    Exit codes:
      0  intact: every record and checkpoint verified
      1  broken: the first bad seq (or the bad checkpoint) and the
         reason are printed, and one Error: line goes to stderr
      2  usage error (unknown option, bad argument)
      3  could not verify: no initialised home, unreadable database,
         unreadable or malformed --checkpoint, --file or --trust file,
         a --checkpoint inside a pruned segment (the records it covers
         are no longer held: check it against the export with --file),
         or the verdict could not be written to stdout (one Error: line)
    """
    if trust and not files:
        raise click.UsageError("--trust applies to --file (a home checks with its own key)")
    if quorum is not None and quorum > len(witnesses):
        raise click.UsageError(
            f"--quorum {quorum} is more than the {len(witnesses)} --witness keys"
        )
    if files and checkpoint_files and not trust:
        raise click.UsageError("--checkpoint with --file needs --trust KEYFILE")
    start, chain = 0, None
    try:
        checkpoints = [read_checkpoint(p) for p in checkpoint_files]
        if files:
            keys = [signing.load_public_key(p) for p in trust]
            start, result = verify_export(files, checkpoints, keys)
        else:
            with AuditLog.open(home_of(home)) as log:
                total = log.head()[0] if sys.stderr.isatty() else 0
                with progress_bar(total) as progress:
                    chain = log.verify_segments(checkpoints, progress=progress, workers=workers)
            result = chain.result
    except (RenseiRoutingError, OSError) as e:
        raise CouldNotVerifyError(f"could not verify: {e}") from e
    try:
        if json_:
            echo_json(chain.to_dict() if chain else {**result.to_dict(), "first_seq": start})
        else:
            emit(verdict_line(result) if chain is None else chain_line(chain))
    except RenseiRoutingError as e:  # OutputError: the verdict was never delivered
        raise CouldNotVerifyError(f"could not verify: {e}") from e
    if files and start and result:
        note(
            f"note: the export starts at seq {start}; its first prev_hash must equal the head "
            "of the export before it (or verify them together: --file OLD --file NEW)"
        )
    if not result:
        seq = "-" if result.first_broken_seq is None else str(result.first_broken_seq)
        raise ChainBrokenError(f"audit log does not verify (seq {seq}: {result.reason})")
    if witnesses:
        _witness_policy(checkpoints, witnesses, quorum, None if files else home)
    if chain is not None and chain.unverifiable:
        size, name = chain.unverifiable[0]
        more = len(chain.unverifiable) - 1
        raise CouldNotVerifyError(
            f"could not verify the checkpoint of size {size:,}"
            + (f" (and {more} more)" if more else "")
            + f": it lies inside pruned segment {name}, whose records are no longer held; "
            "check it against the export: rensei audit verify --file EXPORT --trust "
            "KEYFILE --checkpoint FILE"
        )


def _witness_policy(
    checkpoints: Sequence[Checkpoint],
    witnesses: tuple[str, ...],
    quorum: int | None,
    home: Path | None,
) -> None:
    """Hold the checkpoints checked to the witness policy (exit 1 ``quorum-not-met``; exit 3 a
    key that cannot be read)."""
    from ..errors import WitnessError
    from ..evidence.policy import check_quorum, load_key
    from ..evidence.proofs import with_cosignatures

    try:
        keys = [load_key(w, witness=True) for w in witnesses]
        checked = list(checkpoints)
        if home is not None:
            if not checked:
                with AuditLog.open(home_of(home)) as log:
                    checked = list(log.checkpoints())[-1:]
            checked = [with_cosignatures(home_of(home), cp) for cp in checked]
    except (RenseiRoutingError, OSError) as e:
        raise CouldNotVerifyError(f"could not verify: {e}") from e
    if not checked:
        raise ChainBrokenError("quorum-not-met: no checkpoint to hold to the witness policy")
    for cp in checked:
        try:
            n = check_quorum(cp, keys, quorum)
        except WitnessError as e:
            raise ChainBrokenError(f"checkpoint of size {cp.size:,}: {e}") from e
        note(f"witness policy holds at size {cp.size:,}: {n} trusted witness(es) cosigned")


def _export_lines(files: Sequence[Path]) -> Iterator[str]:
    """The lines of each file in order, split on ``\n`` only; bytes that are not UTF-8 become
    a line that is not JSON (reported as an unparseable record, not a crash). A line is read
    to at most :data:`MAX_LINE_BYTES` bytes (memory stays bounded whatever the file holds).

    Raises:
        InputError: a line is longer than :data:`MAX_LINE_BYTES` (not an export; ``/dev/zero``).
        OSError: a file cannot be read.
    """
    for path in files:
        for raw in bounded_lines(path, MAX_LINE_BYTES, what="an audit export"):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                yield "\x00"


def verify_export(
    files: Sequence[Path], checkpoints: Sequence[Checkpoint], keys: Sequence[signing.PublicKey]
) -> tuple[int, VerifyResult]:
    """Verify exported records as one chain (see :mod:`..core.archive`); ``(first seq,
    result)``. A chain starting at seq 0 must start from the genesis hash; a later start is
    anchored on its own first ``prev_hash``.

    Raises:
        OSError: a file cannot be read.
    """
    start_seq, start_hash, rows = export_start(rows_from_lines(_export_lines(files)))

    def signature_ok(cp: Checkpoint) -> bool:
        for key in keys:
            sig = cp.signature_by(cp.origin, note_key_hash(cp.origin, key.raw))
            if sig is not None and signing.check(key, cp.body, sig):
                return True
        return False

    return start_seq, verify_chain(
        rows,
        checkpoints=checkpoints,
        signature_ok=signature_ok if checkpoints else None,
        start_seq=start_seq,
        start_hash=start_hash,
    )


@audit.command(name="export")
@click.argument("target", metavar="FILE.jsonl", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--since",
    type=SEQ,
    default=None,
    help="The first seq to export (the previous export's record count continues its chain; "
    "default: the first record present, 0 unless segments were pruned).",
)
@click.option(
    "format_",
    "--format",
    type=click.Choice(("rensei", "hydraflow")),
    default="rensei",
    show_default=True,
    help="rensei: our records as stored; hydraflow: a chain HydraFlow's verify() accepts "
    "(its hashes, seqs from 0), each payload naming our seq and record hash (docs/interop.md).",
)
@home_option
def audit_export(target: Path, since: int | None, format_: str, home: Path) -> None:
    """Verify the chain, then write its records from seq SINCE on to FILE.jsonl, one JSON
    record per line (the chain fields and the stored, redacted payload), atomically: for
    archiving to other systems. `rensei audit verify --file FILE.jsonl` checks it offline
    (--format hydraflow: HydraFlow's RoutingAuditLog.verify() does).
    A chain that does not verify is refused (exit 1, nothing written)."""
    h = home_of(home)
    require_output_dir(target)
    refuse_home_target(h, target)
    with AuditLog.open(h) as log:
        total = log.count() if sys.stderr.isatty() else 0
        with progress_bar(total) as progress:
            chain = log.verify_segments(progress=progress)
        result = chain.result
        if not result:
            raise ChainBrokenError(
                f"audit log does not verify (seq {result.first_broken_seq}: {result.reason}); "
                "nothing exported"
            )
        stop = result.records_checked
        since = chain.first_seq if since is None else since
        if since > stop:
            raise CommandError(f"--since {since} is past the end of the log ({stop} records)")
        if since < chain.first_seq:
            raise CommandError(
                f"--since {since} is below the anchor: the records before seq "
                f"{chain.first_seq} were pruned (they are in the export they were pruned after)"
            )
        lines = (export_line(r) for r in log.records(start=since, stop=stop))
        if format_ == "hydraflow":
            from ..store.hydraflow import export_lines

            lines = (t.encode("ascii") for t in export_lines(log, start=since, stop=stop))
        try:
            size = atomic_write(target, lines)
        except OSError as e:
            raise CommandError(f"cannot write {target}: {e.strerror or e}") from e
    note(
        f"exported {stop - since:,} record(s) (seqs {since}..{stop - 1}, {size:,} bytes) to "
        f"{target}; head {result.head_hash}; next export: --since {stop}"
    )


@audit.command(name="checkpoint")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the signed note to FILE (default: print it).",
)
@click.option(
    "cosignatures",
    "--add-cosignature",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Instead of signing: store a witness's cosignature lines from FILE (`rensei witness "
    "cosign` output, or a cosigned note) beside the stored checkpoint each signs (needs "
    "--witness).",
)
@click.option(
    "witnesses",
    "--witness",
    multiple=True,
    metavar="KEY",
    help="With --add-cosignature: a witness cosigner key (vkey, or a file holding it or its "
    "ed25519: key) a line must verify under (repeatable).",
)
@home_option
def audit_checkpoint(
    output: Path | None, cosignatures: Path | None, witnesses: tuple[str, ...], home: Path
) -> None:
    """Verify the whole log (every record and stored checkpoint, like `audit verify`), then
    sign and store a checkpoint of its size and head hash. A broken log is refused (exit 1,
    nothing stored). The note is printed, or with -o written to FILE, inside the transaction
    that stores it, and stored only if that succeeds (an unwritable stdout exits 3, nothing
    stored); with -o stdout stays empty and the confirmation goes to stderr. FILE may not be
    inside the home (its database, WAL, keys).

    With --add-cosignature FILE --witness KEY...: store each cosignature line of FILE beside
    the stored checkpoint it is a valid cosignature of under one of the KEYs (`audit prove`
    then carries them); a line that verifies over no stored checkpoint stores nothing (exit 1).
    """

    def show(cp: Checkpoint) -> None:
        emit(cp.to_text(), nl=False)

    if cosignatures is not None or witnesses:
        _add_cosignatures(cosignatures, witnesses, output, home)
        return
    if output is not None:
        require_output_dir(output)
    with AuditLog.open(home_of(home)) as log:
        total = log.count() if sys.stderr.isatty() else 0
        with progress_bar(total) as progress:
            cp = log.checkpoint(
                export_to=output, progress=progress, deliver=show if output is None else None
            )
    if output is not None:
        note(f"checkpoint of {cp.size:,} records ({cp.head_hash}) written to {output}")


def _add_cosignatures(
    file: Path | None, witnesses: tuple[str, ...], output: Path | None, home: Path
) -> None:
    from ..evidence.policy import load_key
    from ..evidence.proofs import add_cosignature_lines

    if file is None or not witnesses or output is not None:
        raise click.UsageError("--add-cosignature FILE takes --witness KEY (and no -o)")
    keys = [load_key(w, witness=True) for w in witnesses]
    try:
        with open(file, "rb") as f:
            data = f.read(64 * 1024 + 1)
    except OSError as e:
        raise CommandError(f"cannot read {file}: {e.strerror or e}") from e
    for size, line in add_cosignature_lines(home_of(home), data, keys):
        note(printable(f"kept beside the checkpoint of size {size:,}: {line.strip()}"))


def _escaped(data: bytes) -> str:
    """Raw bytes as one line of text: printable ASCII as is, ``\\`` doubled, the rest ``\\xNN``."""
    return "".join(
        "\\\\" if b == 0x5C else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data
    )


def _damaged_warning(records: Sequence[AuditRecord]) -> None:
    """One stderr line naming the records whose payload does not parse (none: nothing)."""
    damaged = [str(r.seq) for r in records if r.payload_error is not None]
    if damaged:
        note(
            f"warning: unparseable payload in record(s) {', '.join(damaged)}: shown as stored "
            "bytes; run `rensei audit verify`"
        )


def _record_text(record: AuditRecord, full: FullTrace | None = None) -> str:
    error = record.payload_error
    if full is not None and full.rederived:
        payload = (
            f"trace:        full, re-derived from the stored context against policy revision "
            f"{full.revision} (the record stores the compact explanation; the hashes are the "
            "record's)\npayload:\n" + json_text(full.payload)
        )
    elif error is None:
        payload = "payload:\n" + json_text(record.payload)
    else:
        data = record.payload_bytes
        payload = (
            f"payload:      UNPARSEABLE ({printable(error)}); {len(data):,} stored bytes:\n"
            f"payload_hex:  {data.hex()}\n"
            f"payload_text: {_escaped(data)}"
        )
    return (
        f"seq:          {record.seq}\n"
        f"recorded_at:  {printable(str(record.recorded_at))}\n"
        f"prev_hash:    {printable(str(record.prev_hash))}\n"
        f"payload_hash: {printable(str(record.payload_hash))}\n"
        f"record_hash:  {printable(str(record.record_hash))}\n"
        f"{payload}"
    )


@audit.command(name="show")
@click.argument("seq", type=SEQ)
@click.option(
    "--full",
    is_flag=True,
    help="Show a recorded decision with its full per-policy trace, re-derived from the stored "
    "context against the revision it cites (as `audit replay` does) when the record stores the "
    "compact explanation.",
)
@home_option
@json_option
def audit_show(seq: int, full: bool, home: Path, json_: bool) -> None:
    """Show the record with sequence number SEQ (as stored: redacted).

    A decision record stores a compact explanation by default: the winner and its ties, with
    the other policies counted. --full re-derives the full trace (every policy with its
    reason, and the accounts) and shows the payload as a full-trace record would store it;
    it refuses (exit 1) when the revision the record cites is not held here or the decision
    replayed from it differs from the recorded one.

    A damaged record (payload bytes that are not JSON) is shown too, marked UNPARSEABLE with its
    bytes in hex and escaped text (--json: "payload": null, "payload_raw_hex", "payload_error"),
    and a warning on stderr; the exit code is still 0.
    """
    h = home_of(home)
    with AuditLog.open(h) as log:
        record = log.get(seq)
    _damaged_warning([record])
    trace = None
    if full and record.payload_error is None:
        from ..ops.rederive import full_trace
        from ..ops.replay import Sources

        s = session()
        trace = full_trace(
            record.payload,
            Sources(h, vocabulary=s.vocabulary()),
            where=f"record {seq}",
            vocabulary=s.vocabulary(),
            redactor=s.redactor(),
        )
    if json_:
        data = record.to_dict()
        if trace is not None:
            data["payload"] = trace.payload
            data["trace_rederived"] = trace.rederived
        echo_json(data)
    else:
        emit(_record_text(record, trace))


@audit.command(name="tail")
@click.option(
    "-n",
    "--lines",
    "n",
    type=SEQ,
    default=10,
    show_default=True,
    help="How many of the latest records.",
)
@home_option
@json_option
def audit_tail(n: int, home: Path, json_: bool) -> None:
    """The latest N records, oldest first, one line each under a header: seq, recorded_at,
    kind (decision, shadow, claim, authorization, session, import ...), outcome, policy and
    route. --json: the records as stored (hashes and payloads; the raw form).

    A damaged record reads kind UNPARSEABLE with why (--json: as in `audit show`); a warning
    goes to stderr and the exit code is still 0.
    """
    with AuditLog.open(home_of(home)) as log:
        records = log.tail(n)
    _damaged_warning(records)
    if json_:
        echo_json([r.to_dict() for r in records])
        return
    if not records:
        next_step(
            "the audit chain holds no record",
            "rensei explain CONTEXT --record",
            "rensei shadow record SPAWNS.jsonl",
        )
        return
    for line in tail_lines(records):
        emit(line)


_TAIL_HEADER: Final = ("seq", "recorded_at", "kind", "outcome", "policy", "route")
_TAIL_PAD: Final = 40  # a longer cell is not padded: it pushes its line, not every line


def tail_lines(records: Sequence[AuditRecord]) -> list[str]:
    """``audit tail``'s text: a header and one aligned line per record (cells made printable)."""
    rows = [_TAIL_HEADER]
    for r in records:
        error = r.payload_error  # a damaged payload is summarised by why, never parsed
        s = summarize(None if error is not None else r.payload, error=error)
        rows.append((str(r.seq), str(r.recorded_at), s.kind, s.outcome, s.policy, s.route))
    cells = [[printable(c) for c in row] for row in rows]
    widths = [min(_TAIL_PAD, max(len(row[i]) for row in cells)) for i in range(len(_TAIL_HEADER))]
    out = []
    for row in cells:
        first = row[0].rjust(widths[0])
        rest = [c.ljust(widths[i + 1]) for i, c in enumerate(row[1:-1])]
        out.append("  ".join([first, *rest, row[-1]]).rstrip())
    return out
