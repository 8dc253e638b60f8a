"""The console's what-if page on a live home and on the quickstart's home: a comparison runs up
to the head it started at and finishes while a writer keeps appending (records appended since
are counted, not chased), comparisons run one at a time in a bounded queue (a candidate asked
for while its job runs is the same job; beyond the queue the page says busy), and the page
offers what the home has evaluated instead of comparing a revision with itself."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.console.state import WHATIF_WAITING, WhatIfJobs
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .console_support import fetch, running_ui, running_ui_process
from .shadow_support import POLICIES, home_with_policies, installed_seams, registry, spawn

__all__ = ["installed_seams"]

STAMP = "2026-03-01T10:00:00.000000Z"
#: The candidate: clients move from Anthropic to the Z.ai harness.
CANDIDATE: dict[str, Any] = {
    "policies": [
        {**POLICIES["policies"][0], "action": {"provider_lock": "zai-harness"}},
        POLICIES["policies"][1],
    ]
}


def _spawns() -> list[Spawn]:
    docs = [
        spawn(principal_id=who, repo=repo, repo_class=kind)
        for who in ("implementer", "planner", "reviewer")
        for repo, kind in (("acme/widgets", "client"), ("hydra/flow", "hydraflow"))
    ]
    return [Spawn.from_dict(d) for d in docs]


def _home(tmp_path: Path, rounds: int) -> Home:
    home = home_with_policies(tmp_path)
    with ShadowRecorder(home, registry(), clock=lambda: STAMP) as rec:
        for _ in range(rounds):
            rec.record_many(_spawns())
    return home


def _head(home: Home) -> int:
    with AuditLog.open(home) as log:
        return log.head()[0]


def _threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def _found(pattern: str, body: bytes) -> int | None:
    m = re.search(pattern.encode(), body)
    return None if m is None else int(m.group(1).replace(b",", b""))


def test_a_comparison_finishes_while_a_writer_appends(tmp_path: Path) -> None:
    """M4: the page polled as its meta refresh does while a writer appends (through the
    recorder's AuditLog) about 20 times a second: one job, compared up to the head it started
    at, done while the chain keeps growing, with the records appended since counted; the
    console's threads stay bounded; compared again it covers the new head, and equals
    `policy whatif` there."""
    home = _home(tmp_path, rounds=1_000)  # 6,000 records
    cands = tmp_path / "cands"
    cands.mkdir()
    (cands / "move.json").write_text(json.dumps(CANDIDATE), encoding="utf-8")
    page = "/whatif?candidate=move.json"
    stop = threading.Event()

    def append() -> None:
        with ShadowRecorder(home, registry(), clock=lambda: STAMP) as rec:
            while not stop.is_set():
                rec.record_many(_spawns()[:1])
                time.sleep(0.05)

    writer = threading.Thread(target=append, name="appender")
    with running_ui_process(home.path, tmp_path / "ui.log", "--whatif-dir", str(cands)) as (
        base,
        proc,
    ):
        time.sleep(1)
        baseline = _threads(proc.pid)
        writer.start()
        try:
            first_head = _head(home)
            seen: list[int] = []
            body = b""
            for _ in range(400):  # up to ~2 minutes on a loaded machine
                status, body = fetch(base + page)
                assert status == 200, body[:300]
                seen.append(_threads(proc.pid))
                if b'id="counters"' in body:
                    break
                time.sleep(0.3)
            assert b'id="counters"' in body, "the comparison never finished beside the writer"
            # one what-if thread at most (plus what the verifier's walk may hold briefly)
            assert max(seen) <= baseline + 3, (baseline, seen)
            fixed = _found(r'id="whatif-stop">(\d+)<', body)
            assert fixed is not None and fixed >= first_head
            assert _found(r'id="whatif-done">([\d,]+) recorded', body) == fixed
        finally:
            stop.set()
            writer.join(30)
        final = _head(home)
        assert final > fixed  # the writer went on after the comparison's head
        status, body = fetch(base + page)
        assert _found(r'id="whatif-stop">(\d+)<', body) == fixed  # the same job, not rerun
        assert _found(r'id="whatif-appended">([\d,]+)<', body) == final - fixed
        again = re.search(rb'<a href="([^"]+)" class="again">', body)
        assert again is not None
        href = again.group(1).decode().replace("&amp;", "&")
        for _ in range(400):
            status, body = fetch(base + href)
            if b'id="counters"' in body:
                break
            time.sleep(0.3)
        assert _found(r'id="whatif-stop">(\d+)<', body) == final
        assert b'id="whatif-appended"' not in body
        changed = _found(r"<td>changed</td><td class=num>([\d,]+)</td>", body)
    cli_out = CliRunner().invoke(
        cli,
        ["--home", str(home.path), "policy", "whatif", str(cands / "move.json"), "--json"],
    )
    doc = json.loads(cli_out.stdout)
    assert doc["contexts"] == final and doc["changed"] == changed and changed > 0


def test_jobs_run_one_at_a_time_in_a_bounded_queue(tmp_path: Path) -> None:
    """Asked for again while it runs, a candidate's job is the same job; other candidates wait
    in a queue of WHATIF_WAITING; beyond it nothing starts (the page says busy); one thread
    runs them all; `again` reruns a finished job once, not on every reload."""
    home = _home(tmp_path, rounds=5)
    gate = threading.Event()
    candidate = PolicySnapshot.from_dict(CANDIDATE)

    def current() -> tuple[PolicySnapshot, str]:
        with closing(home.connect(write=False)) as conn:
            loaded = PolicyStore(conn).load()
        return loaded.snapshot, loaded.state

    def held() -> PolicySnapshot:
        assert gate.wait(60)
        return candidate

    jobs = WhatIfJobs(home, lambda: dt.datetime.now(dt.UTC), DEFAULT_VOCABULARY)
    first = jobs.get("a", current, held)
    assert first is not None
    assert jobs.get("a", current, held) is first
    queued = [jobs.get(label, current, held) for label in "bcd"[:WHATIF_WAITING]]
    assert all(j is not None for j in queued)
    assert jobs.get("e", current, held) is None  # busy: nothing started
    assert jobs.pending() == 1 + WHATIF_WAITING
    assert sum(t.name == "whatif" for t in threading.enumerate()) == 1
    assert all(j is not None and j.started is None for j in queued)  # waiting their turn
    gate.set()
    deadline = time.monotonic() + 60
    while jobs.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    head = _head(home)
    for job in (first, *queued):
        assert job is not None and job.done is not None and job.error is None
        assert job.stop == head and job.summary is not None and job.summary.contexts == head
    assert jobs.get("a", current, held) is first  # done: kept, not rerun
    rerun = jobs.get("a", current, held, again=first.number)
    assert rerun is not None and rerun is not first
    assert jobs.get("a", current, held, again=first.number) is rerun  # a reload: no third
    deadline = time.monotonic() + 60
    while jobs.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rerun.done is not None
    assert not any(t.name == "whatif" for t in threading.enumerate() if t.is_alive())


@pytest.mark.usefixtures("installed_seams")
def test_the_quickstart_home_offers_the_candidate_it_evaluated(tmp_path: Path) -> None:
    """New user 4: on `rensei ui --home .rensei-quickstart` the what-if page shows the
    candidate quickstart evaluated (its figures are quickstart's), and revision 1, the current
    one, is never compared with itself."""
    qs = tmp_path / "qs"
    runner = CliRunner()
    made = runner.invoke(cli, ["quickstart", "--home", str(qs)])
    assert made.exit_code == 0, made.output
    said = re.search(r"What-if: ([\d,]+) recorded contexts", made.stdout)
    changed = re.search(r"changed\s+([\d,]+)", made.stdout)
    assert said is not None and changed is not None
    with running_ui(qs, tmp_path / "ui.log") as base:
        status, body = fetch(base + "/whatif?revision=1")
        assert status == 200
        assert b'id="whatif-same"' in body and b'id="comparing"' not in body
        assert b'href="/whatif?revision=1"' not in body  # not offered as a candidate
        body = b""
        for _ in range(300):
            status, body = fetch(base + "/whatif")
            if b'id="counters"' in body:
                break
            time.sleep(0.3)
        assert b'id="whatif-default"' in body
        assert b"the candidate quickstart evaluated (candidate-policies.json)" in body
        assert _found(r'id="whatif-done">([\d,]+) recorded', body) == int(
            said.group(1).replace(",", "")
        )
        assert _found(r"<td>changed</td><td class=num>([\d,]+)</td>", body) == int(
            changed.group(1).replace(",", "")
        )
        kept = fetch(base + "/whatif?kept=quickstart")[1]
        assert _found(r'id="whatif-stop">(\d+)<', kept) == 3_000


def test_a_home_with_one_revision_and_no_candidate_says_so(tmp_path: Path) -> None:
    home = _home(tmp_path, rounds=1)
    with running_ui(home.path, tmp_path / "ui.log") as base:
        status, body = fetch(base + "/whatif")
        assert status == 200
        assert b'id="whatif-nothing"' in body and b"only revision 1" in body
        assert b'id="comparing"' not in body
        assert fetch(base + "/whatif?revision=1")[0] == 200
        assert fetch(base + "/whatif?kept=quickstart")[0] == 404
