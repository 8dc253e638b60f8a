"""Benchmark interop: HydraFlow chains in and out.

**Import**: ``audit import --format hydraflow``'s store call (``store.hydraflow.import_chain``:
read the file's lines, verify them by HydraFlow's rule, wrap each record with its origin,
redact, canonicalise, link at its own ``recorded_at``, insert, in one transaction) of a
100,000-record HydraFlow chain, beside our own ``append_many`` of the same payloads at 1,000
per transaction into a fresh database. **Export**: ``audit export --format hydraflow``'s work
(verify our chain, then write every record as a HydraFlow line) beside ``audit export``'s (verify,
then splice the stored bytes), over the same 100,000-record chain. Target: >= 0.5x
for both. The HydraFlow file is written (untimed) by a writer local to this module following
SEMANTICS.md, not by our export.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing.core.audit.archive import export_line as rensei_line
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.files import atomic_write
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.hydraflow import export_lines, import_chain

from .harness import BenchResult, Config, Figure, progress, timed
from .workload import decisions

NAME = "interop"
TITLE = "HydraFlow chain import vs append_many, HydraFlow export vs audit export"

TARGET = 0.5
BATCH = 1_000
ORIGIN = "rensei-routing/bench/interop"
_GENESIS = "sha256:" + "0" * 64


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _hydraflow_file(path: Path, payloads: Sequence[Any], stamps: Sequence[str]) -> None:
    """A HydraFlow chain of ``payloads`` as HydraFlow writes it (SEMANTICS.md)."""
    prev = _GENESIS
    with open(path, "w", encoding="utf-8") as f:
        for seq, payload in enumerate(payloads):
            text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
            p_hash = _sha(text)
            r_hash = _sha(f"{seq}|{prev}|{p_hash}")
            record = {
                "payload": payload,
                "payload_hash": p_hash,
                "prev_hash": prev,
                "record_hash": r_hash,
                "recorded_at": stamps[seq],
                "schema_version": 1,
                "seq": seq,
            }
            f.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
            prev = r_hash


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        yield from f


def _figure(case: str, n: int, lib_s: float, base_s: float, label: str) -> Figure:
    ratio = base_s / lib_s
    return Figure(
        case=case,
        value=n / lib_s,
        unit="records/s",
        baseline=n / base_s,
        baseline_label=label,
        ratio=ratio,
        target=f">= {TARGET}x",
        passed=ratio >= TARGET,
    )


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count = 5_000 if cfg.quick else 100_000
    distinct = tuple(d.to_dict() for d in decisions(500 if cfg.quick else 2_000))
    payloads = [distinct[i % len(distinct)] for i in range(count)]
    base = dt.datetime(2026, 8, 22, 10, 0, tzinfo=dt.UTC)
    # One stamp per batch: what append_many writes, and what the imported records carry.
    stamps = [format_timestamp(base + dt.timedelta(seconds=i // BATCH)) for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="rensei-bench-interop-") as tmp:
        src = Path(tmp, "shadow-decisions.jsonl")
        progress(f"{NAME}: writing a {count:,}-record HydraFlow chain")
        _hydraflow_file(src, payloads, stamps)
        own = AuditLog(Path(tmp, "own.db"), origin=ORIGIN)
        imported = AuditLog(Path(tmp, "imported.db"), origin=ORIGIN)
        with closing(own), closing(imported):
            own.count()
            imported.count()  # open and migrate both, untimed
            progress(f"{NAME}: append_many of {count:,} at {BATCH:,}/txn")
            with timed() as t:
                for i in range(0, count, BATCH):
                    own.append_many(payloads[i : i + BATCH], recorded_at=stamps[i])
            base_s = t[0]
            progress(f"{NAME}: audit import of {count:,}")
            with timed() as t:
                result = import_chain(imported, lambda: _lines(src), file=str(src))
            lib_s = t[0]
            res.check(result.added.count == count, f"import appended {count:,} records")
            res.check(bool(imported.verify()), "the imported chain verifies")
            res.check(bool(own.verify()), "the appended chain verifies")
            res.figures.append(
                _figure(
                    f"audit import --format hydraflow, {count:,} records",
                    count,
                    lib_s,
                    base_s,
                    f"append_many {BATCH:,}/txn",
                )
            )
            progress(f"{NAME}: export, both formats")
            out_r, out_h = Path(tmp, "rensei.jsonl"), Path(tmp, "hydraflow.jsonl")
            with timed() as t:
                verdict = own.verify()
                atomic_write(out_r, (rensei_line(r) for r in own.records(stop=count)))
            base_s = t[0]
            with timed() as t:
                verdict = own.verify()
                lines = export_lines(own, start=0, stop=verdict.records_checked)
                atomic_write(out_h, (x.encode("ascii") for x in lines))
            lib_s = t[0]
            res.check(_verifies(out_h, count), "the HydraFlow export verifies by HydraFlow's rule")
            res.figures.append(
                _figure(
                    f"audit export --format hydraflow, {count:,} records",
                    count,
                    lib_s,
                    base_s,
                    "audit export",
                )
            )
    res.notes.append(
        f"payloads: {len(distinct):,} distinct RouteDecision.to_dict() values cycled to "
        f"{count:,}; both export sides include the verify that `audit export` runs first"
    )
    return res


def _verifies(path: Path, count: int) -> bool:
    prev, n = _GENESIS, 0
    for line in _lines(path):
        rec = json.loads(line)
        text = json.dumps(rec["payload"], sort_keys=True, separators=(",", ":"))
        p_hash = _sha(text)
        if (
            rec["seq"] != n
            or rec["prev_hash"] != prev
            or p_hash != rec["payload_hash"]
            or _sha(f"{n}|{prev}|{p_hash}") != rec["record_hash"]
        ):
            return False
        prev, n = rec["record_hash"], n + 1
    return n == count
