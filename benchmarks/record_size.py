"""Record sizes: the bytes a decision record and a shadow record take as the audit log stores
them, at 10, 100 and 1,000 policies, compact (the default) beside the same decisions recorded
with the full trace. Shared by the append (decision records) and shadow benchmarks.

Target: every record (the largest, not the median) within :data:`TARGET_BYTES` at any policy
count, decision and shadow records alike; the workload's contexts carry up to four accounts and a
legacy route (docs/performance.md, "Record size").

Enforced-decision records are measured as the Enforcer stores them: the benchmark's policy set
saved as a home's revision, a canary armed (by override: the sizes need no gate evidence) on
every canonical repository the contexts name, and each context asked as a gateway spawn at the
agentic seam (its accounts, principal, role, requirement and class; the legacy route its context
carries, else the spawn's own default) through ``Enforcer.enforce``. Contexts without a canonical
repository are not governed and store nothing. The log's writer skips the disk sync on this
scratch home (sizes do not depend on it). The baseline is each record re-derived with the full
trace (``rensei audit show SEQ --full``).
"""

from __future__ import annotations

import datetime as dt
import statistics
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Final

from rensei_routing import PolicySnapshot, RouteDecision, explain_batch
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.enforce.records import DECISION_RECORD
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.shadow.compare import ActualRoute, shadow_decision
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.enforce import Enforcer, arm
from rensei_routing.errors import EnforcementRefused
from rensei_routing.ops.rederive import full_trace
from rensei_routing.ops.replay import Sources
from rensei_routing.plugins.manager import SeamRegistry
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .harness import Config, Figure
from .workload import build_contexts, policy_set

__all__ = [
    "SHADOW_TARGET_BYTES",
    "SIZES",
    "TARGET_BYTES",
    "decision_record",
    "enforced_figures",
    "enforced_records",
    "enforced_spawn",
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


def enforced_spawn(context: RouteContext) -> Spawn:
    """``context`` as the gateway spawn at the agentic seam whose route it becomes: the same
    repository, class, principal, role, requirement and accounts; the legacy route the context
    carries (else the default mechanism onto ``anthropic-primary``, ``claude-sonnet-4-5``)."""
    legacy = context.legacy_route
    requirement = context.model_requirement
    return Spawn.from_dict(
        {
            "seam": "agentic-runner",
            "principal_id": context.principal_id,
            "repo": None if context.repo is None else context.repo.to_dict(),
            "repo_class": context.repo_class,
            "role": context.role,
            "model_requirement": None if requirement is None else requirement.to_dict(),
            "accounts": [a.to_dict() for a in context.accounts],
            "stages": [
                {
                    "mechanism": "default"
                    if legacy is None or legacy.mechanism is None
                    else legacy.mechanism,
                    "provider": "gateway",
                }
            ],
            "model": "claude-sonnet-4-5" if legacy is None else legacy.model,
            "account_id": "anthropic-primary" if legacy is None else legacy.account_id,
        }
    )


def enforced_records(
    root: Path, size: int, count: int, registry: SeamRegistry
) -> tuple[Home, list[int]]:
    """A home under ``root`` holding the enforced-decision records of ``count`` workload
    contexts over the ``size``-policy set (every governed one, refusals included), and their
    seqs. ``registry`` must register the ``agentic-runner`` seam."""
    ps = policy_set(size)
    home = Home(root / f"enforced-{size}")
    home.init()
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(ps.policies, saved_at=STAMP)
    spawns = [enforced_spawn(c) for c in build_contexts(ps, count, seed=size)]
    repos = sorted({s.repo.value for s in spawns if s.repo is not None and s.repo.canonical})
    now = dt.datetime.now(dt.UTC)
    for repo in repos:
        arm(home, repo, now=now, actor="bench", override=True, reason="record-size benchmark")
    seqs = []
    with Enforcer(home, registry) as enforcer:
        enforcer._audit()._write_conn().pragma("synchronous", "OFF")  # scratch home only
        for spawn in spawns:
            try:
                answer = enforcer.enforce(spawn)
            except EnforcementRefused as refused:
                assert refused.seq is not None
                seqs.append(refused.seq)
            else:
                seq = getattr(answer, "seq", None)
                if seq is not None:
                    seqs.append(seq)
    return home, seqs


def enforced_figures(cfg: Config, registry: SeamRegistry) -> list[Figure]:
    """One figure per policy count: the largest stored bytes of an enforced-decision record
    (target: every record at most :data:`TARGET_BYTES`), against the same records with the
    full trace re-derived (``audit show --full``)."""
    figures = []
    count = 60 if cfg.quick else 2_000  # each repository's arm loads the revision: the cost
    with tempfile.TemporaryDirectory(prefix="rensei-bench-enforced-size-") as tmp:
        for size in SIZES:
            home, seqs = enforced_records(Path(tmp), size, count, registry)
            sources = Sources(home)
            compact, full = [], []
            with AuditLog.open(home) as log:
                for r in log.records():
                    if r.payload.get("record_type") != DECISION_RECORD:
                        continue
                    compact.append(len(r.payload_bytes))
                    rederived = full_trace(r.payload, sources, where=f"record {r.seq}")
                    full.append(len(encode_payload(rederived.payload)))
            if len(compact) != len(seqs):
                raise RuntimeError(f"{len(seqs)} governed answers, {len(compact)} records")
            largest = max(compact)
            figures.append(
                Figure(
                    case=f"enforced-decision size, {size:,} policies (compact, the default)",
                    value=largest,
                    unit="bytes",
                    baseline=max(full),
                    baseline_label="the same records, trace re-derived by audit show --full",
                    ratio=max(full) / largest,
                    ratio_kind="smaller",
                    target=f"<= {TARGET_BYTES:,} bytes (every record)",
                    passed=largest <= TARGET_BYTES,
                    note=f"largest of {len(compact):,} records (Enforcer.enforce, armed); "
                    f"median {statistics.median(compact):,} bytes "
                    f"(full trace: {statistics.median(full):,})",
                )
            )
    return figures
