"""Benchmark 3, chain-verify: ``AuditLog.verify()`` over 100k and 1M records (10M with
``--large``) beside a raw scan of the same table, decompressing each stored payload (zstd with
the database's dictionary, schema 3) and taking SHA-256 of it.

The log is measured as the default write path leaves it: with the automatic checkpoints of
:mod:`rensei_routing.store.audit.autocheckpoint` (``[audit] checkpoint_every``, default 10,000). At
each size the log is built in stretches of ``checkpoint_every`` records, and after each the
code the default path runs after a commit (``checkpoint_if_due``) signs its checkpoint (timed:
informational); the last stretch of ``checkpoint_every`` records is left past the latest
checkpoint, the most the default path leaves behind the head with batches that divide it. So
``verify()`` (with the public key) parses that tail strictly and, below the checkpoint, checks
every hash and link but spares the parse its signer already did. That is the target row. The
same log verified without the public key trusts no checkpoint and parses every payload, as it
would a log written with ``checkpoint_every = 0``: an informational row.

Building a million-record log through ``append_many`` costs minutes (every payload is
redacted and canonicalised on the way in), so the log is built the way ``append_many`` builds
it, minus the repeated encoding: a pool of decision payloads is encoded once with the library's
``encode_payload``, and batches are chained with its ``link_rows`` and inserted in 50,000-row
transactions. A small log built both ways is compared row for row first, so the fast builder is
known to write exactly what ``append_many`` writes.

Each measurement runs in a fresh subprocess (``benchmarks._worker``; the checkpointed verify in
this module's own ``python -m benchmarks.bench_verify pinned DB ORIGIN PUBLIC_KEY``) that
reports its time and its peak resident memory during the call (interpreter, imports, SQLite
cache and the call itself; see ``_worker`` for how the peak is taken), and the largest peak of
the verify workers it waited for. The three measurements the targets compare (the scan, the
checkpointed verify on every core and in one process) run in five interleaved rounds and the
fastest of each is kept (``ROUNDS``; this machine's speed drifts by 10-20 %). Targets:
``verify()`` on every core (the default workers) at least 1.0x the one-process baseline,
and at least 1.8x ``verify(workers=1)`` measured the same way, on the 1M default-path log;
memory flat from 100k to 1M records (the
parent's and each worker's). ``RENSEI_BENCH_VERIFY_PAYLOADS=plain`` builds the log of plain
15-field decision-shaped dicts (~465 canonical bytes) instead.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing import signing
from rensei_routing.core.audit.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    encode_payload,
    link_rows,
)
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.store.audit import AuditLog, autocheckpoint, tree
from rensei_routing.store.codec import Codec
from rensei_routing.store.db import connect
from rensei_routing.store.parallel import PARALLEL_MIN_RECORDS, default_workers

from .harness import (
    FLAT_FACTOR,
    FLAT_SLACK_MIB,
    REPO_ROOT,
    BenchResult,
    Config,
    Figure,
    Growth,
    flat_memory,
    progress,
    subprocess_env,
)
from .workload import decision_dicts, decision_payloads

NAME = "chain-verify"
TITLE = "AuditLog.verify() vs raw scan + decompress + SHA-256"

#: All the checks on every core cost no more than one core's bare scan ...
TARGET_RATIO = 1.0
#: ... and the workers run at least this many times our own one-process walk.
TARGET_SPEEDUP = 1.8
WORKERS = default_workers()
ORIGIN = "rensei-routing/bench/audit"
#: ``plain``: build the log of plain decision-shaped dicts (15 fields, ~465 canonical bytes)
#: instead of whole ``RouteDecision.to_dict()`` payloads (~1.9 KB).
PAYLOADS_ENV = "RENSEI_BENCH_VERIFY_PAYLOADS"
CHUNK = 50_000
#: The target rows (scan, verify on every core, verify in one process) are each measured this
#: many times, interleaved, and the fastest kept (``--quick``: once); see :func:`_fastest`.
ROUNDS = 5
#: The default path's ``checkpoint_every``: also the records left past the latest checkpoint at
#: each size (``--quick``: a tenth), parsed strictly.
TAIL = autocheckpoint.DEFAULT_CHECKPOINT_EVERY

_COLUMNS = ", ".join(ROW_COLUMNS)
_INSERT = f"INSERT INTO audit_records({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_SELECT = f"SELECT {_COLUMNS} FROM audit_records ORDER BY seq"
_BASE_TIME = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


def _tail(cfg: Config) -> int:
    return TAIL // 10 if cfg.quick else TAIL


def _sizes(cfg: Config) -> tuple[int, ...]:
    if cfg.quick:
        return (2_000, 20_000)
    return (100_000, 1_000_000, 10_000_000) if cfg.large else (100_000, 1_000_000)


class _Builder:
    """Extends one audit database with linked rows of pre-encoded payloads, and its stored Merkle
    tree in the same transaction, as an append does (``grow=False``: the rows alone, the tree
    left behind for ``tree.catch_up``)."""

    def __init__(self, pool: Sequence[bytes], *, grow: bool = True) -> None:
        self.pool = pool
        self.grow = grow
        self.seq = 0
        self.prev = GENESIS_HASH
        self.batch = 0

    def extend(self, conn: Any, count: int) -> None:
        pool, n = self.pool, len(self.pool)
        compress = Codec.load(conn).compress  # stored as append_many stores them
        while count > 0:
            take = min(count, CHUNK)
            stamp = format_timestamp(_BASE_TIME + dt.timedelta(seconds=self.batch))
            encoded = [pool[(self.seq + i) % n] for i in range(take)]
            rows = link_rows(encoded, seq=self.seq, prev_hash=self.prev, recorded_at=stamp)
            with conn:
                conn.executemany(_INSERT, [(*r[:5], compress(r[5])) for r in rows])
                app = tree.Appender.at(conn, self.seq) if self.grow else None
                if app is not None:
                    app.add(r[4] for r in rows)
                    app.flush()
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


def _command(mode: str, path: Path, *extra: str) -> list[str]:
    module = "benchmarks.bench_verify" if mode == "pinned" else "benchmarks._worker"
    return [sys.executable, "-m", module, mode, str(path), ORIGIN, *extra]


def _measure(mode: str, path: Path, *extra: str) -> dict[str, Any]:
    """Run one measurement in a fresh process: ``scan`` and ``verify`` (no public key: no
    checkpoint counts) in ``benchmarks._worker``, ``pinned`` in this module."""
    return _together(1, mode, path, *extra)[0]


def _together(count: int, mode: str, path: Path, *extra: str) -> list[dict[str, Any]]:
    """``count`` copies of one measurement (see :func:`_measure`) run at once."""
    args, env = _command(mode, path, *extra), subprocess_env()
    procs = [
        subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    outs: list[dict[str, Any]] = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"worker {mode} failed ({proc.returncode}): {stderr.strip()}")
        outs.append(json.loads(stdout))
    return outs


def _side_by_side(path: Path, public_key: str) -> dict[str, Any]:
    """The machine's own ceiling for the split: :data:`WORKERS` one-process verifies at once,
    as the time one of them takes at their summed speed (``WORKERS / sum(1 / t)``): split
    perfectly with nothing else to pay, the verify on every core would take this time over
    ``WORKERS``. On this machine each copy runs 0-12 % slower beside the others than alone
    (cores sharing caches or a host), which no split can win back."""
    outs = _together(WORKERS, "pinned", path, public_key, "1")
    seconds = len(outs) / sum(1 / m["seconds"] for m in outs)
    return {"seconds": seconds, "each_seconds": [m["seconds"] for m in outs]}


def _verify_pinned(
    path: Path, origin: str, public_key: str, workers: int | None = None
) -> dict[str, Any]:
    """Subprocess side of the checkpointed rows: ``verify()`` with the public key, so the stored
    checkpoints are checked and spare the parse below them (timed as ``_worker`` times)."""
    from ._worker import children_peak_kib, measured

    public = signing.PublicKey.from_text(public_key)
    with AuditLog(path, origin=origin, public_key=public) as log:
        log.head()  # open both connections outside the timed call (reads one row)
        result, memory = measured(lambda: log.verify(workers=workers))
    return {
        "records": result.records_checked,
        "checkpoints": result.checkpoints_checked,
        "ok": bool(result),
        "detail": result.reason,
        "workers_peak_kib": children_peak_kib(),
        **memory,
    }


def _rounds(cfg: Config) -> int:
    return 1 if cfg.quick else ROUNDS


def _fastest(rounds: int, *runs: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each of ``runs`` measured ``rounds`` times, interleaved (run 1, 2, 3, then again), and
    the fastest measurement of each kept: this machine's speed drifts by 10-20 % from second
    to second (docs/performance.md), and the least time is the one least inflated by it."""
    best: list[dict[str, Any] | None] = [None] * len(runs)
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for i, run in enumerate(runs):
            m = run()
            times[i].append(m["seconds"])
            if (b := best[i]) is None or m["seconds"] < b["seconds"]:
                best[i] = m
    return [{**m, "rounds_seconds": t} for m, t in zip(best, times, strict=True) if m is not None]


def _peak_mib(m: dict[str, Any]) -> float:
    """Peak resident memory of the measuring process during the call (imports included)."""
    return float(m["rss_peak_kib"]) / 1024


def _growth_mib(m: dict[str, Any]) -> float:
    """How far the call raised resident memory above where it started."""
    return max(0, m["rss_peak_kib"] - m["rss_before_kib"]) / 1024


def _build_checkpointed(
    path: Path, key: signing.PrivateKey, builder: _Builder, target: int, every: int
) -> tuple[int, float]:
    """Extend the log to ``target`` records in stretches of ``every``, running after each the
    default path's post-commit ``checkpoint_if_due``; ``(latest checkpoint size, seconds in
    the checkpoints)``."""
    seconds = 0.0
    latest = 0
    with (
        AuditLog(
            path,
            origin=ORIGIN,
            public_key=key.public_key,
            private_key=key,
            checkpoint_every=every,
        ) as log,
        closing(connect(path, write=True)) as conn,
    ):
        while builder.seq < target:
            builder.extend(conn, min(every, target - builder.seq))
            start = time.perf_counter()
            cp = autocheckpoint.checkpoint_if_due(log, builder.seq, every)
            seconds += time.perf_counter() - start
            if cp is not None:
                latest = cp.size
        if log.auto_checkpoint_error is not None:
            raise RuntimeError(log.auto_checkpoint_error)
    return latest, seconds


def _stored_checkpoints(path: Path) -> int:
    with closing(connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM audit_checkpoints").get)


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    plain = os.environ.get(PAYLOADS_ENV) == "plain"
    n_payloads = 300 if cfg.quick else 2_000
    payloads = decision_dicts(n_payloads) if plain else decision_payloads(n_payloads)
    sizes = _sizes(cfg)
    per_record: list[tuple[str, float, float, float]] = []
    peaks: list[tuple[int, float]] = []
    key = signing.generate()
    tail = _tail(cfg)
    with tempfile.TemporaryDirectory(prefix="rensei-bench-verify-") as tmp_name:
        tmp = Path(tmp_name)
        _check_builder(res, tmp, payloads)
        pool = [encode_payload(p) for p in payloads]
        path = tmp / "audit.db"
        builder = _Builder(pool)
        stored = 0
        pinned = 0  # the size of the latest checkpoint
        for size in sizes:
            progress(f"{NAME}: building the log to {size - tail:,} records, checkpointing")
            parsed = size - tail - pinned  # the records the automatic checkpoints parse
            pinned, cp_seconds = _build_checkpointed(path, key, builder, size - tail, tail)
            res.check(
                pinned == size - tail,
                f"the automatic checkpoints reach {size - tail:,} records",
            )
            count = _stored_checkpoints(path)
            with closing(connect(path, write=True)) as conn:
                builder.extend(conn, tail)
                conn.pragma("wal_checkpoint(TRUNCATE)")
            stored = os.path.getsize(path)
            progress(f"{NAME}: {size:,} records ({stored / 2**20:,.0f} MiB), scan and verify")
            # The ceiling only where "all cores" splits the walk (below PARALLEL_MIN_RECORDS
            # both rows are the one-process walk).
            split = size >= PARALLEL_MIN_RECORDS
            base, lib, lib1, *paired = _fastest(
                _rounds(cfg),
                lambda: _measure("scan", path),
                lambda: _measure("pinned", path, key.public_key.to_text()),
                lambda: _measure("pinned", path, key.public_key.to_text(), "1"),
                *([lambda: _side_by_side(path, key.public_key.to_text())] if split else []),
            )
            pair = paired[0] if paired else None
            strict = _measure("verify", path)
            strict1 = _measure("verify", path, "1")
            res.check(
                base["ok"] and base["records"] == size,
                f"{size:,} records: baseline scan read every record and every payload hash held",
            )
            for m, what in ((lib, "all cores"), (lib1, "one process")):
                res.check(
                    m["ok"] and m["records"] == size and m["checkpoints"] == count,
                    f"{size:,} records: verify() ({what}) reports an intact chain of {size:,} "
                    f"records and {count} checkpoint(s)",
                )
            for m, what in ((strict, "all cores"), (strict1, "one process")):
                res.check(
                    m["ok"] and m["records"] == size,
                    f"{size:,} records: verify() ({what}) with no checkpoint reports the same "
                    "chain",
                )
            base_rate = size / base["seconds"]
            for m, m1, case in (
                (strict, strict1, "no checkpoint (every payload parsed)"),
                (lib, lib1, f"default path, last {tail:,} past its automatic checkpoint"),
            ):
                rate, rate1 = size / m["seconds"], size / m1["seconds"]
                # The targets are on 1,000,000 records written by the default path; the
                # other rows (smaller logs, checkpoint_every = 0) are information, no target.
                bar = size >= 1_000_000 and case.startswith("default path")
                res.figures.append(
                    Figure(
                        case=f"{size:,} records, {case}, all cores",
                        value=rate,
                        unit="records/s",
                        baseline=base_rate,
                        baseline_label="one-process scan + unzstd + SHA-256",
                        ratio=rate / base_rate,
                        target=f">= {TARGET_RATIO}x" if bar else "",
                        passed=rate / base_rate >= TARGET_RATIO if bar else None,
                        note=f"workers={WORKERS}: the verify process and {WORKERS - 1} more",
                    )
                )
                res.figures.append(
                    Figure(
                        case=f"{size:,} records, {case}, all cores vs one process",
                        value=rate,
                        unit="records/s",
                        baseline=rate1,
                        baseline_label="verify(workers=1)",
                        ratio=rate / rate1,
                        target=f">= {TARGET_SPEEDUP}x" if bar else "",
                        passed=rate / rate1 >= TARGET_SPEEDUP if bar else None,
                    )
                )
            if pair is not None:
                ceiling = WORKERS * lib1["seconds"] / pair["seconds"]
                speedup = lib1["seconds"] / lib["seconds"]
                rounds = [
                    a / b
                    for a, b in zip(lib1["rounds_seconds"], lib["rounds_seconds"], strict=True)
                ]
                res.figures.append(
                    Figure(
                        case=f"{size:,} records, default path: the machine's ceiling for {WORKERS} "
                        "processes (one-process verifies side by side)",
                        value=ceiling,
                        unit="x",
                        note=f"{WORKERS} x verify(workers=1) alone / at once (fastest of "
                        f"{_rounds(cfg)}; each at once: "
                        + ", ".join(f"{t:.2f} s" for t in pair["each_seconds"])
                        + f"); all cores reached {speedup:.2f}x = {speedup / ceiling:.0%} of it; "
                        "all cores vs one process round by round: "
                        + ", ".join(f"{r:.2f}x" for r in rounds)
                        + " (informational)",
                    )
                )
            res.figures.append(
                Figure(
                    case=f"{size:,} records, automatic checkpoints up to {pinned:,}",
                    value=cp_seconds,
                    unit="s",
                    note=f"parsed the {parsed:,} records past the previous size's, "
                    f"{cp_seconds / parsed * 1e6:.1f} us per record parsed (informational)",
                )
            )
            worker_peak = strict["workers_peak_kib"] / 1024
            peak, base_peak = max(_peak_mib(strict), worker_peak), _peak_mib(base)
            peaks.append((size, peak))
            res.figures.append(
                Figure(
                    case=f"{size:,} records, peak RSS of any verify process (no checkpoint)",
                    value=peak,
                    unit="MiB",
                    baseline=base_peak,
                    baseline_label="scan + unzstd + SHA-256",
                    note=f"parent {_peak_mib(strict):.1f} MiB (+{_growth_mib(strict):.1f} MiB "
                    f"over the {strict['rss_before_kib'] / 1024:.0f} MiB before the call, "
                    f"{strict['memory_method']}), largest worker {worker_peak:.1f} MiB",
                )
            )
            per_record.append(
                (
                    f"{size:,}",
                    lib["seconds"] / size * 1e6,
                    strict["seconds"] / size * 1e6,
                    base["seconds"] / size * 1e6,
                )
            )
            res.extra[str(size)] = {
                "verify": lib,
                "verify_no_checkpoint": strict,
                "verify_one_process": lib1,
                "verify_no_checkpoint_one_process": strict1,
                "scan": base,
                "side_by_side": pair,
                "checkpoint_seconds": cp_seconds,
                "checkpoint_parsed": parsed,
                "db_bytes": stored,
            }
    res.figures.append(flat_memory("peak RSS", [(f"{n:,}", m) for n, m in peaks]))
    for what, column in (
        ("verify() time per record, checkpointed", 1),
        ("verify() time per record, no checkpoint", 2),
        ("scan + SHA-256 per record", 3),
    ):
        points = [(str(row[0]), float(row[column])) for row in per_record]
        res.growth.append(Growth(what=what, unit="us", points=points))
    rss_points = [(f"{s:,}", m) for s, m in peaks]
    res.growth.append(Growth(what="verify() process peak RSS", unit="MiB", points=rss_points))
    res.notes.append(
        (
            "log of plain decision-shaped dicts (15 fields, ~465 canonical bytes), "
            if plain
            else "log of RouteDecision.to_dict() payloads (1,000-policy set, default trace), "
        )
        + f"({PAYLOADS_ENV}={os.environ.get(PAYLOADS_ENV, '')}) "
        f"{stored / sizes[-1]:,.0f} bytes of database per record at {sizes[-1]:,}; "
        f"'flat' memory = peak at most {FLAT_FACTOR}x the smaller one + {FLAT_SLACK_MIB:.0f} MiB"
    )
    res.notes.append(
        f"default path = the automatic checkpoints every {tail:,} records "
        "([audit] checkpoint_every), the latest one "
        f"{tail:,} records behind the head, so verify() parses only that tail (a checkpoint's "
        "signer parsed the rest); no checkpoint = the same log verified without the public key, "
        "which proves every payload strict JSON (the orjson round trip of "
        "core._parse.is_strict_json, about twice the baseline's decompress + SHA-256 of a "
        "1.9 KB record: docs/performance.md)"
    )
    return res


def main(argv: list[str]) -> int:
    """``python -m benchmarks.bench_verify pinned DB ORIGIN PUBLIC_KEY [WORKERS]``: one JSON
    object."""
    if len(argv) not in (4, 5) or argv[0] != "pinned":
        print(main.__doc__, file=sys.stderr)
        return 2
    workers = int(argv[4]) if len(argv) == 5 else None
    print(json.dumps(_verify_pinned(Path(argv[1]), argv[2], argv[3], workers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
