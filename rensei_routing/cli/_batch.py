"""The streaming batch path of ``rensei explain-batch``: read, parse, resolve, spool, record,
publish, in constant memory.

The promise is that a bad line anywhere prints and records nothing. The contexts are read and
resolved a chunk at a time as the file streams in; each decision's output line goes to an
anonymous temporary file (and, with ``--record``, its stored form, redacted and canonical, to
another). Only once the last line has been read and resolved are the records appended, in one
transaction streamed from their spool, and then the output copied to stdout. A bad line (or any
error) before that leaves both spools to vanish with their file handles: nothing printed,
nothing recorded. The temporary files need as much free space in ``$TMPDIR`` as the output
(and the records) take; memory stays flat whatever the input's size.
"""

from __future__ import annotations

import gc
import struct
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import IO, Final

from ..core.chain import encode_payload
from ..core.freshness import Freshness, StampedDecision
from ..core.ids import ScanMemo
from ..core.jsonl import decision_line
from ..core.policy import PolicySnapshot
from ..core.redact import Redactor
from ..core.resolver import Trace, explain_batch, explain_iter
from ..core.vocabulary import Vocabulary
from ..errors import OutputError
from ..plugins import has_observers
from ._inputs import iter_context_lines
from ._output import emit_file, printable_json
from ._session import session
from ._store import notify_observers, now_rfc3339, open_audit_log

__all__ = ["CHUNK", "run_batch"]

#: Contexts resolved per call of ``explain_batch``: enough to amortise the call, few enough
#: that the decisions alive at once stay a few megabytes.
CHUNK: Final = 2_000
_LEN: Final = struct.Struct("<I")


def _spool() -> IO[bytes]:
    try:
        return tempfile.TemporaryFile(prefix="rensei-batch-")
    except OSError as e:
        raise OutputError(f"cannot create a temporary file: {e.strerror or e}") from e


def _write(f: IO[bytes], data: bytes) -> None:
    try:
        f.write(data)
    except OSError as e:
        raise OutputError(f"cannot write a temporary file: {e.strerror or e}") from e


def _spooled(f: IO[bytes]) -> Iterator[bytes]:
    """The length-prefixed payloads written to a record spool, in order."""
    f.seek(0)
    size, read = _LEN.size, f.read
    while header := read(size):
        (length,) = _LEN.unpack(header)
        yield read(length)


def run_batch(
    source: str,
    *,
    snapshot: PolicySnapshot,
    state: str,
    stamp: Freshness,
    trace: Trace,
    vocabulary: Vocabulary,
    home: Path | None,
) -> None:
    """Resolve every context of ``source`` (a path, ``-`` for stdin) against ``snapshot``,
    print one JSON decision a line and, with ``home``, record each in its audit log.

    Raises:
        InputError: a line is not a context (nothing printed or recorded).
        OutputError: a temporary file or stdout cannot be written.
        HomeError, StoreError: recording failed (nothing recorded or printed).
    """
    redactor = session().redactor()
    # The CLI is an edge, and a batch's own objects are short-lived: the process's long-lived
    # objects (modules, the snapshot and its index) are moved out of the collector's sight, and
    # the youngest generation collected less often, so a collection never rescans them.
    explain_batch((), snapshot, snapshot_state=state, trace=trace, vocabulary=vocabulary)  # index
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    try:
        _run(source, snapshot, state, stamp, trace, vocabulary, home, redactor)
    finally:  # as it was: the CLI may be running inside another program (tests, a host)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def _run(
    source: str,
    snapshot: PolicySnapshot,
    state: str,
    stamp: Freshness,
    trace: Trace,
    vocabulary: Vocabulary,
    home: Path | None,
    redactor: Redactor,
) -> None:
    scan = ScanMemo(redactor)
    with ExitStack() as stack:
        out = stack.enter_context(_spool())
        records = None if home is None else stack.enter_context(_spool())
        # One resolver stream for the whole input, so what repeats across it (candidate
        # lookups, model steps, redaction checks) is worked out once, not once a chunk.
        stream = explain_iter(
            iter_context_lines(source, vocabulary=vocabulary),
            snapshot,
            snapshot_state=state,
            trace=trace,
            vocabulary=vocabulary,
            redactor=redactor,
        )
        while decisions := list(islice(stream, CHUNK)):
            lines = "\n".join(printable_json(decision_line(d, stamp)) for d in decisions)
            _write(out, lines.encode("utf-8") + b"\n")
            if records is not None:
                rev = stamp.ruleset_rev
                for d in decisions:
                    stamped = StampedDecision(d, stamp)
                    # Each distinct string checked once per batch; a record with nothing
                    # credential-shaped is its canonical bytes (what encode_payload returns).
                    if scan.record_may_redact(d, rev):
                        data = encode_payload(stamped, redactor)
                    else:
                        data = stamped.canonical()
                    _write(records, _LEN.pack(len(data)) + data)
        if home is not None and records is not None:
            _record(home, _spooled(records))
        out.seek(0)
        emit_file(out)


def _record(home: Path, payloads: Iterator[bytes]) -> None:
    """Append the spooled payloads in one transaction, then notify observers in chunks."""
    pm = session().pm
    with open_audit_log(home) as log:
        appended = log.append_encoded(payloads, recorded_at=now_rfc3339())
        if has_observers(pm):
            seqs = iter(appended.seqs)
            while part := list(islice(seqs, CHUNK)):
                notify_observers([log.get(seq) for seq in part])
