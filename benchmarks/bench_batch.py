"""Benchmark cli-batch: ``rensei explain-batch`` end to end, as a user runs it.

For each org shape at 1,000 policies (``repo``: mostly repo-scoped, a context matches ~5
policies; ``broad``: many class-, role- and requirement-scoped rules, a context matches ~80),
100,000 contexts (~690 bytes a line) are written to a JSON Lines file and a home holding the
policies as its current revision. Then, interleaved over rounds, medians reported:

* ``rensei explain-batch FILE > out`` (the console script as a subprocess): contexts/s and the
  process's peak RSS (``VmHWM``, read by an ``atexit`` hook inside the CLI process itself, so
  the runner's own memory is never counted);
* ``rensei explain-batch FILE --record > out`` into a fresh copy of the home: contexts/s and
  the database's bytes per stored record (file size after the last connection closed, minus
  the empty home's, over the record count) beside the canonical payload size;
* the floors of each stage, in this process: ``json.loads`` of the lines, the resolver alone
  (``explain_batch`` over already-built contexts, the GC on), writing the output
  (``json.dumps`` of already-built decision dicts to a file), and ``AuditLog.append_many`` of
  the same decisions (one transaction).

Memory flat: the repo shape's file repeated 10x (1,000,000 contexts; 50,000 with ``--quick``),
peak RSS against the 100,000 run. Targets: >= 25,000 contexts/s, >= 12,000/s with
``--record``, peak RSS within 1.2x from 100k to 1M, <= 1.2 KB on disk per record.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing import PolicySnapshot, explain_batch
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .harness import BenchResult, Config, Figure, as_installed_env, progress, timed
from .workload import build_contexts, policy_set

NAME = "cli-batch"
TITLE = "rensei explain-batch end to end vs its stage floors"

TARGET_RATE = 25_000
TARGET_RECORD_RATE = 12_000
TARGET_BYTES = 1_200
TARGET_GROWTH = 1.2
POLICIES = 1_000

#: Runs the CLI and, at exit, writes its own VmHWM (kB) to $RENSEI_BENCH_HWM.
_WRAPPER = (
    "import atexit, os\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(os.environ['RENSEI_BENCH_HWM'], 'w').write(line.split()[1])\n"
    "atexit.register(_hwm)\n"
    "from rensei_routing.cli import cli\n"
    "cli(prog_name='rensei')\n"
)


def _cli(args: list[str], out: Path, tmp: Path) -> tuple[float, float]:
    """Run the CLI with stdout to ``out``; (wall seconds, peak RSS MiB)."""
    hwm = tmp / "hwm"
    env = as_installed_env(RENSEI_BENCH_HWM=str(hwm), RENSEI_ROUTING_LOAD_PLUGINS="")
    with open(out, "wb") as f:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _WRAPPER, *args],
            stdout=f,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"rensei {' '.join(args)} exited {done.returncode}: {done.stderr!r}")
    return seconds, int(hwm.read_text()) / 1024


def _floors(lines: list[bytes], contexts: list[Any], home: Home, tmp: Path) -> dict[str, float]:
    """Seconds of each stage alone over the same data."""
    out: dict[str, float] = {}
    loads = json.loads
    with timed() as t:
        for line in lines:
            loads(line)
    out["json.loads"] = t[0]
    with closing(home.connect()) as conn:
        snapshot = PolicyStore(conn).load().snapshot
    with timed() as t:
        decisions = explain_batch(contexts, snapshot)
    out["resolver"] = t[0]
    dicts = [StampedDecision(d, Freshness.live()).to_dict() for d in decisions]
    dumps = json.dumps
    with timed() as t, open(tmp / "floor.jsonl", "w", encoding="utf-8") as f:
        for d in dicts:
            f.write(dumps(d, ensure_ascii=False, separators=(",", ":")))
            f.write("\n")
    out["write"] = t[0]
    del dicts
    copy = tmp / "floor-home"
    shutil.copytree(home.path, copy)
    stamped = [StampedDecision(d, Freshness.live()) for d in decisions]
    with AuditLog.open(Home(copy)) as log, timed() as t:
        log.append_many(stamped, recorded_at="2026-11-30T10:00:00.000000Z")
    out["append_many"] = t[0]
    shutil.rmtree(copy)
    return out


def _shape(res: BenchResult, shape: str, count: int, rounds: int, tmp: Path) -> float:
    """Measure one org shape; returns the plain run's median peak RSS (MiB)."""
    chosen = policy_set(POLICIES, shape)
    contexts = build_contexts(chosen, count)
    lines = [
        json.dumps(c.to_dict(), separators=(",", ":"), ensure_ascii=False).encode()
        for c in contexts
    ]
    src = tmp / f"{shape}.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    home = Home(tmp / f"{shape}-home")
    home.init(org="bench")
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(chosen.policies, saved_at="2026-11-30T09:00:00.000000Z")
    empty = Home(tmp / "empty-home")
    if not empty.path.exists():
        empty.init(org="bench")
    empty_size = empty.db_path.stat().st_size
    progress(f"{NAME} [{shape}]: stage floors over {count:,} contexts")
    floors = _floors(lines, contexts, home, tmp)
    plain: list[float] = []
    rss: list[float] = []
    record: list[float] = []
    per_record: list[float] = []
    out = tmp / "out.jsonl"
    for i in range(rounds):
        progress(f"{NAME} [{shape}]: round {i + 1}/{rounds}")
        seconds, peak = _cli(["explain-batch", str(src), "--home", str(home.path)], out, tmp)
        plain.append(seconds)
        rss.append(peak)
        if i == 0:
            _check_output(res, out, contexts, home, count)
        rec_home = tmp / "rec-home"
        shutil.copytree(home.path, rec_home)
        seconds, _ = _cli(
            ["explain-batch", str(src), "--record", "--home", str(rec_home)], out, tmp
        )
        record.append(seconds)
        with AuditLog.open(Home(rec_home)) as log:
            stored = log.count()
            payload = statistics.mean(len(r.payload_bytes) for r in log.tail(200))
        res.check(stored == count, f"[{shape}] --record stored one record per context")
        per_record.append((Home(rec_home).db_path.stat().st_size - empty_size) / stored)
        shutil.rmtree(rec_home)
    rate = count / statistics.median(plain)
    rec_rate = count / statistics.median(record)
    floor_rate = {k: count / v for k, v in floors.items()}
    label = f"{shape} org, {POLICIES:,} policies, {count:,} contexts"
    res.figures.append(
        Figure(
            case=f"explain-batch > out ({label})",
            value=rate,
            unit="contexts/s",
            baseline=floor_rate["resolver"],
            baseline_label="resolver alone",
            ratio=rate / floor_rate["resolver"],
            target=f">= {TARGET_RATE:,}/s",
            passed=rate >= TARGET_RATE,
        )
    )
    res.figures.append(
        Figure(
            case=f"explain-batch --record ({shape} org)",
            value=rec_rate,
            unit="contexts/s",
            baseline=floor_rate["append_many"],
            baseline_label="append_many alone",
            ratio=rec_rate / floor_rate["append_many"],
            target=f">= {TARGET_RECORD_RATE:,}/s",
            passed=rec_rate >= TARGET_RECORD_RATE,
        )
    )
    for key, what in (("json.loads", "json.loads of the lines"), ("write", "writing the output")):
        res.figures.append(
            Figure(case=f"  floor: {what} ({shape}, info)", value=floor_rate[key], unit="/s")
        )
    res.figures.append(
        Figure(
            case=f"explain-batch peak RSS ({shape} org, {count:,})",
            value=statistics.median(rss),
            unit="MiB",
        )
    )
    bytes_per = statistics.median(per_record)
    res.figures.append(
        Figure(
            case=f"audit database per record ({shape} org)",
            value=bytes_per,
            unit="bytes",
            baseline=payload,
            baseline_label="canonical payload",
            ratio=bytes_per / payload,
            ratio_kind="time",
            target=f"<= {TARGET_BYTES:,} bytes",
            passed=bytes_per <= TARGET_BYTES,
        )
    )
    res.extra[shape] = {
        "plain_s": plain,
        "record_s": record,
        "rss_mib": rss,
        "bytes_per_record": per_record,
        "floors_s": floors,
        "payload_bytes": payload,
    }
    return statistics.median(rss)


def _check_output(res: BenchResult, out: Path, contexts: list[Any], home: Home, n: int) -> None:
    with closing(home.connect()) as conn:
        snapshot: PolicySnapshot = PolicyStore(conn).load().snapshot
    sample = explain_batch(contexts[:200], snapshot)
    with open(out, encoding="utf-8") as f:
        got = [json.loads(line) for _, line in zip(range(200), f, strict=False)]
    res.check(
        [g["decision_id"] for g in got] == [d.decision_id for d in sample],
        "the CLI's decision ids equal the library's (first 200)",
    )
    with open(out, "rb") as f:
        lines = sum(1 for _ in f)
    res.check(lines == n, "the CLI printed one line per context")


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count = 5_000 if cfg.quick else 100_000
    rounds = 1 if cfg.quick else 3
    with tempfile.TemporaryDirectory(prefix="rensei-bench-batch-") as name:
        tmp = Path(name)
        base_rss = _shape(res, "repo", count, rounds, tmp)
        _shape(res, "broad", count, rounds, tmp)
        big = tmp / "big.jsonl"
        with open(big, "wb") as f:
            data = (tmp / "repo.jsonl").read_bytes()
            for _ in range(10):
                f.write(data)
        progress(f"{NAME}: memory at {10 * count:,} contexts")
        big_seconds, big_rss = _cli(
            ["explain-batch", str(big), "--home", str(tmp / "repo-home")], Path(os.devnull), tmp
        )
        res.figures.append(
            Figure(
                case=f"peak RSS {count:,} -> {10 * count:,} contexts",
                value=big_rss,
                unit="MiB",
                baseline=base_rss,
                baseline_label=f"at {count:,}",
                ratio=big_rss / base_rss,
                ratio_kind="time",
                target=f"<= {TARGET_GROWTH}x growth",
                passed=big_rss / base_rss <= TARGET_GROWTH,
            )
        )
        res.extra["big"] = {"seconds": big_seconds, "rss_mib": big_rss}
    res.notes.append(f"medians of {rounds} interleaved rounds; CLI run as python -c (wrapper)")
    return res
