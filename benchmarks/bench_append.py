"""Benchmark 2, chain-append: durable audit appends (``append``, one record per transaction, and
``append_many`` at 10, 100 and 1,000 per transaction) beside two baselines written to identical
databases in transactions of the same size, one sync per commit each.

Every side opens its database with the library's ``connect(path, write=True)`` (WAL,
``synchronous=FULL``, ``BEGIN IMMEDIATE``, apsw's per-connection best practice). The library
side redacts, canonicalises, hashes, links, compresses, inserts and extends the Merkle tree of
decision-shaped payloads (``RouteDecision.to_dict()``). Library and baseline transactions
alternate, so all see the same machine; each side's rate is its median transaction's (one disk
stall, a sync waiting on another process's writes, would otherwise decide a row).

* **The same work, written plainly** (target: at least 0.8x at every batch size): from the same
  payloads, straight-line code does what any hash-chained, compressed, tree-covered durable log
  must: the canonical bytes (the object's own ``canonical()`` where it has one, else the RFC
  8785 encoder), the credential pre-check on that text with the default redactor (redacting
  and encoding again where it might match, as a log that promises redaction must), SHA-256 of
  the bytes, the record hash over the link, zstd with the database's dictionary at our level,
  the INSERT, and the tree's hashes (a leaf, and one per subtree it completes) and rows, in one
  transaction, committed. Its records and tree rows are checked equal to the library's, so it
  provably did the same work. What the library adds is its layers: checking inside the
  transaction that no other connection moved the head and the tree's edge it remembers
  (``PRAGMA data_version``; read again when one did), the commit queue shared by threads, the
  typed errors, the automatic checkpoint and rotation checks after the commit.
* **Raw INSERT of the same stored rows** (no target): the bytes the library stored, read back
  untimed and inserted as they are: what the work above costs over the bare write.

Further rows against a baseline that does the work any chained log must do, minus ours:
canonical JSON + SHA-256 + zstd (the database's dictionary, our level) + INSERT of the same
payloads, 1,000 in one transaction, no link and no tree. Payloads: plain decision-shaped dicts
(15 fields, ~465 canonical bytes), resolver decisions (``RouteDecision`` objects, as
``--record`` appends them) and shadow records (``ShadowDecision``, appended through
``append_many``). Target: at least 0.5x.

A ``--quick`` run measures at smoke sizes: its targets are printed as not applicable.
"""

from __future__ import annotations

import datetime as dt
import gc
import hashlib
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import closing
from json.encoder import encode_basestring as _e
from pathlib import Path
from typing import Any

from rensei_routing import signing
from rensei_routing.core.audit.chain import GENESIS_HASH, ROW_COLUMNS
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import DEFAULT_REDACTOR
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
TITLE = "durable audit append vs the same work written plainly, and vs a raw INSERT"

BATCHES = (1, 10, 100, 1_000)
#: Against the same work written plainly, at every batch size.
TARGET_RATIO = 0.8
#: append_many at 1,000/txn against canonical JSON + SHA-256 + zstd + INSERT.
PIPELINE_TARGET = 0.5
PIPELINE_BATCH = 1_000
ORIGIN = "rensei-routing/bench/audit"

_COLUMNS = ", ".join(ROW_COLUMNS)
_INSERT = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM audit_records WHERE seq >= ? ORDER BY seq"
_LINKS = "SELECT seq, recorded_at, prev_hash, payload_hash, record_hash FROM audit_records"
_TREE = "SELECT chunk, hashes FROM audit_tree ORDER BY chunk"
_UPSERT_TREE = "INSERT OR REPLACE INTO audit_tree(chunk, hashes) VALUES (?, ?)"
_CHUNK_BYTES = 32 * 32  # stored hashes per tree row x 32 bytes


class _Plain:
    """The same work as an append, written plainly (see the module docstring): a chain and its
    Merkle tree kept in this object, each transaction's rows inserted and committed."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.compress = Codec.load(conn).compress
        self.seq = 0
        self.prev = GENESIS_HASH
        self.edge = [b""] * 64
        self.row = 0  # the tree row the unwritten hashes start in
        self.hashes = bytearray()  # the stored hashes of that row onwards

    def append(self, payloads: Sequence[Any], recorded_at: str) -> None:
        sha = hashlib.sha256
        rows = []
        seq, prev, edge, out = self.seq, self.prev, self.edge, self.hashes
        redactor = DEFAULT_REDACTOR
        for p in payloads:
            data = _encode_baseline(p)
            if redactor.might_match(data.decode("utf-8")):  # what the log stores: redacted
                value = p.to_dict() if hasattr(p, "to_dict") else p
                data = canonical_bytes(redactor.redact(value))
            p_hash = "sha256:" + sha(data).hexdigest()
            link = (
                f'{{"payload_hash":{_e(p_hash)},"prev_hash":{_e(prev)},'
                f'"recorded_at":{_e(recorded_at)},"seq":{seq}}}'
            )
            r_hash = "sha256:" + sha(link.encode()).hexdigest()
            rows.append((seq, recorded_at, prev, p_hash, r_hash, self.compress(data)))
            h = sha(b"\x00" + bytes.fromhex(r_hash[7:])).digest()
            out += h
            level, m = 0, seq
            while m & 1:
                h = sha(b"\x01" + edge[level] + h).digest()
                out += h
                level += 1
                m >>= 1
            edge[level] = h
            seq, prev = seq + 1, r_hash
        tree = [
            (self.row + i, bytes(out[at : at + _CHUNK_BYTES]))
            for i, at in enumerate(range(0, len(out), _CHUNK_BYTES))
        ]
        with self.conn:
            self.conn.executemany(_INSERT, rows)
            self.conn.executemany(_UPSERT_TREE, tree)
        full = len(out) // _CHUNK_BYTES
        self.row += full
        self.hashes = out[full * _CHUNK_BYTES :]
        self.seq, self.prev = seq, prev


def _transactions(cfg: Config) -> dict[int, int]:
    if cfg.quick:
        return {1: 20, 10: 10, 100: 4, 1_000: 2}
    return {1: 400, 10: 150, 100: 40, 1_000: 10}


def _measure(
    res: BenchResult, tmp: str, tag: str, batch: int, txns: int, payloads: Sequence[Any]
) -> tuple[float, float, float, int, int]:
    """Alternate ``txns`` library transactions of ``batch`` payloads with the same work written
    plainly and with raw INSERTs of the rows each one stored. Returns (library seconds, plain
    seconds, raw seconds, stored bytes, stored rows)."""
    base_time = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
    lib_path, raw_path = Path(tmp, f"lib-{tag}-{batch}.db"), Path(tmp, f"raw-{tag}-{batch}.db")
    plain_path = Path(tmp, f"plain-{tag}-{batch}.db")
    stored_bytes = stored_rows = 0
    log = AuditLog(lib_path, origin=ORIGIN)
    with (
        closing(log),
        closing(connect(raw_path, write=True)) as raw,
        closing(connect(plain_path, write=True)) as plain_conn,
    ):
        stamp = format_timestamp(base_time)
        log.append(payloads[0], recorded_at=stamp)  # open, migrate
        plain = _Plain(plain_conn)
        plain.append(payloads[:1], stamp)
        with closing(connect(lib_path)) as reader:
            with raw:
                raw.executemany(_INSERT, reader.execute(_SELECT, (0,)).fetchall())
            for conn, side in ((raw, "raw INSERT"), (plain_conn, "plain")):
                settings = (conn.pragma("journal_mode"), conn.pragma("synchronous"))
                res.check(
                    settings == ("wal", 2),
                    f"{tag} batch {batch}: {side} connection is WAL + synchronous=FULL",
                )
            lib_t: list[float] = []
            plain_t: list[float] = []
            raw_t: list[float] = []
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
                lib_t.append(t[0])
                with timed(collect=False) as t:
                    plain.append(chunk, stamp)
                plain_t.append(t[0])
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
                raw_t.append(t[0])
                cursor += batch
            result = log.verify()
            res.check(
                bool(result) and result.records_checked == cursor,
                f"{tag} batch {batch}: the appended chain verifies ({cursor:,} records)",
            )
            same = reader.execute(_SELECT, (0,)).fetchall() == raw.execute(_SELECT, (0,)).fetchall()
            res.check(same, f"{tag} batch {batch}: baseline table holds the same rows")
            same = (
                reader.execute(_LINKS).fetchall() == plain_conn.execute(_LINKS).fetchall()
                and reader.execute(_TREE).fetchall() == plain_conn.execute(_TREE).fetchall()
            )
            res.check(same, f"{tag} batch {batch}: the plain work made the same chain and tree")
    # The median transaction, times the count: one disk stall (a sync that waits on another
    # process's writes) would otherwise decide a row where every transaction pays a sync.
    lib_s, plain_s, raw_s = (statistics.median(ts) * txns for ts in (lib_t, plain_t, raw_t))
    return lib_s, plain_s, raw_s, stored_bytes, stored_rows


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


def _figures(
    case: str, records: int, lib_s: float, plain_s: float, raw_s: float, quick: bool
) -> list[Figure]:
    lib_rate = records / lib_s
    plain_rate, raw_rate = records / plain_s, records / raw_s
    return [
        Figure(
            case=case,
            value=lib_rate,
            unit="records/s",
            baseline=plain_rate,
            baseline_label="the same work, written plainly",
            ratio=lib_rate / plain_rate,
            **_target(f">= {TARGET_RATIO}x", lib_rate / plain_rate >= TARGET_RATIO, quick),
        ),
        Figure(
            case=f"{case}, beside the bare write",
            value=lib_rate,
            unit="records/s",
            baseline=raw_rate,
            baseline_label="raw INSERT of the stored rows",
            ratio=lib_rate / raw_rate,
        ),
    ]


def _target(target: str, passed: bool, quick: bool) -> dict[str, Any]:
    """A full run's target, printed as not applicable on a ``--quick`` run."""
    if quick:
        return {"target": f"{target} (full run: n/a at --quick)", "passed": None}
    return {"target": target, "passed": passed}


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    plan = _transactions(cfg)
    count = 300 if cfg.quick else 2_000
    objects = decisions(count)
    payloads = tuple(d.to_dict() for d in objects)
    stored_bytes = stored_rows = 0
    per_record: dict[int, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rensei-bench-append-") as tmp:
        for batch in BATCHES:
            txns = plan[batch]
            progress(f"{NAME}: {txns} transactions of {batch}")
            lib_s, plain_s, raw_s, nbytes, nrows = _measure(res, tmp, "dict", batch, txns, payloads)
            stored_bytes += nbytes
            stored_rows += nrows
            records = txns * batch
            per_record[batch] = (lib_s / records, plain_s / records, raw_s / records)
            label = "append, 1/txn" if batch == 1 else f"append_many, {batch:,}/txn"
            res.figures.extend(
                _figures(f"{label} ({txns} txns)", records, lib_s, plain_s, raw_s, cfg.quick)
            )
        # What `rensei explain --record` hands the log: decision objects, which write their
        # own canonical bytes. Same stored rows, same baseline; a separate row, not a
        # replacement for the JSON-value rows above.
        batch = BATCHES[-1]
        txns = plan[batch]
        progress(f"{NAME}: {txns} transactions of {batch} RouteDecision objects")
        lib_s, plain_s, raw_s, _, _ = _measure(res, tmp, "decision", batch, txns, objects)
        res.figures.extend(
            _figures(
                f"append_many, {batch:,}/txn, RouteDecision objects (--record)",
                txns * batch,
                lib_s,
                plain_s,
                raw_s,
                cfg.quick,
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
                    **_target(
                        f">= {PIPELINE_TARGET}x", lib_rate / raw_rate >= PIPELINE_TARGET, cfg.quick
                    ),
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
            what="the same work written plainly, time per record by records/txn",
            unit="us",
            points=[(f"{b:,}/txn", per_record[b][1] * 1e6) for b in BATCHES],
        )
    )
    res.growth.append(
        Growth(
            what="raw INSERT time per record by records/txn",
            unit="us",
            points=[(f"{b:,}/txn", per_record[b][2] * 1e6) for b in BATCHES],
        )
    )
    res.notes.append(
        f"payloads: {len(payloads):,} distinct RouteDecision.to_dict() values (1,000-policy set, "
        f"default trace), cycled; {stored_bytes // max(stored_rows, 1):,} bytes each as stored; "
        "the '--record' row appends the same decisions as objects"
    )
    return res
