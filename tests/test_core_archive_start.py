"""Where an audit export's chain continues from (``core.audit.archive.export_start``), the one
rule ``rensei audit verify --file`` and the fleet's ingest share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rensei_routing.core.audit.archive import export_line, export_start, rows_from_lines
from rensei_routing.core.audit.chain import GENESIS_HASH, AuditRecord, link_rows
from rensei_routing.core.canonical import canonical_bytes

AT = "2026-01-01T00:00:00Z"


def _chain(n: int) -> list[str]:
    rows = link_rows(
        [canonical_bytes({"n": i}) for i in range(n)], seq=0, prev_hash=GENESIS_HASH, recorded_at=AT
    )
    return [export_line(AuditRecord.from_row(r)).decode() for r in rows]


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=7))
def test_an_export_continues_from_its_first_rows_seq_and_prev_hash(n: int, since: int) -> None:
    lines = _chain(n)[min(since, n - 1) :]
    every = list(rows_from_lines(lines))
    seq, prev, rows = export_start(iter(every))
    assert list(rows) == every  # nothing dropped, the first row given back
    first = every[0]
    assert seq == first[0]
    assert prev == (GENESIS_HASH if seq == 0 else first[2])


def test_an_empty_or_unreadable_export_starts_from_genesis() -> None:
    assert export_start(iter(()))[:2] == (0, GENESIS_HASH)
    rows = list(rows_from_lines(["not an export line\n"]))
    seq, prev, again = export_start(iter(rows))
    assert (seq, prev, list(again)) == (0, GENESIS_HASH, rows)
