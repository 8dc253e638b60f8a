"""Benchmark, sessions: a heartbeat with 10,000 open sessions on the host (1,000 with --quick),
and listing them.

Baseline, measured in the same run on the same database: one durable SQLite write (a one-row
``UPDATE`` of the sessions table in its own ``BEGIN IMMEDIATE`` transaction, ``synchronous=FULL``
as every write connection of a home has), on a connection held open. Targets: a
heartbeat (lapsed-lease sweep, the session read, the revocation check against the verified
cached snapshot, the lease renewal, commit) costs at most 1.25x that write; listing every session
(read and render, what ``rensei host session list`` does after start-up) under 0.2 s.
"""

from __future__ import annotations

import random
import statistics
import tempfile
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rensei_routing import signing
from rensei_routing.core.snapshot.envelope import seal
from rensei_routing.host.cache import HostCache
from rensei_routing.host.sessions import HostSessions, epoch_ms
from rensei_routing.store.home import Home
from rensei_routing.store.sessions import SessionStore

from .harness import BenchResult, Config, Figure, progress, timed

NAME = "sessions"
TITLE = "session heartbeat vs one durable SQLite write; session list"

TARGET_HEARTBEAT = 1.25
TARGET_LIST_S = 0.2
CONTROL = signing.PrivateKey(bytes(range(32)))
NOW = datetime.now(UTC).replace(microsecond=0)


def _home(tmp: Path, sessions: int) -> tuple[Home, HostCache, list[str]]:
    home = Home(tmp / "host")
    home.init()
    cache = HostCache(tmp / "host" / "host")
    cache.trust(CONTROL.public_key)
    sections = {
        "poolHostInventory": {"pools": [{"id": "pool-a", "status": "active"}], "hosts": []},
        "capacityProfiles": {
            "profiles": [{"id": "g", "pools": ["pool-a"]}],
            "grants": [{"profile": "g"}],
        },
    }
    snap = seal(
        org_id="org_bench",
        revision=1,
        compiled_at=NOW.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections=sections,
        signing_key_id=CONTROL.public_key.key_id,
        sign=CONTROL.sign,
    )
    cache.accept(snap.to_bytes(), now=NOW, source="bench")
    ids = [f"sess_{i:032x}" for i in range(sessions)]
    now_ms = epoch_ms(NOW)
    with closing(home.connect(write=True)) as conn, conn:
        store = SessionStore(conn)
        for i, sid in enumerate(ids):
            rid = f"rcpt_{i:032x}"
            store.add_receipt(
                receipt_id=rid,
                pool="pool-a",
                project=f"project-{i % 50}",
                ruleset_rev="org_bench@1",
                admitted_ms=now_ms,
                lease_ms=3_600_000,
                body=b"{}",
            )
            store.start(
                session_id=sid,
                receipt_id=rid,
                pool="pool-a",
                project=f"project-{i % 50}",
                ruleset_rev="org_bench@1",
                on_revoke="finish",
                now_ms=now_ms,
                lease_ms=3_600_000,
            )
    return home, cache, ids


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    count, beats = (1_000, 100) if cfg.quick else (10_000, 400)
    progress(f"{NAME}: {count:,} open sessions, {beats} heartbeats")
    rng = random.Random(24)
    with tempfile.TemporaryDirectory(prefix="rensei-bench-sessions-") as tmp:
        home, cache, ids = _home(Path(tmp), count)
        beat_s: list[float] = []
        base_s: list[float] = []
        with HostSessions(home, cache) as sessions, closing(home.connect(write=True)) as conn:
            sessions.heartbeat(ids[0], now=NOW)  # the log and the snapshot memo warm once
            for n in range(beats):  # interleaved, so both see the same machine
                sid = rng.choice(ids)
                at = NOW + timedelta(milliseconds=n)
                with timed() as t, conn:
                    conn.execute(
                        "UPDATE sessions SET heartbeat_ms = ? WHERE session_id = ?",
                        (epoch_ms(at), sid),
                    )
                base_s.append(t[0])
                with timed() as t:
                    beat = sessions.heartbeat(sid, now=at)
                beat_s.append(t[0])
            res.check(beat.action == "continue", "heartbeats continue")
            list_s: list[float] = []
            for _ in range(3):
                with timed() as t:
                    rows = sessions.sessions()
                    now_ms = epoch_ms(NOW)
                    lines = [
                        f"{r.session_id}  {r.state_at(now_ms):<7}  pool {r.pool}  project "
                        f"{r.project or '-'}  {r.ruleset_rev}"
                        for r in rows
                    ]
                list_s.append(t[0])
            res.check(len(lines) == count, "every session listed")
    beat, base = statistics.median(beat_s), statistics.median(base_s)
    ratio = beat / base
    res.figures.append(
        Figure(
            case=f"heartbeat, {count:,} open sessions",
            value=beat * 1000,
            unit="ms",
            baseline=base * 1000,
            baseline_label="one durable one-row UPDATE",
            ratio=ratio,
            ratio_kind="cost",
            target=f"<= {TARGET_HEARTBEAT}x",
            passed=ratio <= TARGET_HEARTBEAT,
        )
    )
    listed = min(list_s)
    res.figures.append(
        Figure(
            case=f"session list, {count:,} sessions (read + render)",
            value=listed,
            unit="s",
            target=f"< {TARGET_LIST_S} s",
            passed=listed < TARGET_LIST_S,
        )
    )
    return res
