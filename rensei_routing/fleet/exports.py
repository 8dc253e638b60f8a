"""Reading hosts' ``rensei audit export`` files as chain rows for the fleet ingest, and finding
each export's checkpoint. Owns the file side of an ingest; the verification is
:func:`rensei_routing.core.audit.chain.verify_chain`'s, the export format
:mod:`rensei_routing.core.audit.archive`'s.

An export line is ``{"seq":..,"recorded_at":"..","prev_hash":"..","payload_hash":"..",
"record_hash":"..","payload":<the stored canonical bytes>}``. :func:`export_rows` reads the
common line by one regular expression and takes the payload as the bytes between
``,"payload":`` and the final ``}``: when those bytes hash to the line's ``payload_hash`` they
are the bytes the host stored, which the archive reader's re-encoding gives back too (the
host's log holds canonical bytes), so the verdict is the one ``rensei audit verify --file``
gives. Any other line goes through the archive reader itself
(:func:`~rensei_routing.core.audit.archive.rows_from_lines`).

Pairing: the checkpoint of ``NAME.jsonl`` is ``NAME.checkpoint`` beside it (what
``rensei audit checkpoint -o NAME.checkpoint`` writes), and its consistency proof, when the
fleet needs one, ``NAME.consistency`` (what ``rensei audit consistency OLD NAME.checkpoint -o
NAME.consistency`` writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from ..core.audit.archive import MAX_LINE_BYTES, rows_from_lines
from ..core.audit.chain import Row
from ..errors import InputError
from ..files import bounded_lines

__all__ = [
    "CHECKPOINT_SUFFIX",
    "CONSISTENCY_SUFFIX",
    "checkpoint_for",
    "consistency_for",
    "export_files",
    "export_rows",
    "first_seq",
]

CHECKPOINT_SUFFIX: Final = ".checkpoint"
CONSISTENCY_SUFFIX: Final = ".consistency"
EXPORT_SUFFIX: Final = ".jsonl"

_LINE: Final = re.compile(
    rb'\{"seq":(0|[1-9][0-9]{0,17}),"recorded_at":"([0-9T:.Z+-]{1,64})",'
    rb'"prev_hash":"(sha256:[0-9a-f]{64})","payload_hash":"(sha256:[0-9a-f]{64})",'
    rb'"record_hash":"(sha256:[0-9a-f]{64})","payload":'
)


def _slow(raw: bytes) -> Iterator[Row | tuple[str]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "\x00"  # not JSON: the verifier reports an unparseable record here
    yield from rows_from_lines([text])


def export_rows(path: Path) -> Iterator[Row | tuple[str]]:
    """Chain rows (``ROW_COLUMNS`` order) of the export at ``path``, blank lines skipped; a line
    that is no export record yields a row the verifier reports as ``unparseable-record``.

    Raises:
        InputError: a line is longer than :data:`MAX_LINE_BYTES`.
        OSError: the file cannot be read.
    """
    match = _LINE.match
    for raw in bounded_lines(path, MAX_LINE_BYTES, what="an audit export"):
        m = match(raw)
        end = len(raw) - 2 if raw.endswith(b"}\n") else len(raw) - 1
        if m is None or raw[end] != 0x7D:  # "}"
            if raw.strip():
                yield from _slow(raw)
            continue
        seq, recorded_at, prev_hash, p_hash, r_hash = m.groups()
        yield (
            int(seq),
            recorded_at.decode("ascii"),
            prev_hash.decode("ascii"),
            p_hash.decode("ascii"),
            r_hash.decode("ascii"),
            raw[m.end() : end],
        )


def first_seq(path: Path) -> int:
    """The seq of the first record of an export (0 when it has none or it is unreadable): the
    order several exports of one host are ingested in."""
    try:
        for row in export_rows(path):
            return row[0] if len(row) > 1 and type(row[0]) is int else 0
    except (InputError, OSError):
        return 0
    return 0


def checkpoint_for(export: Path) -> Path:
    """Where the checkpoint of ``export`` is: ``NAME.checkpoint`` for ``NAME.jsonl``."""
    return export.with_suffix(CHECKPOINT_SUFFIX)


def consistency_for(export: Path) -> Path:
    """Where the consistency proof of ``export`` is: ``NAME.consistency`` for ``NAME.jsonl``."""
    return export.with_suffix(CONSISTENCY_SUFFIX)


def export_files(paths: Sequence[Path]) -> list[Path]:
    """The export files named: each file as given, each directory's ``*.jsonl`` files; in
    the order of their first seq (a host's later exports after its earlier ones), then name.

    Raises:
        InputError: a path does not exist, or nothing to ingest was named.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob(f"*{EXPORT_SUFFIX}") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise InputError(f"no such export file or directory: {path}")
    if not found:
        raise InputError("no export (*.jsonl) to ingest in " + ", ".join(map(str, paths)))
    return sorted(dict.fromkeys(found), key=lambda p: (first_seq(p), str(p)))
