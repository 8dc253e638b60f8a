"""The benchmark command line: pick benchmarks, run them, print the table, write the JSON file.

Each benchmark runs in a Python process of its own, started after ``os.sync()`` has written
out what the benchmarks before it left in the page cache: no benchmark inherits another's heap,
caches, open databases or pending disk writes, so a full run measures each as ``--only NAME``
does, whatever ran before it. (``--same-process`` runs them all in this one, for a profiler.)

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
import subprocess
import sys
import tempfile
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
from .harness import (
    BenchResult,
    CheckError,
    Config,
    Figure,
    Growth,
    format_table,
    machine_info,
    subprocess_env,
)

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
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="run every benchmark in this process (for a profiler), not each in its own",
    )
    # A benchmark's own process: run NAME alone and write its result to a JSON file.
    parser.add_argument("--child", nargs=2, metavar=("NAME", "RESULT"), help=argparse.SUPPRESS)
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


def _result_of(doc: dict[str, Any]) -> BenchResult:
    """A :class:`BenchResult` read back from its ``to_dict()`` JSON."""
    return BenchResult(
        **{
            **doc,
            "figures": [Figure(**f) for f in doc["figures"]],
            "growth": [
                Growth(what=g["what"], unit=g["unit"], points=[tuple(p) for p in g["points"]])
                for g in doc["growth"]
            ],
        }
    )


def _run_isolated(bench: ModuleType, cfg: Config) -> BenchResult:
    """``bench`` run in a fresh process (see the module docstring), after ``os.sync()``."""
    if hasattr(os, "sync"):
        os.sync()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rensei-bench-result-") as tmp:
        out = Path(tmp, "result.json")
        flags = [flag for flag, on in (("--quick", cfg.quick), ("--large", cfg.large)) if on]
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", *flags, "--child", bench.NAME, str(out)],
            env=subprocess_env(),
            check=False,
        )
        if out.exists():
            return _result_of(json.loads(out.read_text(encoding="utf-8")))
    return BenchResult(
        name=bench.NAME,
        title=bench.TITLE,
        error=f"its process exited with status {done.returncode} before writing a result",
        seconds=time.perf_counter() - start,
    )


def _child(name: str, out: Path, cfg: Config) -> int:
    """Run the benchmark ``name`` in this process and write its result to ``out``."""
    bench = {b.NAME: b for b in BENCHMARKS}[name]
    res = _run_one(bench, cfg)
    out.write_text(json.dumps(res.to_dict()) + "\n", encoding="utf-8")
    return 0


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
    if args.child:
        if args.child[0] not in {b.NAME for b in BENCHMARKS}:
            _parser().error(f"no benchmark named {args.child[0]!r}")
        return _child(args.child[0], Path(args.child[1]), cfg)
    run = _run_one if args.same_process else _run_isolated
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
        res = run(bench, cfg)
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
