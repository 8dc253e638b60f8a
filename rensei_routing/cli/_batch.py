"""The streaming batch path of ``rensei explain-batch``: read, parse, resolve, spool, record,
publish, in constant memory.

The promise is that a bad line anywhere prints and records nothing. The contexts are read and
resolved a chunk at a time as the file streams in; each decision's output line goes to
anonymous temporary files (and, with ``--record``, its stored form, redacted and canonical, to
another). Only once the last line has been read and resolved are the records appended, in one
transaction streamed from their spool, and then the output copied to stdout. A bad line (or any
error) before that leaves the spools to vanish with their file handles: nothing printed,
nothing recorded. The temporary files need as much free space in ``$TMPDIR`` as the output
(and the records) take; memory stays flat whatever the input's size.

The output spool is a series of files (:class:`_OutputSpool`), each closed as soon as it has
been copied: publishing then needs the pages of about one of them beyond the output's own,
not twice the output.
"""

from __future__ import annotations

import contextlib
import gc
import io
import struct
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import IO, Final, cast

from ..core.audit.chain import encode_payload
from ..core.routing.ids import ScanMemo
from ..core.routing.jsonl import LineMemo, MemberTexts, decision_line
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import Trace, explain_batch, explain_iter
from ..core.routing.vocabulary import Vocabulary
from ..core.snapshot.freshness import Freshness, StampedDecision
from ..core.snapshot.record_text import RecordMemo, stamped_record
from ..errors import OutputError
from ..plugins.manager import has_observers
from ._inputs import iter_context_lines
from ._output import emit_file, printable_json
from ._session import session
from ._store import notify_observers, now_rfc3339, open_audit_log

__all__ = ["CHUNK", "run_batch"]

#: Contexts resolved per call of ``explain_batch``: enough to amortise the call, few enough
#: that the decisions alive at once stay a few megabytes.
CHUNK: Final = 2_000
_LEN: Final = struct.Struct("<I")
#: A spool's write buffer: few system calls, and one buffer reused rather than a fresh
#: multi-megabyte string (and its page faults) per chunk.
_BUFFER: Final = 1 << 20
#: An output spool file's size before the next one starts: at least this, and at least an
#: eighth of what is already spooled (so a batch of any size needs a few dozen files at most).
SEGMENT: Final = 16 << 20
#: Lines joined, checked and encoded at a time: tens of kilobytes, which the allocator reuses
#: (a chunk's few megabytes at once would be fresh pages, and page faults, every time).
_GROUP: Final = 32


def _spool() -> IO[bytes]:
    try:
        return tempfile.TemporaryFile(prefix="rensei-batch-", buffering=_BUFFER)
    except OSError as e:
        raise OutputError(f"cannot create a temporary file: {e.strerror or e}") from e


def _write(f: IO[bytes], data: bytes) -> None:
    try:
        f.write(data)
    except OSError as e:
        raise OutputError(f"cannot write a temporary file: {e.strerror or e}") from e


def _discard(f: IO[bytes]) -> None:
    """Close a spool whose content is no longer needed: a buffer it could not write out (the
    error that ended the batch) is dropped with it, not raised a second time."""
    with contextlib.suppress(OSError):
        f.close()


def _flush(f: IO[bytes]) -> None:
    """Write out what ``f``'s buffer holds (a full disk shows here, not later)."""
    try:
        f.flush()
    except OSError as e:
        raise OutputError(f"cannot write a temporary file: {e.strerror or e}") from e


class _OutputSpool:
    """The printable output lines, in order, in a series of anonymous temporary files.

    Every file but the last holds at least ``segment`` bytes; :meth:`publish` copies each to
    stdout and closes it (the system then frees its pages) before copying the next.
    """

    def __init__(self, segment: int = SEGMENT) -> None:
        self._segment = segment
        self._files: list[IO[bytes]] = []
        self._size = 0  # of the last file
        self._total = 0  # of the earlier ones

    def __enter__(self) -> _OutputSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_lines(self, lines: list[str]) -> None:
        """Spool ``lines`` (JSON text without control characters below U+0020, such as
        :func:`~rensei_routing.core.routing.jsonl.decision_line` writes), one a line, made
        printable.

        Raises:
            OutputError: a temporary file cannot be created or written.
        """
        if self._size >= max(self._segment, self._total >> 3) or not self._files:
            if self._files:  # keep the full file without its write buffer
                self._files[-1] = _unbuffered(self._files[-1])
            self._files.append(_spool())
            self._total += self._size
            self._size = 0
        f = self._files[-1]
        for start in range(0, len(lines), _GROUP):
            group = lines[start : start + _GROUP]
            text = "\n".join(group)
            text += "\n"
            # Without a control character below U+0020, ASCII text is printable unless it
            # holds DEL, which JSON leaves raw; anything else is checked a character at a time.
            if not text.isascii() or "\x7f" in text:
                text = "".join(printable_json(line) + "\n" for line in group)
            data = text.encode("utf-8")
            _write(f, data)
            self._size += len(data)

    def flush(self) -> None:
        """Write out the last file's buffer, so every line is on disk before anything is
        recorded: a temporary file that cannot take them fails the batch here.

        Raises:
            OutputError: a temporary file cannot be written.
        """
        if self._files:
            _flush(self._files[-1])

    def publish(self) -> None:
        """Copy the spooled lines to stdout, closing each file once it is copied.

        Raises:
            OutputError: stdout cannot be written.
        """
        while self._files:
            f = self._files.pop(0)
            try:
                f.seek(0)
                emit_file(f)
            finally:
                _discard(f)

    def close(self) -> None:
        """Drop whatever is still spooled (nothing is printed)."""
        while self._files:
            _discard(self._files.pop())


def _unbuffered(f: IO[bytes]) -> IO[bytes]:
    """The file under a buffered spool, what it held written out and its buffer freed.

    Raises:
        OutputError: the buffer cannot be written.
    """
    if not isinstance(f, io.BufferedRandom):  # a wrapper, where TemporaryFile returns one
        return f
    try:
        return cast(IO[bytes], f.detach())
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
    explain_batch((), snapshot, snapshot_state=state, trace=trace, vocabulary=vocabulary)  # index
    with ExitStack() as stack:
        stack.enter_context(_collector_tuned())
        scan = ScanMemo(redactor)
        written: LineMemo = {}
        members: MemberTexts = {}
        kept: RecordMemo = {}
        out = stack.enter_context(_OutputSpool())
        records = None if home is None else _spool()
        if records is not None:
            stack.callback(_discard, records)
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
            out.write_lines([decision_line(d, stamp, written, members) for d in decisions])
            if records is not None:
                rev = stamp.ruleset_rev
                for d in decisions:
                    # Each distinct string checked once per batch; a record with nothing
                    # credential-shaped is its canonical bytes (what encode_payload returns),
                    # written with the batch's memo of what repeats.
                    if scan.record_may_redact(d, rev):
                        data = encode_payload(StampedDecision(d, stamp), redactor)
                    else:
                        data = stamped_record(d, stamp, kept)
                    _write(records, _LEN.pack(len(data)) + data)
        # Both spools wholly written before the one step that cannot be undone (the commit).
        out.flush()
        if records is not None:
            _flush(records)
        if home is not None and records is not None:
            _record(home, _spooled(records))
        out.publish()


@contextlib.contextmanager
def _collector_tuned() -> Iterator[None]:
    """The cyclic collector tuned for one batch, then as it was. The CLI is an edge, and a
    batch's own objects are short-lived: the process's long-lived objects (modules, the snapshot
    and its index) are moved out of the collector's sight, and the youngest generation collected
    less often, so a collection never rescans them."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    try:
        yield
    finally:  # as it was: the CLI may be running inside another program (tests, a host)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def _record(home: Path, payloads: Iterator[bytes]) -> None:
    """Append the spooled payloads in one transaction, then notify observers in chunks."""
    pm = session().pm
    with open_audit_log(home) as log:
        # Each payload is this log's encode_payload of a decision resolved here (the session's
        # redactor is the log's): the automatic checkpoint need not parse them again.
        appended = log.append_encoded(payloads, recorded_at=now_rfc3339(), own=True)
        if has_observers(pm):
            seqs = iter(appended.seqs)
            while part := list(islice(seqs, CHUNK)):
                notify_observers([log.get(seq) for seq in part])
