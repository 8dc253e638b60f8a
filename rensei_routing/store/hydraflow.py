"""HydraFlow audit chains in and out of the home's audit log. Owns the ``hydraflow.chain.*``
rows of the ``meta`` table (what was imported from each source chain) and nothing else; the
wire rules are :mod:`rensei_routing.core.audit.hydraflow`'s, the chain's
:mod:`rensei_routing.core.audit.chain`'s. Never reads the wall clock or a file: callers pass
lines (a way to read them, twice) and receive lines.

**Import** reads the source twice. The first pass verifies the whole chain by HydraFlow's rule
and checks that every record can be stored, holding no lock, so a chain that breaks anywhere (or
a record we cannot store, or a fork) writes nothing. The second pass appends in **bounded
transactions** (:data:`BATCH_RECORDS` records or :data:`BATCH_BYTES` of payload, whichever comes
first), so another writer of the home waits at most one batch, never the whole file. Between two
batches the import rests a tenth of the last batch's time (:data:`REST_MIN_S` to
:data:`REST_MAX_S`): SQLite's busy handler retries a waiting writer every few to 100 ms, and
without a gap the import would take the lock again before any waiter looked. The first pass
keeps a SHA-256 of the lines between its marks (and of those after the last record), and the
second checks each stretch of lines against it before using any of them, so nothing that pass
did not verify is written (a file changed in between in any way, lines added, removed or cut
short, stops the import at that batch). Lines so checked need no second verify: one in
HydraFlow's own form (:func:`~rensei_routing.core.audit.hydraflow.plain_line`) is read by
position and its stored envelope written around its payload text, without parsing it.

A source chain is identified by the record hash of its seq 0 (its genesis record); its ``meta``
row holds how many of its records were imported (``count``), the last one's hash (``head``),
where they landed in our chain (``blocks``: ``[source first seq, count, our first seq]``, one
per run of consecutive seqs), and, while an import is under way, the import it belongs to
(``importing``: ``{"records", "head"}`` of the verified source). Each batch commits its records
and the row together, so the row always states exactly what is imported: a verified prefix of
the chain. An import that stopped (killed, or the disk full) leaves ``importing`` in the row;
importing the file again skips what the row counts and appends the rest, and the last batch
removes it. A second import of the same chain, or of a longer one, appends only the records past
``count``; a chain whose record at an imported seq has another hash is a **fork** and is refused.
Because the source is hash-linked, comparing one record (the last imported one, or a shorter
source's last) compares every record below it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import apsw

from ..core.audit.chain import GENESIS_HASH
from ..core.audit.hydraflow import (
    HF_SCHEMA_VERSION,
    HfRecord,
    export_line,
    export_text,
    plain_envelope,
    plain_fields,
    plain_head,
    plain_line,
    stored_envelope,
    utc_recorded_at,
    walk,
)
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..errors import (
    AuditError,
    CanonicalEncodingError,
    HydraflowChainError,
    ImportRefusedError,
    NotFoundError,
    StoreError,
)
from .audit import AppendResult, AuditLog
from .db import store_error

__all__ = ["BATCH_BYTES", "BATCH_RECORDS", "ImportResult", "export_lines", "import_chain"]

_KEY: Final = "hydraflow.chain."
#: Records appended per write transaction (about half a second of importing).
BATCH_RECORDS: Final = 5_000
#: Stored payload bytes per write transaction, for chains of large records.
BATCH_BYTES: Final = 8 * 1024 * 1024
#: The rest between two batches, a tenth of the last batch's time within these bounds (seconds):
#: the gap in which a writer waiting on the busy handler (retrying every 1 to 100 ms) gets in.
REST_SHARE: Final = 0.1
REST_MIN_S: Final = 0.02
REST_MAX_S: Final = 0.15
#: The first pass marks every this many seqs (and every quarter batch of bytes, and the last):
#: it keeps the record hash there and the SHA-256 of the lines since the mark before; batches
#: end at marks, and the second pass checks each stretch of lines before it uses any of them.
_MARK_EVERY: Final = 256

#: ``lines()`` opens the source again, yielding its lines in file order.
Lines = Callable[[], Iterable[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """One import: the source chain (its genesis record hash; ``None`` for an empty file), its
    record count, how many of them an earlier import had brought in, whether that earlier
    import had stopped before its end (``resumed``), and what was appended."""

    chain: str | None
    records: int
    known: int
    added: AppendResult
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "chain": self.chain,
            "source_records": self.records,
            "already_imported": self.known,
            "imported": self.added.count,
            "first_seq": self.added.first_seq if self.added.count else None,
            "head_hash": self.added.head_hash if self.added.count else None,
            "resumed": self.resumed,
        }


def _state(conn: apsw.Connection, chain: str) -> dict[str, Any]:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_KEY + chain,)).fetchone()
    if row is None:
        return {"count": 0, "head": None, "blocks": []}
    try:
        state = json.loads(row[0])
        if not (isinstance(state, dict) and type(state.get("count")) is int):
            raise ValueError("not an import record")
    except ValueError as e:
        raise StoreError(f"the import record of HydraFlow chain {chain} is damaged: {e}") from e
    return state


@dataclass(slots=True)
class _Verified:
    """What the first pass found: the chain, its length, and at every mark (every
    :data:`_MARK_EVERY`-th seq, every quarter batch of bytes, and the last; ascending) the
    record hash, the SHA-256 of the lines since the mark before (blank ones too) and whether
    every record line among them is plain (:func:`~.hydraflow.plain_line`); and the SHA-256 of
    the lines after the last record."""

    chain: str | None = None
    records: int = 0
    marks: dict[int, str] = field(default_factory=dict)
    digests: dict[int, tuple[bytes, bool]] = field(default_factory=dict)
    rest: bytes = b""
    state: dict[str, Any] | None = None


def _digest(lines: Iterable[str]) -> bytes:
    """SHA-256 of the lines, joined (their UTF-8 bytes, as read)."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8", "surrogatepass"))
    return h.digest()


def _verify(
    log: AuditLog,
    lines: Lines,
    *,
    file: str,
    redactor: Redactor,
    mark_every: int,
    mark_bytes: int,
) -> _Verified:
    """The first pass: HydraFlow's verify over the whole source, every record checked storable,
    and a fork of what was imported before refused. Writes nothing, holds no lock. Marks
    every ``mark_every`` records or ``mark_bytes`` of lines, and the last (:class:`_Verified`)."""
    found = _Verified()
    read = [0]
    taken: list[str] = []  # the lines since the last mark

    def counted() -> Iterator[str]:
        for line in lines():
            read[0] += len(line)
            taken.append(line)
            yield line

    last, marked, plain, kept = "", 0, True, 0
    for rec in walk(counted()):  # the walk yields a record right after taking its line
        if rec.seq == 0:
            found.chain = rec.record_hash
            found.state = _read_state(log, rec.record_hash)
        if not plain_line(taken[-1], rec):  # a plain line is storable as it is
            _check_storable(rec, found.chain or "", file, redactor)
            plain = False
        state = found.state or {}
        if rec.seq == state.get("count", 0) - 1 and rec.record_hash != state.get("head"):
            raise _fork(rec.seq, found.chain or "")
        if (rec.seq + 1) % mark_every == 0 or read[0] - marked >= mark_bytes:
            found.marks[rec.seq], marked = rec.record_hash, read[0]
            found.digests[rec.seq] = (_digest(("".join(taken),)), plain)
            taken.clear()
            plain = True
        found.records, last, kept = rec.seq + 1, rec.record_hash, len(taken)
    if found.records:
        if found.records - 1 not in found.marks:
            found.marks[found.records - 1] = last
            found.digests[found.records - 1] = (_digest(("".join(taken[:kept]),)), plain)
        found.rest = _digest(taken[kept:])
        if found.state is not None and found.records < found.state["count"]:
            _check_shorter(log, found.state, found.records - 1, found.chain or "", last)
    return found


def _read_state(log: AuditLog, chain: str) -> dict[str, Any]:
    try:
        return _state(log._read_conn(), chain)
    except apsw.Error as e:
        raise store_error("cannot read the HydraFlow import records", e, log._path) from e


def import_chain(
    log: AuditLog,
    lines: Lines,
    *,
    file: str,
    redactor: Redactor = DEFAULT_REDACTOR,
    batch_records: int = BATCH_RECORDS,
    batch_bytes: int = BATCH_BYTES,
) -> ImportResult:
    """Verify a HydraFlow chain (``lines()``: its lines in file order; called twice) and append
    what is new of it, in write transactions of at most ``batch_records`` records or
    ``batch_bytes`` of stored payload.

    Every record becomes one of ours: the :func:`~.hydraflow.import_envelope` (origin + the
    HydraFlow payload), redacted by ``redactor``, at its own ``recorded_at`` (converted to
    RFC 3339 UTC; the original text is kept in the origin).

    Raises:
        HydraflowChainError: the chain does not verify (first bad seq and reason); nothing
            was written.
        ImportRefusedError: a fork of an imported chain; a record whose ``recorded_at`` names
            no instant, whose ``schema_version`` is not 1, or whose payload has no canonical
            form (non-finite numbers); nothing was written. Or the source changed between the
            two passes: the batches before the change are imported, and the ``meta`` row says
            so (``importing``).
        StoreError: the database could not be read or written (the batches before are
            imported, as above).
    """
    step = max(1, min(batch_records, _MARK_EVERY))
    limits = (max(step, batch_records - batch_records % step), max(1, batch_bytes))
    found = _verify(
        log, lines, file=file, redactor=redactor, mark_every=step, mark_bytes=limits[1] // 4 or 1
    )
    chain, total, state = found.chain, found.records, found.state
    if chain is None or state is None or total <= state["count"]:
        known = 0 if state is None else state["count"]
        nothing = AppendResult(first_seq=0, count=0, head_hash="")
        return ImportResult(chain=chain, records=total, known=known, added=nothing)
    records = _reread(lines(), found)
    done = _Done(count=state["count"], resumed="importing" in state)
    try:
        _skip(records, done.count)
        while done.count < total:
            began = time.monotonic()
            done.add(log.append_stamped(_batch(records, done, found, file, redactor, limits)))
            if done.count < total:  # let a waiting writer in before the next batch
                spent = (time.monotonic() - began) * REST_SHARE
                time.sleep(min(REST_MAX_S, max(REST_MIN_S, spent)))
    except (HydraflowChainError, ImportRefusedError) as e:
        raise ImportRefusedError(
            f"{file} changed while it was imported ({e}); {done.count:,} of its {total:,} "
            "verified records are imported: import it again"
        ) from e
    return ImportResult(
        chain=chain,
        records=total,
        known=state["count"],
        added=AppendResult(first_seq=done.first, count=done.appended, head_hash=done.head),
        resumed=done.resumed,
    )


@dataclass(slots=True)
class _Done:
    """The second pass so far: the source records imported (``count``, the meta row's), what
    this import appended (first seq, count, head), and whether it resumed an earlier one."""

    count: int
    resumed: bool
    first: int = 0
    appended: int = 0
    head: str = ""

    def add(self, added: AppendResult) -> None:
        if added.count:
            if not self.appended:
                self.first = added.first_seq
            self.appended += added.count
            self.head = added.head_hash


#: One record of the second pass: its seq and its line when it is plain
#: (:func:`~.hydraflow.plain_line`), else the record :func:`~.hydraflow.walk` read from it.
_Item = tuple[int, str | HfRecord]


def _reread(lines: Iterable[str], found: _Verified) -> Iterator[_Item]:
    """The second pass over the source: its records in order, a stretch of lines (those up to
    a mark from the one before) at a time, and each stretch's SHA-256 checked against the
    first pass's before any of its records is given out; before the last stretch's, the lines
    after the last record are checked too. So every record given out was read from bytes the
    first pass verified, and a source changed in any way is refused before its change is used.

    Raises:
        ImportRefusedError: the lines are not the ones the first pass verified.
    """
    source = iter(lines)
    first, prev = 0, GENESIS_HASH
    for mark, (digest, plain) in found.digests.items():
        taken: list[str] = []
        missing = mark + 1 - first
        for line in source:
            taken.append(line)
            if line and not line.isspace():  # a record's line (the walk skips blank ones)
                missing -= 1
                if not missing:
                    break
        if missing or _digest(("".join(taken),)) != digest:
            raise _changed(f"the lines of records {first} to {mark}")
        if mark + 1 == found.records and _digest(source) != found.rest:
            raise _changed(f"the lines after record {mark}")
        if plain:
            for line in taken:
                if line and not line.isspace():
                    yield first, line
                    first += 1
        else:
            for rec in walk(taken, start=first, prev=prev):
                yield rec.seq, rec
            first = mark + 1
        prev = found.marks[mark]


def _skip(records: Iterator[_Item], count: int) -> None:
    """Walk past the first ``count`` records (imported before), outside any transaction."""
    for _ in itertools.islice(records, count):
        pass


def _batch(
    records: Iterator[_Item],
    done: _Done,
    found: _Verified,
    file: str,
    redactor: Redactor,
    limits: tuple[int, int],
) -> Callable[[apsw.Connection, int, str], Iterator[tuple[str, bytes]]]:
    """One write transaction's records (``AuditLog.append_stamped``'s ``build``): the next
    ones after ``done.count`` up to a mark of the first pass past ``limits`` (records, bytes),
    each mark checked, and the ``meta`` row updated with them."""
    chain, total, marks = found.chain or "", found.records, found.marks
    per_batch, batch_bytes = limits
    head = plain_head(chain=chain, file=file)

    def build(conn: apsw.Connection, first: int, _head: str) -> Iterator[tuple[str, bytes]]:
        state = _state(conn, chain)
        if state["count"] != done.count:  # another import of this chain got here first
            if state["count"] < done.count:
                raise StoreError(f"the import record of HydraFlow chain {chain} moved back")
            _skip(records, state["count"] - done.count)
            done.count = state["count"]
            return
        start, size, n, last = done.count, 0, 0, ""
        for seq, item in records:
            if isinstance(item, str) and head is not None:
                text, p_hash, prev, last, stamp = plain_fields(item)
                envelope = plain_envelope(
                    head,
                    seq=seq,
                    text=text,
                    payload_hash=p_hash,
                    record_hash=last,
                    recorded_at=stamp,
                )
                if redactor.might_match(envelope):
                    data = _encoded(
                        next(walk((item,), start=seq, prev=prev)), chain, file, redactor
                    )
                else:
                    data = envelope.encode("utf-8")
            else:
                if isinstance(item, str):
                    text, p_hash, prev, last, stamp = plain_fields(item)
                    item = next(walk((item,), start=seq, prev=prev))
                data, last = _encoded(item, chain, file, redactor), item.record_hash
                stamp = _stamp(item.recorded_at, seq)
            yield stamp, data
            n, size = n + 1, size + len(data)
            if seq + 1 == total or (seq in marks and (n >= per_batch or size >= batch_bytes)):
                break
        else:  # the source ended before the records the first pass verified
            raise _changed(f"the lines from record {start + n} on")
        blocks = [list(b) for b in state["blocks"]]
        src, count, ours = blocks[-1] if blocks else (-1, 0, -1)
        if src + count == start and ours + count == first:
            blocks[-1][1] += n  # the run goes on: nothing else was appended in between
        else:
            blocks.append([start, n, first])
        row: dict[str, Any] = {"count": start + n, "head": last, "blocks": blocks}
        if start + n < total:
            row["importing"] = {"records": total, "head": marks[total - 1]}
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (_KEY + chain, json.dumps(row, separators=(",", ":"))),
        )
        done.count = start + n

    return build


def _changed(what: str) -> ImportRefusedError:
    return ImportRefusedError(f"{what} are not what the first pass verified")


def _fork(seq: int, chain: str) -> ImportRefusedError:
    return ImportRefusedError(
        f"fork: record {seq} of HydraFlow chain {chain} differs from the one imported before "
        f"(the chains diverge at or below seq {seq}); nothing was imported"
    )


def _stamp(recorded_at: Any, seq: int) -> str:
    stamp = utc_recorded_at(recorded_at)
    if stamp is None:
        raise ImportRefusedError(
            f"seq {seq}: recorded_at {recorded_at!r} names no UTC instant; nothing was imported"
        )
    return stamp


def _check_storable(rec: HfRecord, chain: str, file: str, redactor: Redactor) -> None:
    """What :func:`_encoded` and :func:`_stamp` would refuse, refused in the first pass (the
    payload encoded only when the walk found no canonical text for it)."""
    _stamp(rec.recorded_at, rec.seq)
    if rec.canonical is None or rec.schema_version != HF_SCHEMA_VERSION:
        _encoded(rec, chain, file, redactor)


def _encoded(rec: HfRecord, chain: str, file: str, redactor: Redactor) -> bytes:
    if rec.schema_version != HF_SCHEMA_VERSION:
        raise ImportRefusedError(
            f"seq {rec.seq}: schema_version {rec.schema_version!r} is not "
            f"{HF_SCHEMA_VERSION}; nothing was imported"
        )
    try:
        return stored_envelope(rec, chain=chain, file=file, redactor=redactor)
    except CanonicalEncodingError as e:
        raise ImportRefusedError(f"seq {rec.seq}: {e}; nothing was imported") from e


def _check_shorter(log: AuditLog, state: dict[str, Any], seq: int, chain: str, last: str) -> None:
    """A source shorter than what was imported must be a prefix of it: its last record (seq
    ``seq``, hash ``last``) must be the one imported at that seq."""
    for start, count, ours in state["blocks"]:
        if start <= seq < start + count:
            try:
                origin = log.get(ours + seq - start).payload["origin"]
                if origin["seq"] == seq and origin["record_hash"] == last:
                    return
            except (NotFoundError, KeyError, TypeError):
                pass
            break
    raise _fork(seq, chain)


def export_lines(log: AuditLog, *, start: int = 0, stop: int) -> Iterator[str]:
    """Our records ``start <= seq < stop`` as a HydraFlow chain (its own seqs from 0, genesis
    ``prev_hash``), each payload naming our seq and record hash (``rensei``)."""
    prev = GENESIS_HASH
    for i, record in enumerate(log.records(start=start, stop=stop)):
        try:
            text = export_text(record.payload_bytes, seq=record.seq, record_hash=record.record_hash)
        except (ValueError, RecursionError) as e:
            raise AuditError(f"record {record.seq} is damaged ({e}); nothing exported") from e
        line, prev = export_line(i, prev, text, record.recorded_at)
        yield line
