"""Benchmark, live-path: one request at a time, the latency of each, at 10, 100 and 1,000
policies: p50, p95 and p99 per request, each beside a baseline timed in the same loop.

Rows (each a :class:`Row`: how one request is served, and the baseline it is read against):

* ``decide only``: ``explain(context, snapshot)`` of one fresh context (its objects built for
  it alone, as when each request is parsed from its own body), the snapshot loaded once, as a
  serving process holds it. Baseline: **the decision's own id work**, the one thing no decision
  can skip: the RFC 8785 text of its id preimage (the nine fields the id covers, the context
  written from a fresh copy of its objects) and the SHA-256 of it, i.e. ``decision_id``
  without the redaction pre-check. Target: at 10 policies the decision's p50 is at most 2x the
  baseline's p50; 100 and 1,000 policies are reported beside it.

Requests and baseline inputs are interleaved (request ``i``, then baseline ``i``), so both see
the same machine; the collector stays on, as in a serving process. Every baseline digest is
checked equal to its decision's id, so the baseline hashes what the decision hashed.

A row for another way of serving (say, decide and record) is one more :class:`Row` in
:data:`ROWS`: a name, a function that prepares the requests of one size and returns the
per-request callables, and the target it is held to.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring as _e
from typing import Any

from rensei_routing import PolicySnapshot, RouteContext, RouteDecision, explain
from rensei_routing.core.canonical import SHA256_PREFIX
from rensei_routing.core.canonical import json_string as _s

from .harness import BenchResult, Config, Figure, progress
from .workload import build_contexts, policy_set

NAME = "live-path"
TITLE = "one request at a time: p50/p95/p99 per request beside its baseline"

SIZES = (10, 100, 1_000)
TARGET_SIZE = 10
#: At ``TARGET_SIZE`` policies, one decision's p50 at most this many times its id work's p50.
TARGET_DECIDE = 2.0
PERCENTILES = (50, 95, 99)
WARM = 500


def id_text(decision: RouteDecision, context: RouteContext) -> str:
    """The RFC 8785 text of ``decision``'s id preimage, ``context`` standing for its context."""
    return (
        f'{{"account_id":{_s(decision.account_id)},"context":{context.canonical_text()},'
        f'"effective_model":{_s(decision.effective_model)},"outcome":{_e(decision.outcome)},'
        f'"policy_id":{_s(decision.policy_id)},"policy_revision":{decision.policy_revision},'
        f'"reason":{_e(decision.reason)},"snapshot_hash":{_e(decision.snapshot_hash)},'
        f'"snapshot_state":{_e(decision.snapshot_state)}}}'
    )


def id_work(decision: RouteDecision, context: RouteContext) -> str:
    """The baseline: canonicalise and hash one decision's id inputs."""
    return SHA256_PREFIX + hashlib.sha256(id_text(decision, context).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Prepared:
    """One size's requests: ``serve(i)`` serves request ``i`` and returns what it answered,
    ``baseline(i, answer)`` does the baseline's work for it and returns what to check."""

    count: int
    serve: Callable[[int], Any]
    baseline: Callable[[int, Any], Any]
    check: Callable[[Any, Any], bool]
    baseline_label: str


@dataclass(frozen=True, slots=True)
class Row:
    """One way of serving a request, measured at every size."""

    name: str
    prepare: Callable[[PolicySnapshot, int, int], Prepared]
    #: ``(size, ratio limit)``: the p50 ratio target, or ``None`` for a row without one.
    target: tuple[int, float] | None = None


def _decide_only(snapshot: PolicySnapshot, size: int, count: int) -> Prepared:
    chosen = policy_set(size)
    # Two separately built lists of equal contexts: neither side reuses the other's texts.
    requests = build_contexts(chosen, count, seed=17)
    copies = build_contexts(chosen, count, seed=17)
    return Prepared(
        count=count,
        serve=lambda i: explain(requests[i], snapshot),
        baseline=lambda i, decision: id_work(decision, copies[i]),
        check=lambda decision, digest: decision.decision_id == digest,
        baseline_label="its id: canonicalise + SHA-256",
    )


#: Every row, in print order.
ROWS: tuple[Row, ...] = (Row("decide only", _decide_only, (TARGET_SIZE, TARGET_DECIDE)),)


def percentile(samples: Sequence[float], pct: int) -> float:
    """The ``pct``-th percentile of sorted ``samples`` (nearest rank)."""
    index = max(0, min(len(samples) - 1, -(-len(samples) * pct // 100) - 1))
    return samples[index]


def measure(prepared: Prepared, res: BenchResult, label: str) -> tuple[list[float], list[float]]:
    """Sorted per-request seconds of the row and of its baseline, interleaved."""
    ours: list[float] = []
    base: list[float] = []
    clock = time.perf_counter
    wrong = 0
    for i in range(prepared.count):
        start = clock()
        answer = prepared.serve(i)
        middle = clock()
        expected = prepared.baseline(i, answer)
        end = clock()
        if i >= WARM:
            ours.append(middle - start)
            base.append(end - middle)
        if not prepared.check(answer, expected):
            wrong += 1
    res.check(not wrong, f"{label}: every baseline agrees with its request's answer")
    ours.sort()
    base.sort()
    return ours, base


def _figures(
    row: Row, size: int, ours: Sequence[float], base: Sequence[float], label: str
) -> list[Figure]:
    out = []
    for pct in PERCENTILES:
        value, floor = percentile(ours, pct) * 1e6, percentile(base, pct) * 1e6
        held = row.target is not None and row.target[0] == size and pct == 50
        limit = row.target[1] if row.target is not None else 0.0
        ratio = value / floor
        out.append(
            Figure(
                case=f"{row.name}, {size:,} policies, p{pct}",
                value=value,
                unit="us",
                baseline=floor,
                baseline_label=label,
                ratio=ratio,
                ratio_kind="time",
                target=f"<= {limit:.0f}x time" if held else "",
                passed=(ratio <= limit) if held else None,
                note=(
                    f"{len(ours):,} requests, one at a time (the first {WARM} not counted)"
                    if pct == 50
                    else ""
                ),
            )
        )
    return out


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count = WARM + (2_000 if cfg.quick else 20_000)
    for size in SIZES:
        snapshot = PolicySnapshot.of(policy_set(size).policies, revision=1)
        for row in ROWS:
            progress(f"{NAME}: {row.name}, {size:,} policies, {count:,} requests")
            prepared = row.prepare(snapshot, size, count)
            label = f"{row.name}, {size:,} policies"
            ours, base = measure(prepared, res, label)
            res.figures.extend(_figures(row, size, ours, base, prepared.baseline_label))
    res.notes.append(
        "decide only: explain of one fresh context against a snapshot loaded once; its baseline "
        "writes the RFC 8785 text of the decision's id preimage from a fresh copy of the "
        "context and hashes it (what decision_id does, less the redaction pre-check); the "
        "collector stays on"
    )
    return res
