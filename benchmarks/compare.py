"""A/B of ``explain_batch`` between another checkout and this one, in CPU time.

On a shared machine wall-clock rates move by 2x between runs; CPU time of the resolving process,
with the two checkouts' runs interleaved, is what a before/after comparison can rely on.

    git archive <commit> rensei_routing benchmarks | tar -x -C /tmp/before
    python -m benchmarks.compare /tmp/before [--sizes 10 100 1000 10000] [--rounds 3] [--gc-paused]

Each round runs one fresh subprocess per checkout (``PYTHONPATH`` = that checkout) that builds
the benchmark's policy set and three 10,000-context batches (``benchmarks.workload``, seeded, so
both sides resolve the same inputs) and prints its best rate in decisions per CPU-second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

_CHILD = r"""
import gc, sys, time
from benchmarks.workload import build_contexts, policy_set
from rensei_routing import PolicySnapshot, explain_batch
ps = policy_set(int(sys.argv[1]))
snapshot = PolicySnapshot.of(ps.policies)
batches = [build_contexts(ps, 10_000, seed=seed) for seed in range(3)]
if sys.argv[2] == "paused":
    gc.collect()
    gc.disable()
best = float("inf")
for contexts in batches:
    start = time.process_time()
    explain_batch(contexts, snapshot)
    best = min(best, time.process_time() - start)
print(10_000 / best)
"""


def _rate(checkout: Path, size: int, gc_mode: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size), gc_mode],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr.strip()}")
    return float(done.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("before", type=Path, help="a checkout holding rensei_routing/, benchmarks/")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--gc-paused",
        action="store_true",
        help="pause the garbage collector while timing (it adds +-20%% noise between runs)",
    )
    args = parser.parse_args(argv)
    print(f"{'policies':>9}  {'before /cpu-s':>14}  {'after /cpu-s':>13}  after/before")
    for size in args.sizes:
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            mode = "paused" if args.gc_paused else "on"
            rates["before"].append(_rate(args.before.resolve(), size, mode))
            rates["after"].append(_rate(HERE, size, mode))
        before, after = (statistics.median(rates[k]) for k in ("before", "after"))
        print(f"{size:>9,}  {before:>14,.0f}  {after:>13,.0f}  {after / before:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
