"""Benchmark 2, chain-append: durable audit appends (``append``, one record per transaction, and
``append_many`` at 10, 100 and 1,000 per transaction) beside raw INSERTs of the same stored rows.

Both sides open their database with the library's ``connect(path, write=True)`` (WAL,
``synchronous=FULL``, ``BEGIN IMMEDIATE``, apsw's per-connection best practice) and write to an
identical ``audit_records`` table. The library side redacts, canonicalises, hashes, links and
inserts decision-shaped payloads (``RouteDecision.to_dict()``); after each of its transactions
the rows it stored are read back (untimed) and the baseline inserts exactly those bytes in a
transaction of the same size. Library and baseline transactions alternate, so both see the same
machine. Target (issue 4): at least 0.8x the baseline at every batch size.
"""

from __future__ import annotations

import datetime as dt
import gc
import tempfile
from contextlib import closing
from pathlib import Path

from rensei_routing.core.chain import ROW_COLUMNS, format_timestamp
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.db import connect

from .harness import BenchResult, Config, Figure, Growth, progress, timed
from .workload import decision_payloads

NAME = "chain-append"
TITLE = "durable audit append vs raw INSERT of the same bytes"

BATCHES = (1, 10, 100, 1_000)
TARGET_RATIO = 0.8
ORIGIN = "rensei-routing/bench/audit"

_COLUMNS = ", ".join(ROW_COLUMNS)
_INSERT = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM audit_records WHERE seq >= ? ORDER BY seq"


def _transactions(cfg: Config) -> dict[int, int]:
    if cfg.quick:
        return {1: 20, 10: 10, 100: 4, 1_000: 2}
    return {1: 400, 10: 150, 100: 40, 1_000: 10}


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    plan = _transactions(cfg)
    payloads = decision_payloads(300 if cfg.quick else 2_000)
    stored_bytes = stored_rows = 0
    base_time = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    per_record: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rensei-bench-append-") as tmp:
        for batch in BATCHES:
            txns = plan[batch]
            progress(f"{NAME}: {txns} transactions of {batch}")
            lib_path, raw_path = Path(tmp, f"lib-{batch}.db"), Path(tmp, f"raw-{batch}.db")
            log = AuditLog(lib_path, origin=ORIGIN)
            with closing(log), closing(connect(raw_path, write=True)) as raw:
                log.append(payloads[0], recorded_at=format_timestamp(base_time))  # open, migrate
                with closing(connect(lib_path)) as reader:
                    with raw:
                        raw.executemany(_INSERT, reader.execute(_SELECT, (0,)).fetchall())
                    settings = (raw.pragma("journal_mode"), raw.pragma("synchronous"))
                    res.check(
                        settings == ("wal", 2),
                        f"batch {batch}: baseline connection is WAL + synchronous=FULL",
                    )
                    lib_s = raw_s = 0.0
                    cursor = 1
                    gc.collect()
                    for k in range(txns):
                        chunk = [payloads[(cursor + i) % len(payloads)] for i in range(batch)]
                        stamp = format_timestamp(base_time + dt.timedelta(seconds=k + 1))
                        with timed(collect=False) as t:
                            if batch == 1:
                                log.append(chunk[0], recorded_at=stamp)
                            else:
                                log.append_many(chunk, recorded_at=stamp)
                        lib_s += t[0]
                        rows = reader.execute(_SELECT, (cursor,)).fetchall()
                        if len(rows) != batch:
                            res.check(False, f"batch {batch}: library stored {len(rows)} rows")
                        stored_bytes += sum(len(row[5]) for row in rows)
                        stored_rows += len(rows)
                        with timed(collect=False) as t, raw:
                            if batch == 1:
                                raw.execute(_INSERT, rows[0])
                            else:
                                raw.executemany(_INSERT, rows)
                        raw_s += t[0]
                        cursor += batch
                    result = log.verify()
                    res.check(
                        bool(result) and result.records_checked == cursor,
                        f"batch {batch}: the appended chain verifies ({cursor:,} records)",
                    )
                    same = (
                        reader.execute(_SELECT, (0,)).fetchall()
                        == raw.execute(_SELECT, (0,)).fetchall()
                    )
                    res.check(same, f"batch {batch}: baseline table holds the same rows")
            records = txns * batch
            lib_rate, raw_rate = records / lib_s, records / raw_s
            per_record[batch] = (lib_s / records, raw_s / records)
            ratio = lib_rate / raw_rate
            label = "append, 1/txn" if batch == 1 else f"append_many, {batch:,}/txn"
            res.figures.append(
                Figure(
                    case=f"{label} ({txns} txns)",
                    value=lib_rate,
                    unit="records/s",
                    baseline=raw_rate,
                    baseline_label="raw INSERT",
                    ratio=ratio,
                    target=f">= {TARGET_RATIO}x",
                    passed=ratio >= TARGET_RATIO,
                )
            )
    res.growth.append(
        Growth(
            what="library time per record by records/txn",
            unit="us",
            points=[(f"{b:,}/txn", per_record[b][0] * 1e6) for b in BATCHES],
        )
    )
    res.growth.append(
        Growth(
            what="raw INSERT time per record by records/txn",
            unit="us",
            points=[(f"{b:,}/txn", per_record[b][1] * 1e6) for b in BATCHES],
        )
    )
    res.notes.append(
        f"payloads: {len(payloads):,} distinct RouteDecision.to_dict() values (1,000-policy set, "
        f"default trace), cycled; {stored_bytes // max(stored_rows, 1):,} bytes each as stored"
    )
    return res
