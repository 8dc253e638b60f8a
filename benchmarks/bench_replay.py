"""Benchmark, audit-replay: ``rensei audit replay`` over 100,000 recorded decisions (10,000 with
--quick, 1,000,000 with --large) against 1,000 policies, beside ``explain_batch`` over the same
contexts measured in the same run (memos across records are allowed on both sides).

The log is written the default way (``AuditLog.append_many``, 10,000 a transaction) from
decisions the resolver made for 20,000 distinct contexts cycled through the log, so contexts
repeat as a busy host's do. Target: replay >= 0.5x of ``explain_batch``. Peak memory
is that of the replaying process (``benchmarks._worker replay``, timed there too) at each size,
and must stay flat from 100k to 1M (``--large``): the replay streams the log.
"""

from __future__ import annotations

import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .harness import BenchResult, Config, Figure, Growth, flat_memory, progress, run_module, timed
from .workload import build_contexts, policy_set

NAME = "audit-replay"
TITLE = "audit replay vs explain_batch over the same contexts"

TARGET = 0.5
DISTINCT = 20_000
RECORDED_AT = "2026-12-01T00:00:00.000000Z"


def _sizes(cfg: Config) -> tuple[int, ...]:
    if cfg.quick:
        return (10_000,)
    return (100_000, 1_000_000) if cfg.large else (100_000,)


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    chosen = policy_set(1_000)
    distinct = build_contexts(chosen, DISTINCT if not cfg.quick else 2_000, seed=21)
    peaks: list[tuple[str, float]] = []
    for size in _sizes(cfg):
        progress(f"{NAME}: {size:,} records")
        contexts = [distinct[i % len(distinct)] for i in range(size)]
        with tempfile.TemporaryDirectory(prefix="rensei-bench-replay-") as tmp:
            home = Home(Path(tmp, "h"))
            home.init()
            with closing(home.connect(write=True)) as conn:
                snapshot = PolicyStore(conn).save(chosen.policies, saved_at=RECORDED_AT)
            with AuditLog.open(home) as log:
                for start in range(0, size, 10_000):
                    batch = explain_batch(contexts[start : start + 10_000], snapshot)
                    log.append_many(batch, recorded_at=RECORDED_AT)
                with timed() as base:
                    explain_batch(contexts, snapshot)
            measured = _replay_in_a_process(home.path)
            res.check(
                measured["matched"] == size and measured["ok"],
                f"all {size:,} replayed and matched",
            )
        seconds = float(measured["seconds"])
        ratio = base[0] / seconds
        peak = measured["rss_peak_kib"] / 1024
        peaks.append((f"{size:,}", peak))
        res.figures.append(
            Figure(
                case=f"replay, {size:,} records, 1,000 policies, peak RSS of the replaying process",
                value=peak,
                unit="MiB",
                note=f"+{max(0, measured['rss_peak_kib'] - measured['rss_before_kib']) / 1024:.1f}"
                f" MiB over the {measured['rss_before_kib'] / 1024:.0f} MiB before the call "
                f"({measured['memory_method']})",
            )
        )
        res.figures.append(
            Figure(
                case=f"replay, {size:,} records, 1,000 policies",
                value=size / seconds,
                unit="records/s",
                baseline=size / base[0],
                baseline_label="explain_batch, same contexts",
                ratio=ratio,
                target=f">= {TARGET}x",
                passed=ratio >= TARGET,
            )
        )
    if len(peaks) > 1:
        res.figures.append(flat_memory("replay peak RSS", peaks))
    res.growth.append(Growth(what="peak RSS of the replaying process", unit="MiB", points=peaks))
    return res


def _replay_in_a_process(home: Path) -> dict[str, Any]:
    """``audit replay`` timed in a fresh process (``benchmarks._worker replay``), so its peak
    memory is its own, not the benchmark's (which holds the contexts and the baseline's
    decisions)."""
    return run_module("benchmarks._worker", "replay", str(home))
