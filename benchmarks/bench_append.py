"""Benchmark 2, chain-append: durable audit appends (``append``, one record per transaction, and
``append_many`` at 10, 100 and 1,000 per transaction) beside raw INSERTs of the same stored rows.

Both sides open their database with the library's ``connect(path, write=True)`` (WAL,
``synchronous=FULL``, ``BEGIN IMMEDIATE``, apsw's per-connection best practice) and write to an
identical ``audit_records`` table. The library side redacts, canonicalises, hashes, links and
inserts decision-shaped payloads (``RouteDecision.to_dict()``); after each of its transactions
the rows it stored are read back (untimed) and the baseline inserts exactly those bytes in a
transaction of the same size. Library and baseline transactions alternate, so both see the same
machine. Target (issue 4): at least 0.8x the baseline at every batch size.

Issue 21 adds rows against a baseline that does the work any chained log must do, minus ours:
canonical JSON (the object's own ``canonical()`` where it has one, else the RFC 8785 encoder)
+ SHA-256 + zstd (the database's dictionary, our level) + INSERT of the same payloads, 1,000 in
one transaction. What the library adds is the redaction pre-check (and redaction where it
might match), the record hash and the link. Payloads: plain decision-shaped dicts (15 fields,
~465 canonical bytes), resolver decisions (``RouteDecision`` objects, as ``--record`` appends
them) and shadow records (``ShadowDecision``, appended through ``append_many``). Target: at
least 0.5x.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing import signing
from rensei_routing.core.audit.chain import ROW_COLUMNS
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.audit.autocheckpoint import DEFAULT_CHECKPOINT_EVERY
from rensei_routing.store.codec import Codec
from rensei_routing.store.db import connect

from . import bench_shadow, record_size
from .harness import BenchResult, Config, Figure, Growth, progress, timed
from .workload import decision_dicts, decisions

NAME = "chain-append"
TITLE = "durable audit append vs raw INSERT of the same bytes"

BATCHES = (1, 10, 100, 1_000)
TARGET_RATIO = 0.8
#: Issue 21: append_many at 1,000/txn against canonical JSON + SHA-256 + zstd + INSERT.
PIPELINE_TARGET = 0.5
PIPELINE_BATCH = 1_000
ORIGIN = "rensei-routing/bench/audit"

_COLUMNS = ", ".join(ROW_COLUMNS)
_INSERT = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM audit_records WHERE seq >= ? ORDER BY seq"


def _transactions(cfg: Config) -> dict[int, int]:
    if cfg.quick:
        return {1: 20, 10: 10, 100: 4, 1_000: 2}
    return {1: 400, 10: 150, 100: 40, 1_000: 10}


def _measure(
    res: BenchResult, tmp: str, tag: str, batch: int, txns: int, payloads: Sequence[Any]
) -> tuple[float, float, int, int]:
    """Alternate ``txns`` library transactions of ``batch`` payloads with raw INSERTs of the rows
    each one stored. Returns (library seconds, raw seconds, stored bytes, stored rows)."""
    base_time = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    lib_path, raw_path = Path(tmp, f"lib-{tag}-{batch}.db"), Path(tmp, f"raw-{tag}-{batch}.db")
    stored_bytes = stored_rows = 0
    log = AuditLog(lib_path, origin=ORIGIN)
    with closing(log), closing(connect(raw_path, write=True)) as raw:
        log.append(payloads[0], recorded_at=format_timestamp(base_time))  # open, migrate
        with closing(connect(lib_path)) as reader:
            with raw:
                raw.executemany(_INSERT, reader.execute(_SELECT, (0,)).fetchall())
            settings = (raw.pragma("journal_mode"), raw.pragma("synchronous"))
            res.check(
                settings == ("wal", 2),
                f"{tag} batch {batch}: baseline connection is WAL + synchronous=FULL",
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
                    res.check(False, f"{tag} batch {batch}: library stored {len(rows)} rows")
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
                f"{tag} batch {batch}: the appended chain verifies ({cursor:,} records)",
            )
            same = reader.execute(_SELECT, (0,)).fetchall() == raw.execute(_SELECT, (0,)).fetchall()
            res.check(same, f"{tag} batch {batch}: baseline table holds the same rows")
    return lib_s, raw_s, stored_bytes, stored_rows


def _encode_baseline(payload: Any) -> bytes:
    own = getattr(payload, "canonical", None)
    return bytes(own()) if own is not None else canonical_bytes(payload)


def _pipeline(
    res: BenchResult, tmp: str, tag: str, payloads: Sequence[Any], txns: int
) -> tuple[float, float]:
    """Alternate ``txns`` library ``append_many`` transactions of :data:`PIPELINE_BATCH`
    payloads with the baseline pipeline over the same payloads. Returns (library s, baseline s).

    The library's log is the default path's: a signing key and the automatic checkpoints of
    ``[audit] checkpoint_every`` (default 10,000), so the timed appends include the checkpoint
    the default path signs after the commit that reaches it (amortised as it is in use)."""
    stamp = format_timestamp(dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC))
    lib_path, raw_path = Path(tmp, f"pipe-lib-{tag}.db"), Path(tmp, f"pipe-raw-{tag}.db")
    key = signing.generate()
    every = max(PIPELINE_BATCH, min(DEFAULT_CHECKPOINT_EVERY, txns * PIPELINE_BATCH))
    log = AuditLog(
        lib_path,
        origin=ORIGIN,
        public_key=key.public_key,
        private_key=key,
        checkpoint_every=every,
    )
    lib_s = raw_s = 0.0
    with closing(log), closing(connect(raw_path, write=True)) as raw:
        log.append(payloads[0], recorded_at=stamp)  # open, migrate
        compress = Codec.load(raw).compress
        seq = 0
        gc.collect()
        for k in range(txns):
            chunk = [
                payloads[(k * PIPELINE_BATCH + i) % len(payloads)] for i in range(PIPELINE_BATCH)
            ]
            with timed(collect=False) as t:
                log.append_many(chunk, recorded_at=stamp)
            lib_s += t[0]
            with timed(collect=False) as t, raw:
                rows = []
                for p in chunk:
                    data = _encode_baseline(p)
                    digest = "sha256:" + hashlib.sha256(data).hexdigest()
                    rows.append((seq, stamp, digest, digest, digest, compress(data)))
                    seq += 1
                raw.executemany(_INSERT, rows)
            raw_s += t[0]
        made = len(log.checkpoints())
        res.check(
            made == (txns * PIPELINE_BATCH + 1) // every and log.auto_checkpoint_error is None,
            f"{tag}: the default path signed {made} automatic checkpoint(s) every {every:,}",
        )
    return lib_s, raw_s


def _shadow_records(tmp: str, count: int) -> list[Any]:
    """``count`` shadow records of the hydraflow sample spawns (built, not appended)."""
    current = bench_shadow._policies("policies.json")
    home = bench_shadow._home(Path(tmp), "shadow-source", current)
    with ShadowRecorder(home, bench_shadow._registry(), clock=bench_shadow._clock) as rec:
        snap, state = rec.snapshot()
        spawns = bench_shadow._spawns(count)
        return rec.build_many(spawns, snap, state, recorded_at=bench_shadow.STAMP)


def _figure(case: str, records: int, lib_s: float, raw_s: float) -> Figure:
    lib_rate, raw_rate = records / lib_s, records / raw_s
    ratio = lib_rate / raw_rate
    return Figure(
        case=case,
        value=lib_rate,
        unit="records/s",
        baseline=raw_rate,
        baseline_label="raw INSERT",
        ratio=ratio,
        target=f">= {TARGET_RATIO}x",
        passed=ratio >= TARGET_RATIO,
    )


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    plan = _transactions(cfg)
    count = 300 if cfg.quick else 2_000
    objects = decisions(count)
    payloads = tuple(d.to_dict() for d in objects)
    stored_bytes = stored_rows = 0
    per_record: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rensei-bench-append-") as tmp:
        for batch in BATCHES:
            txns = plan[batch]
            progress(f"{NAME}: {txns} transactions of {batch}")
            lib_s, raw_s, nbytes, nrows = _measure(res, tmp, "dict", batch, txns, payloads)
            stored_bytes += nbytes
            stored_rows += nrows
            records = txns * batch
            per_record[batch] = (lib_s / records, raw_s / records)
            label = "append, 1/txn" if batch == 1 else f"append_many, {batch:,}/txn"
            res.figures.append(_figure(f"{label} ({txns} txns)", records, lib_s, raw_s))
        # What `rensei explain --record` hands the log: decision objects, which write their
        # own canonical bytes. Same stored rows, same baseline; a separate row, not a
        # replacement for the JSON-value rows above.
        batch = BATCHES[-1]
        txns = plan[batch]
        progress(f"{NAME}: {txns} transactions of {batch} RouteDecision objects")
        lib_s, raw_s, _, _ = _measure(res, tmp, "decision", batch, txns, objects)
        res.figures.append(
            _figure(
                f"append_many, {batch:,}/txn, RouteDecision objects (--record)",
                txns * batch,
                lib_s,
                raw_s,
            )
        )
        txns = 2 if cfg.quick else 10
        sources: tuple[tuple[str, str, Sequence[Any]], ...] = (
            ("plain", "plain decision-shaped dicts", decision_dicts(2_000)),
            ("resolver", "resolver decisions (RouteDecision)", objects),
            ("shadow", "shadow records (ShadowDecision)", _shadow_records(tmp, 2_000)),
        )
        for tag, label, source in sources:
            progress(f"{NAME}: {txns} transactions of {PIPELINE_BATCH} {label} vs the pipeline")
            lib_s, raw_s = _pipeline(res, tmp, tag, source, txns)
            records = txns * PIPELINE_BATCH
            lib_rate, raw_rate = records / lib_s, records / raw_s
            mean = sum(len(_encode_baseline(p)) for p in source[:200]) / min(200, len(source))
            res.figures.append(
                Figure(
                    case=f"append_many, {PIPELINE_BATCH:,}/txn, {label}",
                    value=lib_rate,
                    unit="records/s",
                    baseline=raw_rate,
                    baseline_label="canonical JSON + SHA-256 + zstd + INSERT",
                    ratio=lib_rate / raw_rate,
                    target=f">= {PIPELINE_TARGET}x",
                    passed=lib_rate / raw_rate >= PIPELINE_TARGET,
                    note=f"{mean:,.0f} canonical bytes per payload",
                )
            )
    progress(f"{NAME}: decision record sizes")
    res.figures.extend(
        record_size.size_figures(cfg, "decision record", record_size.decision_record)
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
        f"default trace), cycled; {stored_bytes // max(stored_rows, 1):,} bytes each as stored; "
        "the '--record' row appends the same decisions as objects"
    )
    return res
