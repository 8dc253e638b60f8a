"""The audit export format (JSON Lines) and reading it back as chain rows. Pure: no I/O.

One record per line, keys in this order, the payload spliced in as its stored RFC 8785 bytes::

    {"seq":0,"recorded_at":"...Z","prev_hash":"sha256:...","payload_hash":"sha256:...",
     "record_hash":"sha256:...","payload":{...}}

A reader re-encodes ``payload`` with the canonical encoder, which gives back the stored bytes
(they were written by it), so :func:`.chain.verify_chain` checks an export exactly as it checks
the database: the payload hash, the record hash, and each ``prev_hash`` link. Consecutive
exports (``--since`` the previous one's next seq) continue one chain.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Final

from ...errors import CanonicalEncodingError
from .. import _parse as p
from ..canonical import canonical_bytes
from .chain import GENESIS_HASH, ROW_COLUMNS, AuditRecord, Row

__all__ = ["EXPORT_KEYS", "MAX_LINE_BYTES", "export_line", "export_start", "rows_from_lines"]

EXPORT_KEYS: Final = ("seq", "recorded_at", "prev_hash", "payload_hash", "record_hash", "payload")
#: The longest export line a reader accepts (without its ``\n``): 64 MiB, far above any record
#: the toolkit writes (payloads are decisions and notes of a few KB). A reader reads at most
#: this much of a line, so a file with no newline (``/dev/zero``) cannot grow it without bound.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024


def export_line(record: AuditRecord) -> bytes:
    """One export line (with its ``\\n``) for a stored record."""
    head = json.dumps(
        {
            "seq": record.seq,
            "recorded_at": record.recorded_at,
            "prev_hash": record.prev_hash,
            "payload_hash": record.payload_hash,
            "record_hash": record.record_hash,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return head[:-1].encode("utf-8") + b',"payload":' + record.payload_bytes + b"}\n"


#: What a line that is not an export record becomes: a row :func:`.chain.verify_chain` reports
#: as ``unparseable-record`` at the seq it expected there.
_UNREADABLE: Final = ("unreadable",)


def _row(line: str) -> Row | tuple[str]:
    try:
        doc = p.STRICT_DECODER.decode(line)
        if not isinstance(doc, dict) or tuple(doc) != EXPORT_KEYS:
            return _UNREADABLE
        data = canonical_bytes(doc["payload"])
    except (ValueError, RecursionError, TypeError, CanonicalEncodingError):
        return _UNREADABLE
    return (
        doc["seq"],
        doc["recorded_at"],
        doc["prev_hash"],
        doc["payload_hash"],
        doc["record_hash"],
        data,
    )


def rows_from_lines(lines: Iterable[str]) -> Iterator[Row | tuple[str]]:
    """Chain rows (``ROW_COLUMNS`` order) of export lines; blank lines are skipped, and a line
    that is not an export record (one longer than :data:`MAX_LINE_BYTES` included) yields a row
    the verifier reports as unparseable."""
    for line in lines:
        if len(line) - line.endswith("\n") > MAX_LINE_BYTES:  # characters: as many bytes, or more
            yield _UNREADABLE
        elif line.strip():
            yield _row(line)


def export_start(
    rows: Iterator[Row | tuple[str]],
) -> tuple[int, str, Iterator[Row | tuple[str]]]:
    """``(first seq, prev_hash, rows)`` of an export's rows (:func:`rows_from_lines`): the seq
    and hash its chain continues from, and the rows again from the first. An export starting at
    seq 0 (or empty, or whose first row is unreadable) starts from the genesis hash; a later
    start is anchored on its own first ``prev_hash``."""
    first = next(rows, None)
    start_seq, start_hash = 0, GENESIS_HASH
    if first is not None and len(first) == len(ROW_COLUMNS) and type(first[0]) is int:
        start_seq = max(0, first[0])
        if start_seq and isinstance(first[2], str):
            start_hash = first[2]
    return start_seq, start_hash, (rows if first is None else itertools.chain([first], rows))
