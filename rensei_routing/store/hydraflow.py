"""HydraFlow audit chains in and out of the home's audit log. Owns the ``hydraflow.chain.*``
rows of the ``meta`` table (what was imported from each source chain) and nothing else; the
wire rules are :mod:`rensei_routing.core.audit.hydraflow`'s, the chain's
:mod:`rensei_routing.core.audit.chain`'s. Never reads the clock or a file: callers pass lines
and receive lines.

**Import** verifies the source chain by HydraFlow's rule while appending it, in one write
transaction, so a chain that breaks anywhere (or a record we cannot store) writes nothing. A
source chain is identified by the record hash of its seq 0 (its genesis record); its ``meta``
row holds how many of its records were imported, the last one's hash, and where each import
landed in our chain (``blocks``: ``[source first seq, count, our first seq]``). A second import
of the same chain, or of a longer one, appends only the records past that count; a chain whose
record at an imported seq has another hash is a **fork** and is refused. Because the source is
hash-linked, comparing one record (the last imported one, or a shorter source's last) compares
every record below it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import apsw

from ..core.audit.chain import GENESIS_HASH
from ..core.audit.hydraflow import (
    HF_SCHEMA_VERSION,
    export_line,
    export_text,
    stored_envelope,
    utc_recorded_at,
    walk,
)
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..errors import (
    AuditError,
    CanonicalEncodingError,
    ImportRefusedError,
    NotFoundError,
    StoreError,
)
from .audit import AppendResult, AuditLog

__all__ = ["ImportResult", "export_lines", "import_chain"]

_KEY: Final = "hydraflow.chain."


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """One import: the source chain (its genesis record hash; ``None`` for an empty file), its
    record count, how many of them an earlier import had brought in, and what was appended."""

    chain: str | None
    records: int
    known: int
    added: AppendResult

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "chain": self.chain,
            "source_records": self.records,
            "already_imported": self.known,
            "imported": self.added.count,
            "first_seq": self.added.first_seq if self.added.count else None,
            "head_hash": self.added.head_hash if self.added.count else None,
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


def import_chain(
    log: AuditLog,
    lines: Iterable[str],
    *,
    file: str,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> ImportResult:
    """Verify a HydraFlow chain (its lines, in file order) and append what is new of it.

    Every record becomes one of ours: the :func:`~.hydraflow.import_envelope` (origin + the
    HydraFlow payload), redacted by ``redactor``, at its own ``recorded_at`` (converted to
    RFC 3339 UTC; the original text is kept in the origin).

    Raises:
        HydraflowChainError: the chain does not verify (first bad seq and reason); nothing
            was written.
        ImportRefusedError: a fork of an imported chain; a record whose ``recorded_at`` names
            no instant, whose ``schema_version`` is not 1, or whose payload has no canonical
            form (non-finite numbers); nothing was written.
        StoreError: the database could not be read or written (nothing was written).
    """
    found: dict[str, Any] = {"chain": None, "records": 0, "known": 0, "state": None, "last": ""}

    def build(conn: apsw.Connection, first: int, _head: str) -> Iterator[tuple[str, bytes]]:
        state: dict[str, Any] = {"count": 0, "head": None, "blocks": []}
        chain = ""
        for rec in walk(lines):
            if rec.seq == 0:
                chain = rec.record_hash
                state = _state(conn, chain)
                found.update(chain=chain, known=state["count"], state=state)
            found["records"], found["last"] = rec.seq + 1, rec.record_hash
            if rec.seq < state["count"]:
                if rec.seq == state["count"] - 1 and rec.record_hash != state["head"]:
                    raise _fork(rec.seq, chain)
                continue
            yield _stamp(rec.recorded_at, rec.seq), _encoded(rec, chain, file, redactor)
        count = found["records"]
        if count > state["count"]:
            state = {
                "count": count,
                "head": found["last"],
                "blocks": [*state["blocks"], [state["count"], count - state["count"], first]],
            }
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (_KEY + chain, json.dumps(state, separators=(",", ":"))),
            )

    added = log.append_stamped(build)
    state = found["state"]
    if state is not None and 0 < found["records"] < state["count"]:
        _check_shorter(log, state, found["records"] - 1, found["chain"], found["last"])
    return ImportResult(
        chain=found["chain"], records=found["records"], known=found["known"], added=added
    )


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


def _encoded(rec: Any, chain: str, file: str, redactor: Redactor) -> bytes:
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
