"""Benchmark 6, ruleset-snapshot: compile + sign, the host's verify and reload, the
``If-None-Match`` poll on loopback, and claim-gate checks, for a snapshot of 10,000 policies
and a realistic org (about 4 MiB; --quick: 1,000 policies and a small org).

Baseline for compile and verify: ``json.loads`` + SHA-256 + one Ed25519 verify of the same
bytes. Targets: host verify + load <= 2x that baseline; >= 50,000 claim-gate checks
per second against a cached snapshot. The poll is reported beside a request to an unknown
route of the same server (the HTTP floor).
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import tempfile
import urllib.error
import urllib.request
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rensei_routing import signing
from rensei_routing.control.server import SnapshotService, make_app, serve_in_thread
from rensei_routing.core.snapshot.envelope import verify_snapshot
from rensei_routing.core.snapshot.org import OrgData
from rensei_routing.core.snapshot.postures import ClaimGate
from rensei_routing.host.cache import HostCache
from rensei_routing.host.fetch import fetch_snapshot
from rensei_routing.store.control import SqliteControlStore
from rensei_routing.store.db import connect
from rensei_routing.store.policies import PolicyStore
from rensei_routing.store.snapshots import OrgStore

from .harness import BenchResult, Config, Figure, progress, timed
from .workload import policy_set

NAME = "ruleset-snapshot"
TITLE = "snapshot compile/verify/poll/claim vs json.loads + SHA-256 + Ed25519 verify"

TARGET_VERIFY = 2.0
TARGET_CLAIMS = 50_000
COMPILED_AT = "2026-11-30T09:00:00.000000Z"
KEY = signing.PrivateKey(bytes(range(32)))


def _org(pools: int, seed: int = 6) -> OrgData:
    rng = random.Random(seed)
    pool_ids = [f"pool-{i:05d}" for i in range(pools)]
    statuses = ["active"] * 8 + ["draining", "quarantined"]
    profiles = [
        {
            "id": f"profile-{i:04d}",
            "pools": sorted(rng.sample(pool_ids, k=min(len(pool_ids), 6))),
            "description": f"capacity profile {i} for agent work of team {i % 40}",
        }
        for i in range(pools // 4)
    ]
    grants = [
        {"profile": p["id"], "project": f"project-{rng.randrange(pools):05d}"} for p in profiles
    ] + [{"profile": profiles[0]["id"]}]
    doc = {
        "capacityProfiles": {"profiles": profiles, "grants": grants},
        "poolHostInventory": {
            "pools": [
                {
                    "id": p,
                    "status": rng.choice(statuses),
                    "kind": "docker",
                    "description": f"worker pool {p} in zone {rng.randrange(12)}",
                }
                for p in pool_ids
            ],
            "hosts": [
                {"id": f"host-{i:06d}", "pool": rng.choice(pool_ids), "status": "ready"}
                for i in range(pools * 3)
            ],
        },
        "executionCellMatrix": {
            "cells": [
                {"pool": p, "runtime": r, "allowed": rng.random() < 0.8}
                for p in pool_ids
                for r in ("claude-cli", "glm-harness", "batch-eval")
            ]
        },
        "posteriorSummary": {
            "arms": [
                {
                    "arm": f"arm-{i:03d}",
                    "alpha": 1 + rng.randrange(99),
                    "beta": 1 + rng.randrange(99),
                }
                for i in range(200)
            ]
        },
    }
    return OrgData.from_dict(doc)


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    size, pools, repeats = (1_000, 300, 3) if cfg.quick else (10_000, 1_000, 5)
    progress(f"{NAME}: {size:,} policies, {pools:,} pools")
    chosen = policy_set(size)
    org = _org(pools)
    public = KEY.public_key
    lookup = signing.key_lookup([public])
    with tempfile.TemporaryDirectory(prefix="rensei-bench-snapshot-") as tmp:
        path = Path(tmp, "control.db")
        with closing(connect(path, write=True)) as conn:
            PolicyStore(conn).save(chosen.policies, saved_at=COMPILED_AT)
            OrgStore(conn).save(org, saved_at=COMPILED_AT)
            store = SqliteControlStore(conn, org_id="org_bench")
            compile_s: list[float] = []
            for _ in range(repeats):
                with timed() as t:
                    result = store.compile_current(
                        compiled_at=COMPILED_AT, signing_key_id=public.key_id, sign=KEY.sign
                    )
                compile_s.append(t[0])
            assert result is not None
            data = store.envelope()
        snap = result.snapshot
        res.check(verify_snapshot(data, lookup=lookup) == snap, "the stored envelope verifies")
        res.check(len(snap.sections["policyBundle"]["policies"]) == size, "every policy bundled")
        cache = HostCache(Path(tmp, "host"))
        cache.trust(public)
        cache.accept(data, now=datetime.now(UTC), source="bench")
        verify_s, load_s, base_s = [], [], []
        signed = snap.header.signed_bytes()
        for _ in range(repeats):  # interleaved, so each ratio sees the same machine
            with timed() as t:
                json.loads(data)
                hashlib.sha256(data).hexdigest()
                signing.check(public, signed, snap.signature)
            base_s.append(t[0])
            with timed() as t:
                verified = verify_snapshot(data, lookup=lookup)
            verify_s.append(t[0])
            with timed() as t:
                loaded = cache.load()
            load_s.append(t[0])
        res.check(verified == snap and loaded == snap, "verify and reload return the snapshot")
        base = _median(base_s)
        mib = len(data) / 2**20
        res.figures.append(
            Figure(
                case=f"read inputs + compile + sign + store ({size:,} policies, {mib:.1f} MiB)",
                value=_median(compile_s) * 1e3,
                unit="ms",
                baseline=base * 1e3,
                baseline_label="json.loads + SHA-256 + Ed25519 verify",
                ratio=_median(compile_s) / base,
                ratio_kind="time",
            )
        )
        for case, samples in (
            ("host verify", verify_s),
            ("host reload from disk (read + verify)", load_s),
        ):
            ratio = _median(samples) / base
            res.figures.append(
                Figure(
                    case=f"{case} ({mib:.1f} MiB)",
                    value=_median(samples) * 1e3,
                    unit="ms",
                    baseline=base * 1e3,
                    baseline_label="json.loads + SHA-256 + Ed25519 verify",
                    ratio=ratio,
                    ratio_kind="time",
                    target=f"<= {TARGET_VERIFY:.0f}x time",
                    passed=ratio <= TARGET_VERIFY,
                )
            )
        res.extra["envelope_bytes"] = len(data)
        _poll(res, snap, data, repeats=50 if cfg.quick else 300)
        _claims(res, snap.sections, count=20_000 if cfg.quick else 200_000)
    return res


def _poll(res: BenchResult, snap: Any, data: bytes, *, repeats: int) -> None:
    service = SnapshotService(
        latest=lambda: snap,
        compile_now=lambda: snap,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
    )
    app = make_app(now=lambda: datetime.now(UTC), token="bench", service=service)
    server = serve_in_thread(app, host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{server.port}"
    try:
        etag = hashlib.sha256(data).hexdigest()
        res.check(fetch_snapshot(url, token="bench", etag=etag).status == 304, "poll gets 304")
        poll_s, floor_s = [], []
        for _ in range(repeats):
            with timed(collect=False) as t:
                fetch_snapshot(url, token="bench", etag=etag)
            poll_s.append(t[0])
            with timed(collect=False) as t:
                try:
                    urllib.request.urlopen(url + "/nothing", timeout=5).close()
                except urllib.error.HTTPError as e:
                    e.close()
            floor_s.append(t[0])
    finally:
        server.stop()
    res.figures.append(
        Figure(
            case="If-None-Match poll -> 304 on loopback",
            value=_median(poll_s) * 1e3,
            unit="ms",
            baseline=_median(floor_s) * 1e3,
            baseline_label="404 round trip on the same server",
            ratio=_median(poll_s) / _median(floor_s),
            ratio_kind="time",
        )
    )


def _claims(res: BenchResult, sections: Any, *, count: int) -> None:
    gate = ClaimGate(sections)
    pools = [p["id"] for p in sections["poolHostInventory"]["pools"]] + ["missing-pool"]
    rng = random.Random(9)
    asks = [(rng.choice(pools), f"project-{rng.randrange(3000):05d}") for _ in range(count)]
    status = {p["id"]: p["status"] for p in sections["poolHostInventory"]["pools"]}
    with timed() as t:
        admitted = sum(1 for pool, project in asks if gate.check(pool, project).admitted)
    with timed() as b:
        floor = sum(1 for pool, _ in asks if status.get(pool) == "active")
    res.check(0 < admitted <= floor, "some claims admitted, never one on an inactive pool")
    rate = count / t[0]
    res.figures.append(
        Figure(
            case="claim-gate checks against a cached snapshot",
            value=rate,
            unit="checks/s",
            baseline=count / b[0],
            baseline_label="one dict lookup per claim",
            ratio=rate / (count / b[0]),
            ratio_kind="speed",
            target=f">= {TARGET_CLAIMS:,}/s",
            passed=rate >= TARGET_CLAIMS,
        )
    )
