"""Benchmark 6, policy-validation: ``validate`` of N enabled global policies at one rung and
priority with different actions (every pair an equal-precedence conflict: the worst
case), beside RFC 8785 canonicalisation + SHA-256 of the same policies (one linear pass).

Each size runs in a fresh subprocess (``benchmarks._worker validate N``) that reports the time
of the call and how far it raised the process's resident memory (VmHWM reset before the call).
Targets: 10,000 such policies in under 2 s and under 200 MB.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rensei_routing import canonical_bytes

from ._worker import conflicting_globals
from .harness import BenchResult, Config, Figure, Growth, progress, run_module, timed

NAME = "policy-validation"
TITLE = "validate (all pairs conflicting) vs canonicalise + SHA-256"

TARGET_SIZE = 10_000
TARGET_SECONDS = 2.0
TARGET_MIB = 200.0


def _measure(n: int) -> dict[str, Any]:
    return run_module("benchmarks._worker", "validate", str(n))


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    sizes = (1_000, 2_000) if cfg.quick else (2_000, 4_000, TARGET_SIZE)
    points: dict[str, list[tuple[str, float]]] = {"validate": [], "baseline": []}
    for n in sizes:
        progress(f"{NAME}: {n:,} conflicting policies")
        m = _measure(n)
        res.check(
            bool(m["ok"]),
            f"{n:,} policies: invalid, {m['listed']:,} listed + {m['omitted']:,} counted "
            f"= every one of the {n * (n - 1) // 2:,} pairs",
        )
        documents = [p.to_dict() for p in conflicting_globals(n)]
        with timed() as t:
            hashlib.sha256(canonical_bytes(documents)).hexdigest()
        base = t[0]
        seconds = float(m["seconds"])
        grew = (float(m["rss_peak_kib"]) - float(m["rss_before_kib"])) / 1024
        target = n == TARGET_SIZE
        res.figures.append(
            Figure(
                case=f"validate {n:,} conflicting policies",
                value=seconds * 1e3,
                unit="ms",
                baseline=base * 1e3,
                baseline_label="canonicalise + SHA-256",
                ratio=seconds / base,
                ratio_kind="time",
                target=f"< {TARGET_SECONDS:.0f} s" if target else "",
                passed=seconds < TARGET_SECONDS if target else None,
            )
        )
        res.figures.append(
            Figure(
                case=f"validate {n:,} conflicting policies, RSS growth during the call",
                value=grew,
                unit="MiB",
                target=f"< {TARGET_MIB:.0f} MB" if target else "",
                passed=grew * 1.048576 < TARGET_MIB if target else None,
                note=f"process peak {float(m['rss_peak_kib']) / 1024:.1f} MiB",
            )
        )
        points["validate"].append((f"{n:,}", seconds / n * 1e6))
        points["baseline"].append((f"{n:,}", base / n * 1e6))
        res.extra[str(n)] = {**m, "baseline_s": base}
    res.growth.append(Growth(what="validate time per policy", unit="us", points=points["validate"]))
    res.growth.append(
        Growth(what="canonicalise + hash time per policy", unit="us", points=points["baseline"])
    )
    res.notes.append(
        "every pair conflicts, so the report lists 1,000 issues (at most 20 per policy) and "
        "counts the rest; before the cap, 4,000 such policies took 43 s and 2.2 GB"
    )
    return res
