"""Where the time goes: cProfile of each measured library call, on the benchmarks' own inputs.

    python -m benchmarks.hotspots [NAME ...] [--top N]

NAME is one of resolution, append, verify, load (default: all). Sizes are smaller than the
benchmarks' (a profiler slows Python code down several times) but the inputs are the same.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pstats
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from rensei_routing import PolicySnapshot, explain_batch
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.db import connect
from rensei_routing.store.policies import PolicyStore

from .workload import build_contexts, decision_payloads, policy_set

ORIGIN = "rensei-routing/bench/audit"
_STAMP = format_timestamp(dt.datetime(2025, 6, 1, tzinfo=dt.UTC))


def _listing(prof: cProfile.Profile, key: str, top: int) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).strip_dirs().sort_stats(key).print_stats(top)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    keep = [line for line in lines if "Ordered by" not in line and "List reduced" not in line]
    return "\n".join(keep)


def _profile(title: str, fn: Callable[[], object], top: int) -> str:
    """cProfile ``fn`` once; the top functions by own time, then by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    by_own = _listing(prof, "tottime", top)
    by_cumulative = _listing(prof, "cumulative", top).split("\n", 1)[1]
    return f"== {title}\n-- by own time\n{by_own}\n-- by cumulative time\n{by_cumulative}\n"


def resolution(top: int, tmp: Path) -> str:
    chosen = policy_set(1_000)
    contexts = build_contexts(chosen, 20_000)
    snapshot = PolicySnapshot.of(chosen.policies, revision=1)
    return _profile(
        "explain_batch: 20,000 contexts, 1,000 policies, default trace",
        lambda: explain_batch(contexts, snapshot),
        top,
    )


def append(top: int, tmp: Path) -> str:
    payloads = decision_payloads(2_000)
    log = AuditLog(tmp / "append.db", origin=ORIGIN)
    with closing(log):
        log.append(payloads[0], recorded_at=_STAMP)

        def go() -> None:
            for k in range(20):
                log.append_many(payloads[k * 100 : (k + 1) * 100], recorded_at=_STAMP)

        return _profile("append_many: 20 transactions of 100 decision payloads", go, top)


def verify(top: int, tmp: Path) -> str:
    payloads = decision_payloads(2_000)
    path = tmp / "verify.db"
    with AuditLog(path, origin=ORIGIN) as log:
        for _ in range(10):
            log.append_many(payloads, recorded_at=_STAMP)
    with AuditLog(path, origin=ORIGIN) as log:
        log.head()
        return _profile("AuditLog.verify(): 20,000 records", log.verify, top)


def load(top: int, tmp: Path) -> str:
    chosen = policy_set(10_000)
    path = tmp / "policies.db"
    with closing(connect(path, write=True)) as conn:
        PolicyStore(conn).save(chosen.policies, saved_at=_STAMP)
    with closing(connect(path)) as conn:
        return _profile("PolicyStore.load(): 10,000 policies", PolicyStore(conn).load, top)


PROFILES = {"resolution": resolution, "append": append, "verify": verify, "load": load}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hotspots")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {list(PROFILES)}")
    parser.add_argument("--top", type=int, default=12, help="functions to list (by own time)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PROFILES]
    if unknown:
        parser.error(f"unknown profile(s) {unknown}; choose from {list(PROFILES)}")
    with tempfile.TemporaryDirectory(prefix="rensei-bench-profile-") as tmp:
        for name in args.names or PROFILES:
            print(PROFILES[name](args.top, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
