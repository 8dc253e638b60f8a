"""Record sizes: the bytes a decision record and a shadow record take as the audit log stores
them, at 10, 100 and 1,000 policies, compact (the default) beside the same decisions recorded
with the full trace. Shared by the append (decision records) and shadow benchmarks.

Target: every record (the largest, not the median) within :data:`TARGET_BYTES` at any policy
count, decision and shadow records alike; the workload's contexts carry up to four accounts and a
legacy route (docs/performance.md, "Record size").
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Final

from rensei_routing import PolicySnapshot, RouteDecision, explain_batch
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.shadow.compare import ActualRoute, shadow_decision
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision

from .harness import Config, Figure
from .workload import build_contexts, policy_set

__all__ = [
    "SHADOW_TARGET_BYTES",
    "SIZES",
    "TARGET_BYTES",
    "decision_record",
    "shadow_record",
    "size_figures",
]

SIZES: Final = (10, 100, 1_000)
TARGET_BYTES: Final = 1_500
SHADOW_TARGET_BYTES: Final = TARGET_BYTES
STAMP: Final = "2026-01-01T00:00:00.000000Z"


def decision_record(d: RouteDecision) -> Any:
    """What ``rensei explain --record`` appends (a live stamp)."""
    return StampedDecision(d, Freshness.live())


def shadow_record(d: RouteDecision) -> Any:
    """A shadow record of ``d`` beside the legacy route its context carries."""
    legacy = d.explanation.context.legacy_route
    binding = "anthropic" if legacy is None else legacy.provider_binding
    actual = ActualRoute(
        provider=binding,
        provider_binding=binding,
        account_id=None if legacy is None else legacy.account_id,
        model=None if legacy is None else legacy.model,
        mechanism="default" if legacy is None or legacy.mechanism is None else legacy.mechanism,
        mechanism_detail=None if legacy is None else legacy.mechanism_detail,
        transport="harness-direct",
    )
    return shadow_decision(
        recorded_at=STAMP, seam="agentic-runner", principal_id=None, actual=actual, proposed=d
    )


def size_figures(
    cfg: Config,
    what: str,
    record: Callable[[RouteDecision], Any],
    target: int = TARGET_BYTES,
) -> list[Figure]:
    """One figure per policy count: the largest stored bytes of ``record(decision)``, compact,
    against the same decisions recorded with the full trace (target: every record at most
    ``target``; the median is in the note)."""
    figures = []
    count = 200 if cfg.quick else 2_000
    for size in SIZES:
        ps = policy_set(size)
        snapshot = PolicySnapshot.of(ps.policies)
        contexts = build_contexts(ps, count, seed=size)
        sizes = {
            trace: [
                len(encode_payload(record(d)))
                for d in explain_batch(contexts, snapshot, trace=trace)
            ]
            for trace in ("compact", "full")
        }
        compact = max(sizes["compact"])
        median = statistics.median(sizes["compact"])
        full = max(sizes["full"])
        figures.append(
            Figure(
                case=f"{what} size, {size:,} policies (compact, the default)",
                value=compact,
                unit="bytes",
                baseline=full,
                baseline_label="the same decisions recorded with --trace full",
                ratio=full / compact,
                ratio_kind="smaller",
                target=f"<= {target:,} bytes (every record)",
                passed=compact <= target,
                note=f"largest of {count:,} records; median {median:,} bytes "
                f"(full trace: {statistics.median(sizes['full']):,})",
            )
        )
    return figures
