"""Benchmark, audit-replay: ``rensei audit replay`` over 100,000 recorded decisions (10,000 with
--quick, 1,000,000 with --large) against 1,000 policies, beside ``explain_batch`` over the same
contexts measured in the same run (memos across records are allowed on both sides).

The log is written the default way (``AuditLog.append_many``, 10,000 a transaction) from
decisions the resolver made for 20,000 distinct contexts cycled through the log, so contexts
repeat as a busy host's do. Target (issue 21): replay >= 0.5x of ``explain_batch``. Peak memory
is reported at each size (it must stay flat: the replay streams the log in pages).
"""

from __future__ import annotations

import resource
import tempfile
from contextlib import closing
from pathlib import Path

from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.ops.replay import Sources, replay_chain
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .harness import BenchResult, Config, Figure, Growth, progress, timed
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
                with timed() as t:
                    summary = replay_chain(log, Sources(home))
            res.check(summary.matched == size and summary.ok, f"all {size:,} replayed and matched")
        ratio = base[0] / t[0]
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peaks.append((f"{size:,}", peak))
        res.figures.append(
            Figure(
                case=f"replay, {size:,} records, 1,000 policies",
                value=size / t[0],
                unit="records/s",
                baseline=size / base[0],
                baseline_label="explain_batch, same contexts",
                ratio=ratio,
                target=f">= {TARGET}x",
                passed=ratio >= TARGET,
            )
        )
    res.growth.append(Growth(what="peak RSS of the process", unit="MiB", points=peaks))
    return res
