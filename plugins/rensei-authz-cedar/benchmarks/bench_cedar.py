"""Authorization checks per second through the Cedar plugin, against one cached snapshot with
1,000 Cedar policies, beside bare cedarpy calls on the same policies and entities prepared once.

Run from the repository root with the plugin installed:

    .venv/bin/python plugins/rensei-authz-cedar/benchmarks/bench_cedar.py [--quick]

Both sides use the same parsed policy set (ids as authored) and the same entities handle, and
the same requests (principal, action, resource and a context with the snapshot fields). The
plugin's side is the whole decision: the core engine (prepared once per snapshot), the built-in
grant check, the entity check, the fail-closed posture and the combined decision. Batched =
one ``is_authorized_batch`` call (one ``decide`` call) for every request; single = one call per
request. Target: plugin time / bare time < 1.5 in both modes. Exits 1 on a wrong answer (the
Cedar verdicts must agree request for request), never on a missed target.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import cedarpy
from rensei_authz_cedar import AUTHORIZER
from rensei_authz_cedar.engine import entities_of, read_bundle

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.snapshot.authz import AuthorizationEngine, AuthorizationRequest, EntityRef
from rensei_routing.core.snapshot.freshness import Freshness
from rensei_routing.core.snapshot.org import OrgData, compile_sections

TARGET = 1.5
POLICIES = 1_000
POOLS, PROFILES, PROJECTS = 200, 20, 100


def org_document(policies: int) -> dict[str, Any]:
    """An org of 200 pools in 20 profiles, 100 projects, and ``policies`` Cedar policies (one
    in ten a forbid)."""
    profiles = [
        {"id": f"prof-{p}", "pools": [f"pool-{i}" for i in range(POOLS) if i % PROFILES == p]}
        for p in range(PROFILES)
    ]
    grants = [{"profile": f"prof-{j % PROFILES}", "project": f"proj-{j}"} for j in range(PROJECTS)]
    pools = [
        {"id": f"pool-{i}", "status": "active" if i % 17 else "draining"} for i in range(POOLS)
    ]
    cedar = {}
    for k in range(policies):
        project, pool, profile = f"proj-{k % PROJECTS}", f"pool-{k % POOLS}", f"prof-{k % PROFILES}"
        if k % 10 == 0:
            cedar[f"f-{k:04d}"] = (
                f'forbid(principal == Project::"{project}", action == Action::"claim", '
                f'resource == Pool::"{pool}");'
            )
        else:
            cedar[f"p-{k:04d}"] = (
                f'permit(principal == Project::"{project}", action == Action::"claim", '
                f'resource in Profile::"{profile}") when {{ resource.status == "active" }};'
            )
    return {
        "capacityProfiles": {"profiles": profiles, "grants": grants},
        "poolHostInventory": {"pools": pools, "hosts": []},
        "authorization": {"cedarPolicies": cedar, "defaultPermit": False},
    }


def _best(rounds: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    n, rounds = (200, 3) if args.quick else (2_000, 7)
    rng = random.Random(7)

    doc = org_document(POLICIES)
    sections = compile_sections(OrgData.from_dict(doc), PolicySnapshot.from_dict({"policies": []}))
    fresh = Freshness(ruleset_rev="bench@1", age_ms=1_500, degraded=False)
    snapshot = {"rulesetRev": "bench@1", "snapshotAgeMs": 1_500, "degraded": False}
    requests = []
    for _ in range(n):
        project, pool = f"proj-{rng.randrange(PROJECTS)}", f"pool-{rng.randrange(POOLS)}"
        requests.append(
            AuthorizationRequest.build(
                EntityRef(type="Project", id=project),
                EntityRef(type="Action", id="claim"),
                EntityRef(type="Pool", id=pool),
                {"pool": pool, "project": project},
            )
        )

    # the baseline: bare cedarpy, policies and entities prepared once, the same requests
    bundle = read_bundle(sections)
    entities = cedarpy.Entities.from_json_str(json.dumps(entities_of(sections)))
    bare = [
        {
            "principal": {"type": r.principal.type, "id": r.principal.id},
            "action": {"type": "Action", "id": "claim"},
            "resource": {"type": r.resource.type, "id": r.resource.id},
            "context": {**r.context, **snapshot},
        }
        for r in requests
    ]
    engine = AuthorizationEngine([AUTHORIZER])

    def ours(batch: list[AuthorizationRequest]) -> list[Any]:
        return engine.decide(
            batch, ruleset_rev="bench@1", content_hash="c", sections=sections, freshness=fresh
        )

    # correctness: the plugin's Cedar verdict is the engine's, request for request
    expected = [r.allowed for r in cedarpy.is_authorized_batch(bare, bundle.policies, entities)]
    got = [d.outcomes[1].result.allowed for d in ours(requests)]
    if got != expected or all(expected) or not any(expected):
        print("WRONG ANSWER: the plugin's Cedar verdicts differ from bare cedarpy", file=sys.stderr)
        return 1

    figures = []
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "batched",
            lambda: cedarpy.is_authorized_batch(bare, bundle.policies, entities),
            lambda: ours(requests),
        ),
        (
            "single",
            lambda: [cedarpy.is_authorized(b, bundle.policies, entities) for b in bare],
            lambda: [ours([r]) for r in requests],
        ),
    ]
    for case, baseline, plugin in cases:
        base_t, ours_t = float("inf"), float("inf")
        for _ in range(rounds):  # interleaved, so drift on a shared machine hits both sides
            base_t = min(base_t, _best(1, baseline))
            ours_t = min(ours_t, _best(1, plugin))
        ratio = ours_t / base_t
        figures.append(
            {
                "case": case,
                "requests": n,
                "policies": POLICIES,
                "bare_per_s": n / base_t,
                "plugin_per_s": n / ours_t,
                "time_ratio": ratio,
                "target": f"< {TARGET}",
                "passed": ratio < TARGET,
            }
        )
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"Cedar authorization, {POLICIES} policies, {n} requests, best of {rounds}")
        print(f"{'case':<8} {'bare cedarpy/s':>15} {'plugin/s':>12} {'time ratio':>11}  target")
        for f in figures:
            mark = "ok" if f["passed"] else "MISSED"
            print(
                f"{f['case']:<8} {f['bare_per_s']:>15,.0f} {f['plugin_per_s']:>12,.0f} "
                f"{f['time_ratio']:>10.2f}x  {f['target']} {mark}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
