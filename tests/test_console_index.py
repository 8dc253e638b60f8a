"""The shadow index the console reads (store/shadow_index.py, schema step 5): the recorder keeps
it in the transaction that appends its records, records appended by other writers are caught up
(by the next recorder append, or `rensei shadow index`), and the figures read from it equal the
ones `shadow report` counts by walking the chain. Also the console's since window (exact to the
microsecond, not rounded to the hour)."""

from __future__ import annotations

import datetime as dt
from contextlib import closing
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.shadow.compare import ShadowDecision, is_shadow_payload
from rensei_routing.core.shadow.report import GROUPINGS, ShadowReport
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store import shadow_index
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .shadow_support import home_with_policies, registry, spawn

STAMPS = ["2026-02-03T04:05:06.000007Z", "2026-02-03T04:40:00.000000Z", "2026-02-04T10:00:00.5Z"]


def _spawns() -> list[Spawn]:
    docs = [
        spawn(),
        spawn(repo="hydra/flow", repo_class="hydraflow", principal_id="reviewer"),
        spawn(stages=[{"mechanism": "default", "provider": "zai"}], account_id="zai-main"),
        spawn(principal_id="planner", model="claude-opus-4-1"),
    ]
    return [Spawn.from_dict(d) for d in docs]


def _chain_report(home: Home, by: str | None) -> ShadowReport:
    """What `shadow report` counts: every shadow record of the chain, parsed."""
    report = ShadowReport(by)
    with AuditLog.open(home) as log:
        for record in log.records():
            if is_shadow_payload(record.payload):
                report.add(ShadowDecision.from_dict(record.payload, redacted=True))
    return report


def _index_report(home: Home, by: str | None) -> ShadowReport:
    report = ShadowReport(by)
    with closing(home.connect()) as conn:
        for fact, n in shadow_index.totals(conn):
            report.add_fact(fact, n)
    return report


def _record(home: Home, stamp: str, times: int = 1) -> None:
    with ShadowRecorder(home, registry(), clock=lambda: stamp) as recorder:
        for _ in range(times):
            recorder.record_many(_spawns())


def test_the_recorder_indexes_what_it_appends(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    for stamp in STAMPS:
        _record(home, stamp, times=2)
    with ShadowRecorder(home, registry(), clock=lambda: STAMPS[0]) as recorder:
        recorder.record(_spawns()[1])  # the single-record path too
    with closing(home.connect()) as conn:
        assert shadow_index.next_seq(conn) == 25
    for by in (None, *GROUPINGS):
        assert _index_report(home, by).rows() == _chain_report(home, by).rows()
    assert _index_report(home, None).total.spawns == 25


def test_records_of_other_writers_are_caught_up(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with ShadowRecorder(home, registry(), clock=lambda: STAMPS[0]) as recorder:
        built = recorder.build_many(_spawns(), *recorder.snapshot(), recorded_at=STAMPS[0])
    with AuditLog.open(home) as log:  # shadow records appended without the recorder
        log.append_many(built, recorded_at=STAMPS[0])
        log.append({"not": "a shadow record"}, recorded_at=STAMPS[0])
    with closing(home.connect()) as conn:
        assert shadow_index.next_seq(conn) == 0  # nothing indexed them
    _record(home, STAMPS[1])  # the recorder catches up first, then indexes its own
    with closing(home.connect()) as conn:
        assert shadow_index.next_seq(conn) == 9
    assert _index_report(home, "repo").rows() == _chain_report(home, "repo").rows()
    assert _index_report(home, None).total.spawns == 8


def test_shadow_index_command_indexes_an_unindexed_chain(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with ShadowRecorder(home, registry(), clock=lambda: STAMPS[0]) as recorder:
        built = recorder.build_many(_spawns(), *recorder.snapshot(), recorded_at=STAMPS[0])
    with AuditLog.open(home) as log:
        for _ in range(3):
            log.append_many(built, recorded_at=STAMPS[2])
    before = _chain_report(home, "role").rows()
    result = CliRunner().invoke(cli, ["--home", str(home.path), "shadow", "index"])
    assert result.exit_code == 0, result.output
    assert "seqs 0 to 12 indexed" in result.output
    assert _index_report(home, "role").rows() == before
    again = CliRunner().invoke(cli, ["--home", str(home.path), "shadow", "index"])
    assert "seqs 12 to 12" in again.output  # idempotent
    with AuditLog.open(home) as log:
        assert log.verify()  # the chain is untouched


def test_the_since_window_is_exact_within_its_hour(tmp_path: Path) -> None:
    from rensei_routing.console.pages_shadow import Filters, _facts

    home = home_with_policies(tmp_path)
    for stamp in STAMPS:
        _record(home, stamp)
    now = dt.datetime(2026, 2, 5, tzinfo=dt.UTC)
    # 04:30 on the 3rd: the 04:05 batch is out, the 04:40 batch (same hour) and the 4th's are in
    cut = "2026-02-03T04:30:00Z"
    with closing(home.connect()) as conn:
        got = sum(n for _, n in _facts(conn, Filters({"since": cut}, now), {}))
        assert got == 8
        whole = sum(n for _, n in _facts(conn, Filters({}, now), {}))
        assert whole == 12
        day = sum(n for _, n in _facts(conn, Filters({"since": "24h"}, now), {}))
        assert day == 4  # the 4th's 10:00 batch
        assert sum(n for _, n in _facts(conn, Filters({"since": "12h"}, now), {})) == 0
