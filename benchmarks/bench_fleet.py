"""Benchmark, fleet: ``rensei fleet ingest`` and ``rensei fleet report`` on a throwaway
PostgreSQL cluster, beside PostgreSQL's own ``COPY`` of the same rows.

* Ingest: 50 hosts x 20,000 records (5 x 2,000 with --quick), each host a real audit export
  (shadow records built by the recorder from the HydraFlow sample spawns, linked into a chain
  and written by the archive writer, ``export_line``) with a checkpoint signed by the host's
  own key; ``ingest_paths`` verifies and loads every file (one transaction each). Baseline: the
  same rows, already in COPY text form in one file per host, loaded by ``COPY`` into a table of
  the same shape (``fleet_records``: the same columns, generated columns, storage and primary
  key) in another database of the same cluster, one transaction per host. Target: >= 0.5x.
* Report: ``fleet_report`` over the 1,000,000 ingested records (10,000 with --quick): the
  agreement by host, repo, role, mechanism and seam and the hosts' state (summed from the
  per-group counts each ingest adds to; checked equal to a scan of the records). Target:
  < 2 s. The figure is the median of three runs after a first one (shown apart).

The cluster runs with ``fsync=off`` (a throwaway cluster), for both sides alike.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import statistics
import tempfile
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rensei_routing import PolicySnapshot, signing
from rensei_routing.core.audit.archive import export_line
from rensei_routing.core.audit.chain import (
    GENESIS_HASH,
    STRICT_PAYLOADS,
    AuditRecord,
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    encode_payloads,
    link_rows,
    note_key_hash,
)
from rensei_routing.core.shadow.compare import Seam
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.plugins.manager import SeamRegistry
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home

from .harness import REPO_ROOT, BenchResult, Config, Figure, progress, timed

NAME = "fleet"
TITLE = "fleet ingest vs PostgreSQL COPY of the same rows; fleet report over the records"

SAMPLES = REPO_ROOT / "plugins" / "rensei-seams-hydraflow" / "samples"
INGEST_TARGET = 0.5
REPORT_TARGET_S = 2.0
POOL = 10_000
ORIGIN = checkpoint_origin("local")
_AGENTIC = ("default", "role-dial", "fleet-ratchet", "repo-provider", "credit-failover")
_DIALLED = ("maintenance-default", "role-dial", "fleet-ratchet")
SEAMS = (
    Seam(name="agentic-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="subprocess-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="lightweight-agent", request_face="one-shot", stages=_DIALLED),
    Seam(name="streaming-agent", request_face="agentic", stages=_DIALLED),
)


def _payloads(tmp: Path, count: int) -> list[bytes]:
    """``count`` stored shadow-record payloads, built by the recorder from sample spawns."""
    spec = importlib.util.spec_from_file_location("generate_spawns", SAMPLES / "generate_spawns.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    spawns = [Spawn.from_dict(json.loads(line)) for line in gen.generate(count).splitlines()]
    policies = PolicySnapshot.from_dict(
        json.loads((SAMPLES / "policies.json").read_text(encoding="utf-8"))
    )
    home = Home(tmp / "pool")
    home.init()
    registry = SeamRegistry(
        MappingProxyType({s.name: s for s in SEAMS}),
        MappingProxyType({s.name: "bench" for s in SEAMS}),
    )
    with ShadowRecorder(home, registry, clock=lambda: "2026-01-01T00:00:00.000000Z") as rec:
        records = rec.build_many(spawns, policies, "ok", recorded_at="2026-01-01T00:00:00.000000Z")
    return encode_payloads(records)


def _host_files(
    out: Path, base: Path, index: int, records: int, pool: list[bytes]
) -> tuple[signing.PrivateKey, str]:
    """One host's export and checkpoint in ``out``, and the same rows as COPY text in ``base``;
    the host's key and head hash."""
    key = signing.generate()
    host = f"host-{index:03d}"
    offset = index * 211
    payloads = (pool[(offset + i) % len(pool)] for i in range(records))
    stamp = f"2026-06-01T00:{index // 60:02d}:{index % 60:02d}.000000Z"
    rows = link_rows(payloads, seq=0, prev_hash=GENESIS_HASH, recorded_at=stamp)
    with open(out / f"{host}.jsonl", "wb") as f, open(base / f"{host}.copy", "wb") as b:
        for row in rows:
            f.write(export_line(AuditRecord.from_row(row)))
            seq, at, prev, p_hash, r_hash, data = row
            b.write(
                b"%s\t%d\t%s\t%s\t%s\t%s\t%s\n"
                % (
                    host.encode(),
                    seq,
                    at.encode(),
                    prev.encode(),
                    p_hash.encode(),
                    r_hash.encode(),
                    data.replace(b"\\", b"\\\\"),
                )
            )
    head = rows[-1][4] if rows else GENESIS_HASH
    cp = Checkpoint(origin=ORIGIN, size=records, head_hash=head, extensions=(STRICT_PAYLOADS,))
    kh = note_key_hash(ORIGIN, key.public_key.raw)
    cp = cp.with_signature(NoteSignature(name=ORIGIN, key_hash=kh, signature=key.sign(cp.body)))
    (out / f"{host}.checkpoint").write_text(cp.to_text(), encoding="utf-8")
    return key, head


def _baseline(url: str, base: Path) -> float:
    """COPY of every host's rows into a fleet_records table, one transaction per host."""
    from rensei_routing.fleet.db import connect

    with connect(url) as conn:
        with timed() as t:
            for path in sorted(base.glob("*.copy")):
                with (
                    conn.transaction(),
                    open(path, "rb") as f,
                    conn.cursor().copy(
                        "COPY fleet_records (host_id, seq, recorded_at, prev_hash, payload_hash, "
                        "record_hash, payload) FROM STDIN"
                    ) as copy,
                ):
                    while chunk := f.read(1024 * 1024):
                        copy.write(chunk)
        return t[0]


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    try:
        import psycopg  # noqa: F401

        from rensei_routing.ops.pgcluster import PostgresUnavailable, throwaway_cluster
    except ImportError:
        res.notes.append(
            "skipped: psycopg is not installed (pip install 'rensei-routing[postgres]')"
        )
        return res
    hosts, records = (5, 2_000) if cfg.quick else (50, 20_000)
    total = hosts * records
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        out, base = tmp / "exports", tmp / "copy"
        out.mkdir()
        base.mkdir()
        progress(f"{NAME}: building {hosts} hosts x {records:,} records of audit exports")
        pool = _payloads(tmp, min(POOL, records))
        keys = [_host_files(out, base, i, records, pool) for i in range(hosts)]
        try:
            cluster_cm = throwaway_cluster()
            cluster = cluster_cm.__enter__()
        except PostgresUnavailable as e:
            res.notes.append(f"skipped: {e}")
            return res
        try:
            _measure(res, cluster, out, base, keys, hosts, records, total)
        finally:
            cluster_cm.__exit__(None, None, None)
    return res


def _measure(
    res: BenchResult,
    cluster: Any,
    out: Path,
    base: Path,
    keys: list[tuple[signing.PrivateKey, str]],
    hosts: int,
    records: int,
    total: int,
) -> None:
    import psycopg

    from rensei_routing.errors import FleetError
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.ingest import IngestResult, ingest_paths
    from rensei_routing.fleet.report import fleet_report
    from rensei_routing.fleet.trust import trust_host

    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute('CREATE DATABASE "fleet"')
        admin.execute('CREATE DATABASE "baseline"')
    url, base_url = cluster.url_for("fleet"), cluster.url_for("baseline")
    progress(f"{NAME}: baseline COPY of {total:,} rows")
    base_s = _baseline(base_url, base)
    with connect(url) as conn:
        for i, (key, _) in enumerate(keys):
            trust_host(conn, f"host-{i:03d}", key.public_key)
        progress(f"{NAME}: fleet ingest of {hosts} exports")
        with timed() as t:
            outcomes = ingest_paths(conn, [out])
        ours_s = t[0]
        added = sum(o.added for _, o in outcomes if isinstance(o, IngestResult))
        refused = [str(o) for _, o in outcomes if isinstance(o, FleetError)]
        res.check(not refused and added == total, f"every export verified and loaded ({added:,})")
        heads = conn.execute("SELECT host_id, size, head_hash FROM fleet_hosts ORDER BY 1")
        expected = [(f"host-{i:03d}", records, head) for i, (_, head) in enumerate(keys)]
        res.check(heads.fetchall() == expected, "each host's head and size are its export's")
        again = ingest_paths(conn, [out / "host-000.jsonl"])
        res.check(
            isinstance(again[0][1], IngestResult) and again[0][1].added == 0,
            "a re-ingest adds nothing",
        )
        with psycopg.connect(base_url) as b:
            n = b.execute("SELECT count(*) FROM fleet_records").fetchone()
        res.check(n == (total,), f"the baseline holds the same {total:,} rows")
        ratio = base_s / ours_s
        res.figures.append(
            Figure(
                case=f"fleet ingest, {hosts} hosts x {records:,} records",
                value=total / ours_s,
                unit="records/s",
                baseline=total / base_s,
                baseline_label="COPY of the same rows, same table",
                ratio=ratio,
                target=f">= {INGEST_TARGET}x",
                passed=ratio >= INGEST_TARGET,
                note=f"ingest {ours_s:.1f} s (verify + COPY), COPY alone {base_s:.1f} s",
            )
        )
        progress(f"{NAME}: fleet report over {total:,} records")
        with timed() as t:
            first = fleet_report(conn, stale_after=dt.timedelta(hours=1))
        cold = t[0]
        runs = []
        for _ in range(3):
            with timed() as t:
                report = fleet_report(conn, stale_after=dt.timedelta(hours=1))
            runs.append(t[0])
        res.check(
            report.total.spawns == first.total.spawns == total
            and sum(r.spawns for r in report.groups["host"]) == total
            and len(report.hosts) == hosts,
            f"the report counts {total:,} shadow records over {hosts} hosts",
        )
        scanned = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE agreed), count(DISTINCT seam) "
            "FROM fleet_records WHERE record_type = 'shadow-decision'"
        ).fetchone()
        res.check(
            scanned == (report.total.spawns, report.total.agreed, len(report.groups["seam"])),
            "the report's counts equal a scan of the records",
        )
        median = statistics.median(runs)
        res.figures.append(
            Figure(
                case=f"fleet report, {total:,} records",
                value=median,
                unit="s",
                target=f"< {REPORT_TARGET_S} s",
                passed=median < REPORT_TARGET_S,
                note=f"median of 3; the first run after the load took {cold:.2f} s",
            )
        )
