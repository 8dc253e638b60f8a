"""Benchmark 13, ui: the time of every console page on a home of 1,000,000 shadow records
(``--quick``: 20,000), beside in-run baselines.

The home: the shipped HydraFlow sample's spawns (3,000 distinct) explained once by the shadow
recorder, then appended in batches of 10,000 through the recorder's own indexed append (the
shadow index kept in the same transaction), their times spread over 30 days. Each page is built
by the console's WSGI app in this process (read-only connections, as ``rensei ui`` serves it;
no HTTP, no background verification running): the median of 5 requests after one warm-up.
Target: every page under 300 ms. Baselines: ``SELECT count(*) FROM audit_records``
(what one scan of the chain costs) and a read of one page of 25 records.
"""

from __future__ import annotations

import datetime as dt
import statistics
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing.console.app import make_app
from rensei_routing.console.context import Console
from rensei_routing.console.state import Doctor, Verifier, WhatIfJobs
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.shadow.recorder import ShadowRecorder, _indexed
from rensei_routing.store import shadow_index
from rensei_routing.store.audit import AuditLog

from .bench_shadow import _home, _policies, _registry, _spawns
from .harness import BenchResult, Config, Figure, progress, timed

NAME = "ui"
TITLE = "rensei ui: every console page at 1,000,000 records vs count(*) and a 25-record read"

TARGET_MS = 300.0
BATCH = 10_000
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _build(root: Path, count: int) -> Any:
    current = _policies("policies.json")
    home = _home(root, "ui", current)
    spawns = _spawns(3_000)
    with ShadowRecorder(home, _registry()) as recorder:
        snap, state = recorder.snapshot()
        built = recorder.build_many(spawns, snap, state, recorded_at=format_timestamp(START))
        encoded = [r.canonical() for r in built]
        with AuditLog.open(home) as log:
            done = 0
            while done < count:
                n = min(BATCH, count - done)
                at = START + dt.timedelta(days=30) * done / count
                stamp = format_timestamp(at)
                records = [built[(done + i) % len(built)] for i in range(n)]
                payloads = [encoded[(done + i) % len(built)] for i in range(n)]
                log.append_stamped(_indexed(stamp, records, payloads))
                done += n
                if done % 200_000 == 0:
                    progress(f"{NAME}: {done:,} records appended")
    return home


def _environ(path: str) -> dict[str, Any]:
    p, _, q = path.partition("?")
    return {  # as the loopback console receives it (its Host rule: 127.0.0.1 and the port)
        "REQUEST_METHOD": "GET",
        "PATH_INFO": p,
        "QUERY_STRING": q,
        "HTTP_HOST": "127.0.0.1:8787",
        "SERVER_PORT": "8787",
    }


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count = 20_000 if cfg.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="rensei-bench-ui-") as tmp:
        progress(f"{NAME}: building a home of {count:,} shadow records")
        with timed() as t:
            home = _build(Path(tmp), count)
        res.notes.append(f"home built in {t[0]:.1f} s ({count:,} records, indexed as appended)")
        with closing(home.connect()) as conn:
            indexed = shadow_index.next_seq(conn)
            rare = min(shadow_index.totals(conn), key=lambda fn: fn[1])[0]
            with timed() as t:
                total = conn.execute("SELECT count(*) FROM audit_records").get
            base_count = t[0]
        res.check(indexed == count == total, f"the index covers all {count:,} records")
        with AuditLog.open(home) as log, timed() as t:
            page = list(log.records(start=count - 25, stop=count, newest_first=True))
        base_page = t[0]
        res.check(len(page) == 25, "a 25-record read")
        now = START + dt.timedelta(days=31)
        console = Console(
            home=home,
            clock=lambda: now,
            whatif_dir=None,
            verifier=Verifier(home, lambda: now),
            doctor=Doctor(home, lambda: now),
            whatif=WhatIfJobs(home, lambda: now, DEFAULT_VOCABULARY),
        )
        app = make_app(console)
        pages = [
            "/",
            "/shadow",
            "/shadow?since=7d",
            "/shadow?since=30d",
            f"/shadow?repo={rare.repo}&role={rare.role}",
            "/divergences",
            "/divergences?by=repo&value=" + rare.repo + "&kind=" + rare.divergence,
            f"/divergences?by=seam&value={rare.seam}&kind=direct-http&since=7d",
            f"/divergences?by=role&value={rare.role}&kind=none&before={count // 2}",
            f"/decision/{count // 2}",
            "/policies",
            "/audit",
            f"/audit?before={count // 2}",
            "/whatif",
        ]
        statuses: list[str] = []

        def start(status: str, headers: list[tuple[str, str]]) -> None:
            statuses.append(status)

        for path in pages:
            statuses.clear()
            b"".join(app(_environ(path), start))  # warm-up
            times = []
            for _ in range(5):
                with timed() as t:
                    body = b"".join(app(_environ(path), start))
                times.append(t[0])
            res.check(all(s.startswith("200") for s in statuses), f"{path} answers 200")
            res.check(b"</html>" in body, f"{path} is a whole page")
            ms = statistics.median(times) * 1000
            res.figures.append(
                Figure(
                    case=f"GET {path[:60]}",
                    value=ms,
                    unit="ms",
                    baseline=base_count * 1000,
                    baseline_label="count(*)",
                    ratio=ms / (base_count * 1000) if base_count else None,
                    ratio_kind="cost",
                    target=f"< {TARGET_MS:.0f} ms",
                    passed=ms < TARGET_MS,
                )
            )
        res.notes.append(
            f"baselines at {count:,} records: SELECT count(*) {base_count * 1000:.1f} ms, a "
            f"25-record page read {base_page * 1000:.2f} ms; the what-if comparison itself runs "
            "in the background (its page answers at once and reloads until it is done)"
        )
    return res
