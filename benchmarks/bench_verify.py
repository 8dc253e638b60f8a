"""Benchmark 3, chain-verify: ``AuditLog.verify()`` over 100k and 1M records (10M with
``--large``) beside a raw scan of the same table, decompressing each stored payload (zstd with
the database's dictionary, schema 3) and taking SHA-256 of it.

Building a million-record log through ``append_many`` costs minutes (every payload is
redacted and canonicalised on the way in), so the log is built the way ``append_many`` builds
it, minus the repeated encoding: a pool of decision payloads is encoded once with the library's
``encode_payload``, and batches are chained with its ``link_rows`` and inserted in 50,000-row
transactions. A small log built both ways is compared row for row first, so the fast builder is
known to write exactly what ``append_many`` writes.

Each measurement runs in a fresh subprocess (``benchmarks._worker``) that reports its time and
its peak resident memory during the call (interpreter, imports, SQLite cache and the call
itself; see that module for how the peak is taken). Targets (issue 4): at least 0.5x the
baseline, and memory flat from 100k to 1M records.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing.core.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    encode_payload,
    format_timestamp,
    link_rows,
)
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import Codec
from rensei_routing.store.db import connect

from .harness import REPO_ROOT, BenchResult, Config, Figure, Growth, progress
from .workload import decision_payloads

NAME = "chain-verify"
TITLE = "AuditLog.verify() vs raw scan + decompress + SHA-256"

TARGET_RATIO = 0.5
#: Memory counts as flat when the peak at the largest size is at most this many times the peak
#: at the smallest plus this slack (page cache and allocator noise).
FLAT_FACTOR = 1.25
FLAT_SLACK_MIB = 8.0
ORIGIN = "rensei-routing/bench/audit"
CHUNK = 50_000

_COLUMNS = ", ".join(ROW_COLUMNS)
_INSERT = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM audit_records ORDER BY seq"
_BASE_TIME = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


def _sizes(cfg: Config) -> tuple[int, ...]:
    if cfg.quick:
        return (2_000, 20_000)
    return (100_000, 1_000_000, 10_000_000) if cfg.large else (100_000, 1_000_000)


class _Builder:
    """Extends one audit database with linked rows of pre-encoded payloads."""

    def __init__(self, pool: Sequence[bytes]) -> None:
        self.pool = pool
        self.seq = 0
        self.prev = GENESIS_HASH
        self.batch = 0

    def extend(self, conn: Any, count: int) -> None:
        pool, n = self.pool, len(self.pool)
        while count > 0:
            take = min(count, CHUNK)
            stamp = format_timestamp(_BASE_TIME + dt.timedelta(seconds=self.batch))
            encoded = [pool[(self.seq + i) % n] for i in range(take)]
            rows = link_rows(encoded, seq=self.seq, prev_hash=self.prev, recorded_at=stamp)
            compress = Codec.load(conn).compress  # stored as append_many stores them
            with conn:
                conn.executemany(_INSERT, [(*r[:5], compress(r[5])) for r in rows])
            self.seq += take
            self.prev = rows[-1][4]
            self.batch += 1
            count -= take


def _check_builder(res: BenchResult, tmp: Path, payloads: Sequence[Any]) -> None:
    """A log built by ``append_many`` and one built by :class:`_Builder` hold the same rows."""
    batches = (300, 300, 150)
    via_library = tmp / "append-many.db"
    with AuditLog(via_library, origin=ORIGIN) as log:
        start = 0
        for i, size in enumerate(batches):
            stamp = format_timestamp(_BASE_TIME + dt.timedelta(seconds=i))
            chunk = [payloads[(start + k) % len(payloads)] for k in range(size)]
            log.append_many(chunk, recorded_at=stamp)
            start += size
    pool = [encode_payload(p) for p in payloads]
    via_builder = tmp / "builder.db"
    builder = _Builder(pool)
    with closing(connect(via_builder, write=True)) as conn:
        for size in batches:
            builder.extend(conn, size)
    with closing(connect(via_library)) as a, closing(connect(via_builder)) as b:
        same = a.execute(_SELECT).fetchall() == b.execute(_SELECT).fetchall()
    res.check(same, f"fast log builder writes what append_many writes ({sum(batches)} rows)")


def _measure(mode: str, path: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks._worker", mode, str(path), ORIGIN],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {mode} failed ({done.returncode}): {done.stderr.strip()}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _peak_mib(m: dict[str, Any]) -> float:
    """Peak resident memory of the measuring process during the call (imports included)."""
    return float(m["rss_peak_kib"]) / 1024


def _growth_mib(m: dict[str, Any]) -> float:
    """How far the call raised resident memory above where it started."""
    return max(0, m["rss_peak_kib"] - m["rss_before_kib"]) / 1024


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    payloads = decision_payloads(300 if cfg.quick else 2_000)
    sizes = _sizes(cfg)
    per_record: list[tuple[str, float, float]] = []
    peaks: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="rensei-bench-verify-") as tmp_name:
        tmp = Path(tmp_name)
        _check_builder(res, tmp, payloads)
        pool = [encode_payload(p) for p in payloads]
        path = tmp / "audit.db"
        builder = _Builder(pool)
        stored = 0
        for size in sizes:
            progress(f"{NAME}: building the log to {size:,} records")
            with closing(connect(path, write=True)) as conn:
                builder.extend(conn, size - builder.seq)
                conn.pragma("wal_checkpoint(TRUNCATE)")
            stored = os.path.getsize(path)
            progress(f"{NAME}: {size:,} records ({stored / 2**20:,.0f} MiB), scan and verify")
            base = _measure("scan", path)
            lib = _measure("verify", path)
            res.check(
                base["ok"] and base["records"] == size,
                f"{size:,} records: baseline scan read every record and every payload hash held",
            )
            res.check(
                lib["ok"] and lib["records"] == size,
                f"{size:,} records: verify() reports an intact chain of {size:,} records",
            )
            lib_rate, base_rate = size / lib["seconds"], size / base["seconds"]
            ratio = lib_rate / base_rate
            res.figures.append(
                Figure(
                    case=f"{size:,} records",
                    value=lib_rate,
                    unit="records/s",
                    baseline=base_rate,
                    baseline_label="scan + unzstd + SHA-256",
                    ratio=ratio,
                    target=f">= {TARGET_RATIO}x",
                    passed=ratio >= TARGET_RATIO,
                )
            )
            peak, base_peak = _peak_mib(lib), _peak_mib(base)
            peaks.append((size, peak))
            res.figures.append(
                Figure(
                    case=f"{size:,} records, process peak RSS",
                    value=peak,
                    unit="MiB",
                    baseline=base_peak,
                    baseline_label="scan + unzstd + SHA-256",
                    note=f"+{_growth_mib(lib):.1f} MiB over the "
                    f"{lib['rss_before_kib'] / 1024:.0f} MiB resident before the call "
                    f"({lib['memory_method']})",
                )
            )
            per_record.append(
                (f"{size:,}", lib["seconds"] / size * 1e6, base["seconds"] / size * 1e6)
            )
            res.extra[str(size)] = {"verify": lib, "scan": base, "db_bytes": stored}
    (small, small_peak), (large, large_peak) = peaks[0], peaks[-1]
    limit = small_peak * FLAT_FACTOR + FLAT_SLACK_MIB
    res.figures.append(
        Figure(
            case=f"peak RSS {small:,} -> {large:,} records",
            value=large_peak,
            unit="MiB",
            baseline=small_peak,
            baseline_label=f"at {small:,}",
            ratio=large_peak / small_peak if small_peak else None,
            ratio_kind="growth",
            target="flat",
            passed=large_peak <= limit,
            note=f"flat = at most {FLAT_FACTOR}x the smaller peak + {FLAT_SLACK_MIB:.0f} MiB",
        )
    )
    lib_points = [(s, v) for s, v, _ in per_record]
    base_points = [(s, b) for s, _, b in per_record]
    res.growth.append(Growth(what="verify() time per record", unit="us", points=lib_points))
    res.growth.append(Growth(what="scan + SHA-256 per record", unit="us", points=base_points))
    rss_points = [(f"{s:,}", m) for s, m in peaks]
    res.growth.append(Growth(what="verify() process peak RSS", unit="MiB", points=rss_points))
    res.notes.append(
        f"log of RouteDecision.to_dict() payloads (1,000-policy set, default trace), "
        f"{stored / sizes[-1]:,.0f} bytes of database per record at {sizes[-1]:,}; "
        f"'flat' memory = peak at most {FLAT_FACTOR}x the smaller one + {FLAT_SLACK_MIB:.0f} MiB"
    )
    return res
