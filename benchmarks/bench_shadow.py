"""Benchmark 6, shadow: shadow recording and the what-if replay, beside in-run baselines.

* ``shadow record``: ``ShadowRecorder.record_many`` over the shipped HydraFlow sample spawns
  (cycled to 100,000; 5,000 a transaction, as the CLI does) beside the same records built and
  stored with the library's public pieces: each spawn's context and legacy route
  (``recorder.route``: the seam's classifier names the deciding stage), ``explain_batch`` of
  the contexts, ``shadow_decision`` (the comparison) and ``append_many`` of the records. Both
  write to fresh homes; the recorder also keeps its index of shadow records. Target: >= 0.8x.
* ``record_route_shadow``: the median of one call with the switch on (explain, compare, one
  durable append) beside the median of ``AuditLog.append`` of the decision alone. Target:
  under 1 ms median.
* ``whatif``: ``compare_chain`` over a chain of 100,000 recorded shadow records (read, parse,
  explain against the current revision and the candidate) beside the resolution it cannot skip:
  ``explain_batch`` of the same contexts against the current revision and against the
  candidate. Target: >= 0.5x, for a chain whose contexts repeat (the sample) and for one where
  every context is distinct.

The policies are the sample's own ``policies.json`` and ``candidate-policies.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import json
import statistics
import tempfile
import time
from contextlib import closing
from pathlib import Path
from types import MappingProxyType

from rensei_routing import PolicySnapshot, explain_batch
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.routing.resolver import RECORD_TRACE
from rensei_routing.core.shadow.compare import Seam, shadow_decision
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.core.shadow.whatif import Verdict, changed
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.plugins.manager import SeamRegistry
from rensei_routing.shadow.recorder import ShadowRecorder, record_route_shadow
from rensei_routing.shadow.whatif import compare_chain
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from . import record_size
from .harness import REPO_ROOT, BenchResult, Config, Figure, progress, timed

NAME = "shadow"
TITLE = "shadow record, record_route_shadow and whatif vs the library's pieces doing their work"

SAMPLES = REPO_ROOT / "plugins" / "rensei-seams-hydraflow" / "samples"
BATCH = 5_000
RECORD_TARGET = 0.8
CALL_TARGET_MS = 1.0
WHATIF_TARGET = 0.5
STAMP = "2026-01-01T00:00:00.000000Z"

_AGENTIC = ("default", "role-dial", "fleet-ratchet", "repo-provider", "credit-failover")
_DIALLED = ("maintenance-default", "role-dial", "fleet-ratchet")
#: The four HydraFlow seams as the plugin registers them (names, faces, stage names).
SEAMS = (
    Seam(name="agentic-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="subprocess-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="lightweight-agent", request_face="one-shot", stages=_DIALLED),
    Seam(name="streaming-agent", request_face="agentic", stages=_DIALLED),
)


def _registry() -> SeamRegistry:
    return SeamRegistry(
        MappingProxyType({s.name: s for s in SEAMS}),
        MappingProxyType({s.name: "bench" for s in SEAMS}),
    )


def _spawns(count: int) -> list[Spawn]:
    spec = importlib.util.spec_from_file_location("generate_spawns", SAMPLES / "generate_spawns.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    lines = gen.generate(min(count, 10_000)).splitlines()
    parsed = [Spawn.from_dict(json.loads(line)) for line in lines]
    return [parsed[i % len(parsed)] for i in range(count)]


def _policies(name: str) -> PolicySnapshot:
    return PolicySnapshot.from_dict(json.loads((SAMPLES / name).read_text(encoding="utf-8")))


def _home(root: Path, name: str, snapshot: PolicySnapshot) -> Home:
    home = Home(root / name)
    home.init()
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(snapshot.policies, saved_at=STAMP)
    return home


def _clock() -> str:
    return format_timestamp(dt.datetime.now(dt.UTC))


def _record(res: BenchResult, tmp: Path, spawns: list[Spawn], current: PolicySnapshot) -> None:
    registry = _registry()
    lib_home = _home(tmp, "lib", current)
    base_home = _home(tmp, "base", current)
    lib_s = base_s = 0.0
    with (
        ShadowRecorder(lib_home, registry, clock=_clock) as recorder,
        AuditLog.open(base_home) as base_log,
    ):
        snapshot = recorder.snapshot()
        recorder.record_many(spawns[:10], snapshot=snapshot)  # open, warm
        base_log.append_many(
            recorder.build_many(spawns[:10], *snapshot, recorded_at=STAMP), recorded_at=STAMP
        )
        same = True
        for start in range(0, len(spawns), BATCH):
            chunk = spawns[start : start + BATCH]
            with timed() as t:
                records, _ = recorder.record_many(chunk, snapshot=snapshot)
            lib_s += t[0]
            with timed() as t:
                routes = [recorder.route(s) for s in chunk]
                decisions = explain_batch(
                    [c for c, _ in routes],
                    snapshot[0],
                    snapshot_state=snapshot[1],
                    trace=RECORD_TRACE,  # what a recorder stores (the compact explanation)
                )
                stamp = _clock()
                built = [
                    shadow_decision(
                        recorded_at=stamp,
                        seam=s.seam,
                        principal_id=s.principal_id,
                        actual=actual,
                        proposed=d,
                    )
                    for s, (_, actual), d in zip(chunk, routes, decisions, strict=True)
                ]
                base_log.append_many(built, recorded_at=stamp)
            base_s += t[0]
            same = same and [r.canonical() for r in records] == [
                dataclasses.replace(b, recorded_at=r.recorded_at).canonical()
                for r, b in zip(records, built, strict=True)
            ]
        res.check(same, "shadow record stores exactly the records the pieces build")
        res.check(
            recorder._audit().count() == base_log.count() == len(spawns) + 10,
            f"both logs hold {len(spawns):,} records (+10 warm-up)",
        )
        res.check(bool(recorder._audit().verify()), "the shadow chain verifies")
    n = len(spawns)
    ratio = (n / lib_s) / (n / base_s)
    res.figures.append(
        Figure(
            case=f"shadow record, {n:,} spawns ({BATCH:,}/txn)",
            value=n / lib_s,
            unit="spawns/s",
            baseline=n / base_s,
            baseline_label="the same records: route, explain_batch, compare, append_many",
            ratio=ratio,
            target=f">= {RECORD_TARGET}x",
            passed=ratio >= RECORD_TARGET,
        )
    )


def _one_call(
    res: BenchResult, tmp: Path, spawns: list[Spawn], current: PolicySnapshot, calls: int
) -> None:
    home = _home(tmp, "calls", current)
    base_home = _home(tmp, "calls-base", current)
    ours: list[float] = []
    base: list[float] = []
    with (
        ShadowRecorder(home, _registry(), clock=_clock) as recorder,
        AuditLog.open(base_home) as base_log,
    ):
        record_route_shadow(spawns[0], enabled=True, recorder=recorder)  # open, warm
        for i in range(calls):
            spawn = spawns[i % len(spawns)]
            start = time.perf_counter()
            record = record_route_shadow(spawn, enabled=True, recorder=recorder)
            ours.append(time.perf_counter() - start)
            if record is None:
                res.check(False, "record_route_shadow wrote nothing")
                return
            start = time.perf_counter()
            base_log.append(record.proposed, recorded_at=_clock())
            base.append(time.perf_counter() - start)
        res.check(recorder._audit().count() == calls + 1, f"{calls:,} calls, {calls:,} records")
    median, floor = statistics.median(ours) * 1e3, statistics.median(base) * 1e3
    res.figures.append(
        Figure(
            case=f"record_route_shadow, 1 call (median of {calls:,})",
            value=median,
            unit="ms",
            baseline=floor,
            baseline_label="append of the decision alone",
            ratio=median / floor,
            ratio_kind="time",
            target=f"< {CALL_TARGET_MS} ms",
            passed=median < CALL_TARGET_MS,
            note=f"p90 {sorted(ours)[int(len(ours) * 0.9)] * 1e3:.3f} ms; both are bound by the "
            "fsync of a durable commit (synchronous=FULL) on this machine's disk",
        )
    )
    # The work a call adds beyond its own durable append: route, classify, explain, compare and
    # encode one spawn (everything record_route_shadow does except the write), timed per spawn.
    snapshot = _policies("policies.json"), "ok"
    with ShadowRecorder(home, _registry(), clock=_clock) as recorder:
        work: list[float] = []
        for i in range(calls):
            spawn = spawns[i % len(spawns)]
            start = time.perf_counter()
            (record,) = recorder.build_many([spawn], snapshot[0], snapshot[1], recorded_at=STAMP)
            encode_payload(record)
            work.append(time.perf_counter() - start)
    res.figures.append(
        Figure(
            case=f"record_route_shadow work beyond the append (median of {calls:,})",
            value=statistics.median(work) * 1e3,
            unit="ms",
            note="route, classify, explain, compare and encode one spawn; no database write",
        )
    )


def _whatif(
    res: BenchResult, tmp: Path, spawns: list[Spawn], current: PolicySnapshot, label: str
) -> None:
    candidate = _policies("candidate-policies.json")
    home = _home(tmp, f"whatif-{label}", current)
    with ShadowRecorder(home, _registry(), clock=_clock) as recorder:
        snapshot = recorder.snapshot()
        contexts = []
        for start in range(0, len(spawns), BATCH):
            records, _ = recorder.record_many(spawns[start : start + BATCH], snapshot=snapshot)
            contexts.extend(r.proposed.explanation.context for r in records)
    with AuditLog.open(home) as log:
        list(log.records(stop=1))  # open the reader
        with timed() as t:
            summary = compare_chain(log, snapshot, candidate)
        ours = t[0]
    with timed() as t:
        decisions = explain_batch(contexts, snapshot[0], snapshot_state=snapshot[1])
        proposed = explain_batch(contexts, candidate)
    base = t[0]
    res.check(summary.contexts == len(contexts) == len(decisions), "every context compared")
    moved = sum(
        changed(Verdict.of(b), Verdict.of(a)) for b, a in zip(decisions, proposed, strict=True)
    )
    res.check(
        moved == summary.count("changed"),
        f"the replay counts the changes explain_batch finds between the revisions ({moved:,})",
    )
    res.check(summary.any_change, "the candidate changes some decisions")
    n = len(contexts)
    ratio = (n / ours) / (n / base)
    res.figures.append(
        Figure(
            case=f"whatif, {n:,} recorded contexts ({label})",
            value=n / ours,
            unit="contexts/s",
            baseline=n / base,
            baseline_label="explain_batch x 2 revisions",
            ratio=ratio,
            target=f">= {WHATIF_TARGET}x",
            passed=ratio >= WHATIF_TARGET,
        )
    )


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count = 5_000 if cfg.quick else 100_000
    calls = 50 if cfg.quick else 1_000
    progress(f"{NAME}: building {count:,} spawns from the shipped sample")
    spawns = _spawns(count)
    current = _policies("policies.json")
    with tempfile.TemporaryDirectory(prefix="rensei-bench-shadow-") as tmp:
        progress(f"{NAME}: shadow record of {count:,} spawns")
        _record(res, Path(tmp), spawns, current)
        progress(f"{NAME}: {calls:,} record_route_shadow calls")
        _one_call(res, Path(tmp), spawns, current, calls)
        progress(f"{NAME}: whatif over {count:,} recorded contexts")
        _whatif(res, Path(tmp), spawns, current, "sample, repeating")
        distinct = [
            dataclasses.replace(s, principal_id=f"{s.principal_id}.{i}")
            for i, s in enumerate(spawns)
        ]
        progress(f"{NAME}: whatif over {count:,} distinct recorded contexts")
        _whatif(res, Path(tmp), distinct, current, "all distinct")
    progress(f"{NAME}: shadow record sizes")
    res.figures.extend(
        record_size.size_figures(
            cfg, "shadow record", record_size.shadow_record, record_size.SHADOW_TARGET_BYTES
        )
    )
    res.notes.append(
        f"spawns: the shipped HydraFlow sample (3,000 distinct, cycled to {count:,}); policies: "
        "its policies.json (6) and candidate-policies.json (5); 'all distinct' gives every "
        "spawn its own principal id, so whatif's cache of repeated contexts never hits"
    )
    return res
