"""The benchmark command line: pick benchmarks, run them, print the table, write the JSON file.

A ``--quick`` run measures at smoke sizes, which no target is stated for: its table prints
every target as not applicable, and its count of missed targets is 0.

Exit status: 0 when every selected benchmark ran and every correctness check held, whether or
not targets were met (missing a target is reported, not fatal); 1 when a benchmark crashed or
produced a wrong answer; 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from . import (
    bench_append,
    bench_batch,
    bench_cli,
    bench_enforce,
    bench_fleet,
    bench_interop,
    bench_live,
    bench_live_record,
    bench_policies,
    bench_replay,
    bench_resolution,
    bench_sessions,
    bench_shadow,
    bench_snapshot,
    bench_tree,
    bench_ui,
    bench_validation,
    bench_verify,
)
from .harness import BenchResult, CheckError, Config, format_table, machine_info

__all__ = ["BENCHMARKS", "DEFAULT_OUT", "main"]

#: Every benchmark, in run order.
BENCHMARKS: tuple[ModuleType, ...] = (
    bench_resolution,
    bench_live,
    bench_append,
    bench_verify,
    bench_policies,
    bench_validation,
    bench_cli,
    bench_shadow,
    bench_snapshot,
    bench_sessions,
    bench_replay,
    bench_batch,
    bench_interop,
    bench_fleet,
    bench_ui,
    bench_enforce,
    bench_live_record,
    bench_tree,
)
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"


def _parser() -> argparse.ArgumentParser:
    names = [b.NAME for b in BENCHMARKS]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Throughput of rensei-routing beside baselines measured in the same run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke sizes (CI: checks the benchmarks run)"
    )
    parser.add_argument(
        "--large", action="store_true", help="add the optional large sizes (10M-record verify)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=names, metavar="NAME", help=f"run only these: {names}"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="JSON result file (default: benchmarks/results/latest.json)",
    )
    return parser


def _run_one(bench: ModuleType, cfg: Config) -> BenchResult:
    start = time.perf_counter()
    try:
        res: BenchResult = bench.run(cfg)
    except CheckError as e:
        res = BenchResult(name=bench.NAME, title=bench.TITLE, error=f"WRONG ANSWER: {e}")
    except Exception:
        res = BenchResult(name=bench.NAME, title=bench.TITLE, error=traceback.format_exc())
    res.seconds = time.perf_counter() - start
    return res


def _targets(results: Sequence[BenchResult]) -> list[dict[str, Any]]:
    return [
        {
            "benchmark": r.name,
            "case": f.case,
            "target": f.target,
            "passed": f.passed,
            "value": f.value,
            "unit": f.unit,
            "ratio": f.ratio,
        }
        for r in results
        for f in r.figures
        if f.passed is not None
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cfg = Config(quick=args.quick, large=args.large)
    selected = [b for b in BENCHMARKS if args.only is None or b.NAME in args.only]
    machine = machine_info()
    mode = "quick" if cfg.quick else ("full + large" if cfg.large else "full")
    print(
        f"rensei-routing benchmarks ({mode}) on {machine['cpu']}, "
        f"{machine['cpu_count']} CPUs, Python {machine['python']}, SQLite {machine['sqlite']}",
        file=sys.stderr,
        flush=True,
    )
    started = time.perf_counter()
    results: list[BenchResult] = []
    for i, bench in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {bench.NAME}: {bench.TITLE}", file=sys.stderr, flush=True)
        res = _run_one(bench, cfg)
        if cfg.quick:  # every target is stated for a full run's sizes
            for fig in res.figures:
                fig.not_applicable()
        if res.error:
            print(f"  !! {bench.NAME} failed:\n{res.error}", file=sys.stderr, flush=True)
        else:
            print(f"  ok in {res.seconds:.1f} s", file=sys.stderr, flush=True)
        results.append(res)
    total = time.perf_counter() - started
    machine["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    failed = [r.name for r in results if r.error]
    missed = [t for t in _targets(results) if t["passed"] is False]
    doc = {
        "format": 1,
        "command": " ".join(["python -m benchmarks", *(sys.argv[1:] if argv is None else argv)]),
        "mode": mode,
        "machine": machine,
        "seconds": total,
        "ok": not failed,
        "targets": _targets(results),
        "benchmarks": [r.to_dict() for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(format_table(results))
    print()
    print(
        f"{len(results)} benchmark(s) in {total:.1f} s; targets missed: {len(missed)}; "
        f"failed: {', '.join(failed) or 'none'}; results in {args.out}"
    )
    return 1 if failed else 0
