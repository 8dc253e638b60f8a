"""The second pass of a HydraFlow import: it checks each stretch of the source's lines against
the SHA-256 the first pass kept, before using any of them, and reads a plain line (HydraFlow's
own text of a record with a canonical payload and an RFC 3339 UTC time) by position instead of
parsing and hashing it again. What it stores must be byte for byte what the plain path (parse,
wrap, canonicalise, redact) stores, and a source changed between the passes in any way (a line
rewritten at the same or another length, a line appended, the file truncated; by another
process) must be refused with the database unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rensei_routing.store.hydraflow as store_hf
from rensei_routing.cli.audit_import import _lines as cli_lines
from rensei_routing.core.audit.hydraflow import (
    import_envelope,
    plain_envelope,
    plain_fields,
    plain_head,
    plain_line,
    walk,
)
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.errors import CanonicalEncodingError, ImportRefusedError
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.hydraflow import import_chain

from . import hydraflow_ref as ref

SECRET = "sk-ant-api03-" + "A1b2C3d4" * 8


def _values(numbers: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """JSON values, the record's own keys and a secret among them."""
    return st.recursive(
        st.none()
        | st.booleans()
        | numbers
        | st.text(max_size=12)
        | st.sampled_from([SECRET, "sha256:" + "a" * 64, ',"payload_hash":"sha256:', "\x7f\u2028"]),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.text(max_size=6)
                | st.sampled_from(["payload_hash", "record_hash", "recorded_at"]),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    )


#: Any JSON value HydraFlow writes (NaN, integers past 2**53: no canonical form, refused).
json_values = _values(st.integers(min_value=-(2**64), max_value=2**64) | st.floats(allow_nan=True))
#: Mostly storable ones.
storable_values = _values(
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
)
stamps = st.sampled_from(
    [
        "2026-08-22T10:00:00Z",
        "2026-08-22T10:00:00.123456Z",
        "2026-08-22T10:00:00.5Z",
        "2026-08-22T10:00:00+00:00",
        "2026-08-22T12:00:00+02:00",
        "2026-02-30T10:00:00Z",
    ]
)
_Z_STAMPS = {"2026-08-22T10:00:00Z", "2026-08-22T10:00:00.123456Z", "2026-08-22T10:00:00.5Z"}


def _identity(text: str) -> str:
    return text


@settings(max_examples=400, deadline=None)
@given(
    payloads=st.lists(json_values, min_size=1, max_size=3),
    stamp=stamps,
    chain=st.text(max_size=8),
    file=st.text(max_size=8) | st.just("/tmp/shadow-décisions.jsonl"),
    newline=st.booleans(),
)
def test_a_plain_line_reads_back_by_position_to_the_envelope_the_plain_path_builds(
    payloads: list[Any], stamp: str, chain: str, file: str, newline: bool
) -> None:
    lines = ref.chain_lines(payloads, [stamp] * len(payloads), redact=_identity)
    if not newline:
        lines[-1] = lines[-1].rstrip("\n")
    for line, rec in zip(lines, walk(lines), strict=True):
        # every line the reference writes is HydraFlow's own text: plain exactly when its
        # payload has a canonical text and its time is RFC 3339 UTC
        assert plain_line(line, rec) == (rec.canonical is not None and stamp in _Z_STAMPS)
        if not plain_line(line, rec):
            continue
        fields = plain_fields(line)
        assert fields == (rec.canonical, rec.payload_hash, rec.prev_hash, rec.record_hash, stamp)
        head = plain_head(chain=chain, file=file)
        try:
            slow = canonical_bytes(import_envelope(rec, chain=chain, file=file))
        except CanonicalEncodingError:
            assert head is None
            continue
        assert head is not None
        fast = plain_envelope(
            head,
            seq=rec.seq,
            text=fields[0],
            payload_hash=fields[1],
            record_hash=fields[3],
            recorded_at=fields[4],
        )
        assert fast.encode("utf-8") == slow


@pytest.mark.parametrize(
    "line",
    [
        # the reference's text with a space, keys out of order, a key added, a float written
        # another way, an escaped slash, CRLF: all verify by HydraFlow's rule, none is plain
        lambda x: x.replace('"payload":{', '"payload": {', 1),
        lambda x: '{"seq":0,' + x[1:].replace(',"seq":0}', "}"),
        lambda x: x.replace('"schema_version":1', '"extra":1,"schema_version":1'),
        lambda x: x.replace('"schema_version":1', '"schema_version":1.0'),
        lambda x: x.replace(
            '"recorded_at":"2026-08-22T10:00:00Z"', '"recorded_at":"2026\\u002d08-22T10:00:00Z"'
        ),
        lambda x: x.replace("\n", "\r\n"),
    ],
)
def test_a_line_hydraflow_would_not_write_so_is_not_plain(line: Callable[[str], str]) -> None:
    (text,) = ref.chain_lines([{"a": "b/c", "n": 1}], ["2026-08-22T10:00:00Z"])
    (rec,) = walk([text])
    assert plain_line(text, rec)
    changed = line(text)
    assert changed != text
    (again,) = walk([changed])
    assert not plain_line(changed, again)


def _chain_rows(log: AuditLog) -> list[tuple[int, str, str, str, bytes]]:
    return [
        (r.seq, r.recorded_at, r.prev_hash, r.record_hash, r.payload_bytes) for r in log.records()
    ]


def _meta_rows(db: Path) -> list[tuple[str, str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            (str(k), str(v))
            for k, v in conn.execute(
                "SELECT key, value FROM meta WHERE key LIKE 'hydraflow.chain.%' ORDER BY key"
            )
        ]
    finally:
        conn.close()


def _import(
    db: Path, lines: list[str], *, plain: bool, batch: int
) -> tuple[list[tuple[int, str, str, str, bytes]], list[tuple[str, str]]]:
    saved = store_hf.plain_line
    if not plain:  # the plain path: every line parsed, wrapped and encoded
        store_hf.plain_line = lambda line, record: False  # type: ignore[assignment]
    try:
        log = AuditLog(db, origin="rensei-routing/test")
        try:
            log.append_many([{"before": "the import"}], recorded_at="2026-08-22T09:00:00Z")
            import_chain(log, lambda: iter(lines), file="/x/shadow.jsonl", batch_records=batch)
            return _chain_rows(log), _meta_rows(db)
        finally:
            log.close()
    finally:
        store_hf.plain_line = saved


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(storable_values, min_size=1, max_size=40),
    stamp_of=st.lists(stamps, min_size=1, max_size=40),
    blank=st.sets(st.integers(min_value=0, max_value=40), max_size=3),
    batch=st.integers(min_value=1, max_value=12),
)
def test_the_import_stores_what_the_plain_path_stores(
    payloads: list[Any], stamp_of: list[str], blank: set[int], batch: int
) -> None:
    """Plain and other lines mixed, blank lines between, small batches and marks; records
    that redact (a secret), that have no canonical form (refused alike) and a payload with the
    record's own keys nested."""
    lines = ref.chain_lines(
        payloads, [stamp_of[i % len(stamp_of)] for i in range(len(payloads))], redact=_identity
    )
    for at in sorted(blank, reverse=True):
        lines.insert(min(at, len(lines)), "\n")
    with tempfile.TemporaryDirectory() as tmp:
        outcome = []
        for plain in (True, False):
            try:
                outcome.append(_import(Path(tmp, f"{plain}.db"), lines, plain=plain, batch=batch))
            except ImportRefusedError as e:
                outcome.append(type(e))  # type: ignore[arg-type]
        assert outcome[0] == outcome[1]


def test_the_plain_path_is_taken_and_stores_what_the_parsing_path_stores(tmp_path: Path) -> None:
    """Many records over several batches and marks (the benchmark's shape): every record
    read by position, and the chain byte for byte the parsing path's."""
    payloads: list[Any] = [
        {"kind": "note", "n": i, "nested": {"payload_hash": "sha256:" + "f" * 64}}
        for i in range(1_200)
    ]
    payloads[7] = {"kind": "note", "text": f"saw {SECRET}"}  # redacted on the way in
    stamp = [f"2026-08-22T10:{i // 600:02d}:{i % 60:02d}.{i:06d}Z" for i in range(1_200)]
    lines = ref.chain_lines(payloads, stamp)
    built = []
    real = store_hf.plain_envelope

    def spy(head: str, **fields: Any) -> str:
        built.append(fields["seq"])
        return real(head, **fields)

    store_hf.plain_envelope = spy  # type: ignore[assignment]
    try:
        fast = _import(tmp_path / "fast.db", lines, plain=True, batch=500)
    finally:
        store_hf.plain_envelope = real
    assert built == list(range(1_200))
    assert fast == _import(tmp_path / "slow.db", lines, plain=False, batch=500)
    assert SECRET.encode() not in b"".join(row[4] for row in fast[0])


# -- a source changed between the two passes ------------------------------------------------

#: Another process changing the source: PATH MODE.
_ATTACK = r"""
import os, sys
path, mode = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    lines = f.readlines()
if mode.startswith("same-length"):
    at = int(mode.split(":")[1])
    lines[at] = lines[at].replace(b'"kind":"note"', b'"kind":"nope"', 1)
elif mode.startswith("longer"):
    at = int(mode.split(":")[1])
    lines[at] = lines[at].replace(b'"kind":"note"', b'"kind":"notes"', 1)
elif mode == "append":
    lines.append(sys.stdin.buffer.read())
elif mode == "append-blank":
    lines.append(b"\n")
elif mode == "truncate-line":
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
elif mode == "truncate-record":
    lines.pop()
else:
    raise SystemExit("unknown mode " + mode)
with open(path, "r+b") as f:  # rewritten in place, as a writer of the file would
    f.write(b"".join(lines))
    f.truncate()
"""

RECORDS = 600  # one batch of the default size, three marks


def _source(tmp_path: Path) -> tuple[Path, str]:
    payloads = [{"kind": "note", "n": i % 10, "i": i} for i in range(RECORDS + 1)]
    stamp = [f"2026-08-22T10:00:{i % 60:02d}Z" for i in range(RECORDS + 1)]
    lines = ref.chain_lines(payloads, stamp)
    return ref.write_chain(tmp_path / "shadow-decisions.jsonl", lines[:RECORDS]), lines[RECORDS]


def _changed_between(path: Path, mode: str, appended: str) -> Callable[[], Iterator[str]]:
    """The CLI's way of reading ``path``; before the second read, another process changes it."""
    reads = [0]

    def lines() -> Iterator[str]:
        reads[0] += 1
        if reads[0] == 2:
            subprocess.run(
                [sys.executable, "-c", _ATTACK, str(path), mode],
                input=appended.encode(),
                check=True,
            )
        return cli_lines(path)

    return lines


def _state(log: AuditLog, db: Path) -> tuple[Any, ...]:
    return (_chain_rows(log), _meta_rows(db))


@pytest.mark.parametrize(
    "mode",
    [
        "same-length:0",
        "same-length:300",
        f"same-length:{RECORDS - 1}",
        "longer:1",
        "longer:450",
        "append",
        "append-blank",
        "truncate-line",
        "truncate-record",
    ],
)
def test_a_source_changed_by_another_process_between_the_passes_is_refused(
    tmp_path: Path, mode: str
) -> None:
    path, appended = _source(tmp_path)
    db = tmp_path / "h.db"
    log = AuditLog(db, origin="rensei-routing/test")
    try:
        log.append_many([{"before": "the import"}], recorded_at="2026-08-22T09:00:00Z")
        before = _state(log, db)
        with pytest.raises(ImportRefusedError, match="changed while it was imported"):
            import_chain(log, _changed_between(path, mode, appended), file=str(path))
        assert _state(log, db) == before
        assert log.verify()
        if mode in ("append", "append-blank", "truncate-record"):  # still a chain
            again = import_chain(log, lambda: cli_lines(path), file=str(path))
            assert (
                again.added.count
                == again.records
                == RECORDS + (mode == "append") - (mode == "truncate-record")
            )
    finally:
        log.close()


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_byte_changed_between_the_passes_is_refused_at_its_batch(data: st.DataObject) -> None:
    """One character of the source changed: in a file of one batch nothing is written; in
    batches of 16, exactly the batches before the change's are."""
    payloads = [{"kind": "note", "n": i} for i in range(40)]
    lines = ref.chain_lines(payloads, [f"2026-08-22T10:00:{i:02d}Z" for i in range(40)])
    lines.insert(17, "\n")
    lines.append("\n")
    text = "".join(lines)
    at = data.draw(st.integers(min_value=0, max_value=len(text) - 1), label="at")
    ch = data.draw(st.sampled_from('0a\n "}x'), label="char")
    batch = data.draw(st.sampled_from([16, store_hf.BATCH_RECORDS]), label="batch")
    changed = text[:at] + ch + text[at + 1 :]
    if changed == text:
        return
    line = text.count("\n", 0, at)  # the line holding the change
    records_before = sum(1 for x in lines[:line] if x.strip())
    kept = 0 if batch > 40 else min(records_before, 40) // 16 * 16
    reads: Iterator[list[str]] = iter([lines, changed.splitlines(keepends=True)])
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp, "h.db")
        log = AuditLog(db, origin="rensei-routing/test")
        try:
            with pytest.raises(ImportRefusedError, match="changed while it was imported"):
                import_chain(log, lambda: next(reads), file="f", batch_records=batch)
            assert log.count() == kept
            meta = _meta_rows(db)
            assert (json.loads(meta[0][1])["count"] if meta else 0) == kept
        finally:
            log.close()
