"""``rensei fleet repair`` and the report's counts after records leave the fleet database,
against a real PostgreSQL cluster (``pg_url``) and real hosts' homes: a genuine host, a clone
of its home ingested first (the fork), the alarm, the repair, the genuine export ingested again,
and the fleet report checked against the core's ``ShadowReport`` over the same export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.errors import FleetRepairError, InputError
from rensei_routing.fleet.db import SCHEMA_VERSION

from .shadow_support import installed_seams
from .test_fleet import (
    _python_report,
    export,
    host_row,
    ingest,
    make_host,
    ok,
    record,
    trust,
)

__all__ = ["installed_seams"]

pytest.importorskip("psycopg")
import psycopg

pytestmark = pytest.mark.usefixtures("installed_seams")


def _report(runner: CliRunner, url: str) -> dict[str, Any]:
    return dict(
        json.loads(ok(runner.invoke(cli, ["fleet", "report", "--from", url, "--json"])).output)
    )


def _assert_report_is(report: dict[str, Any], files: dict[str, Path]) -> None:
    expected = _python_report(files)
    assert report["total"] == expected["total"]
    for dim in ("host", "repo", "role", "mechanism", "seam"):
        assert report["groups"][dim] == expected[dim], dim
    assert report["other_records"] == 0


def _forked(runner: CliRunner, tmp_path: Path, url: str) -> tuple[Path, Path]:
    """host-a: 10 records ingested; a clone of its home records 6 others (seqs 10..15),
    ingested first; the genuine host records 8 (seqs 10..17) and its export raises the alarm
    at seq 10. Returns the genuine home and its whole export (seqs 0..17)."""
    home = make_host(runner, tmp_path, "a", 0, 10)
    ok(trust(runner, url, "host-a", home))
    ok(ingest(runner, url, export(runner, home, tmp_path / "1" / "a")))
    clone = tmp_path / "a-clone"
    shutil.copytree(home, clone)
    record(runner, clone, 300, 6)
    ok(ingest(runner, url, export(runner, clone, tmp_path / "clone" / "a")))
    record(runner, home, 600, 8)
    genuine = export(runner, home, tmp_path / "2" / "a")
    alarm = runner.invoke(cli, ["fleet", "ingest", "--to", url, str(genuine)])
    assert alarm.exit_code == 1 and "FORK" in alarm.output and "at seq 10" in alarm.output
    assert host_row(url, "host-a")[0::2] == (16, 10)
    return home, genuine


def test_repair_then_reingest_gives_the_report_of_the_genuine_records(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    _, genuine = _forked(runner, tmp_path, pg_url)
    done = ok(runner.invoke(cli, ["fleet", "repair", "--to", pg_url, "host-a"]))
    assert done.output.startswith("repaired: host host-a: truncated at seq 10, removed 6 ")
    assert "its fork at seq 10 cleared" in done.output
    held = [json.loads(line) for line in genuine.read_text("utf-8").splitlines()]
    assert host_row(pg_url, "host-a") == (10, held[9]["record_hash"], None)
    # Right after the repair the report counts the ten records held, no more.
    first = {"host-a": tmp_path / "1" / "a.jsonl"}
    _assert_report_is(_report(runner, pg_url), first)
    again = json.loads(ok(ingest(runner, pg_url, genuine)).output)[0]
    assert (again["first_added"], again["added"], again["held"]) == (10, 8, 18)
    report = _report(runner, pg_url)
    _assert_report_is(report, {"host-a": genuine})
    [host] = report["hosts"]
    assert (host["records"], host["head_hash"], host["forked_seq"]) == (
        18,
        held[-1]["record_hash"],
        None,
    )
    assert report["forked"] == []
    assert [(a["kind"], a["seq"]) for a in report["alarms"]] == [("repair", 10), ("fork", 10)]
    with psycopg.connect(pg_url) as conn:
        stored = conn.execute(
            "SELECT seq, record_hash FROM fleet_records WHERE host_id = 'host-a' ORDER BY seq"
        ).fetchall()
    assert stored == [(r["seq"], r["record_hash"]) for r in held]


def test_records_deleted_in_sql_leave_the_report_too(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    """The repair operations.md gave before `fleet repair` (a DELETE and an UPDATE in SQL):
    the deleted records leave the report's counts with them."""
    _, genuine = _forked(runner, tmp_path, pg_url)
    with psycopg.connect(pg_url) as conn:
        (head,) = conn.execute(
            "SELECT record_hash FROM fleet_records WHERE host_id = 'host-a' AND seq = 9"
        ).fetchone() or ("",)
        conn.execute("DELETE FROM fleet_records WHERE host_id = 'host-a' AND seq >= 10")
        conn.execute(
            "UPDATE fleet_hosts SET size = 10, head_hash = %s, forked_seq = NULL, "
            "checkpoint = NULL WHERE host_id = 'host-a'",  # the clone's checkpoint goes too
            (head,),
        )
    ok(ingest(runner, pg_url, genuine))
    _assert_report_is(_report(runner, pg_url), {"host-a": genuine})


def _state(url: str) -> tuple[Any, ...]:
    """Everything a repair could change."""
    with psycopg.connect(url) as conn:
        return tuple(
            conn.execute(q).fetchall()
            for q in (
                "SELECT host_id, seq, record_hash FROM fleet_records ORDER BY host_id, seq",
                "SELECT * FROM fleet_agreement ORDER BY host_id, repo, role, mechanism, seam",
                "SELECT * FROM fleet_hosts ORDER BY host_id",
                "SELECT id, host_id, kind, seq FROM fleet_alarms ORDER BY id",
            )
        )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["host-z"], 1, "host host-z is not trusted in this fleet database"),
        (["bad id!"], 1, "not a host id"),
        (["host-a", "--at", "17"], 1, "holds 16 record(s) (seqs 0..15): cannot truncate at seq 17"),
        (["host-a", "--at", "12"], 1, "keeps the disputed records 10..11"),
        (["host-a", "--at", "-1"], 2, "-1 is not in the range x>=0"),
        (["host-b"], 1, "host host-b has not forked: name the seq"),
        (["host-b", "--at", "5"], 1, "host host-b holds no records: cannot truncate at seq 5"),
    ],
    ids=["unknown-host", "bad-host-id", "past-held", "inside-fork", "negative", "no-fork", "empty"],
)
def test_a_bad_repair_is_refused_in_one_line_and_changes_nothing(
    tmp_path: Path, runner: CliRunner, pg_url: str, args: list[str], code: int, message: str
) -> None:
    _forked(runner, tmp_path, pg_url)
    ok(trust(runner, pg_url, "host-b", make_host(runner, tmp_path, "b", 50, 1)))
    before = _state(pg_url)
    result = runner.invoke(cli, ["fleet", "repair", "--to", pg_url, *args])
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output
    if code == 1:
        assert result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert _state(pg_url) == before


def test_the_library_raises_typed_errors_and_keeping_the_held_copy_clears_only_the_mark(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.repair import repair_host

    _forked(runner, tmp_path, pg_url)
    before = _state(pg_url)
    with connect(pg_url) as conn:
        with pytest.raises(FleetRepairError, match=r"disputed records 10\.\.14"):
            repair_host(conn, "host-a", 15)
        with pytest.raises(InputError):
            repair_host(conn, "host-a", -3)
        assert _state(pg_url) == before
        # The held copy was the genuine one: keep it all (at = size), clear the fork mark.
        kept = repair_host(conn, "host-a", 16)
    assert (kept.removed, kept.held, kept.fork_cleared) == (0, 16, 10)
    after = _state(pg_url)
    assert after[0] == before[0] and after[1] == before[1]
    assert host_row(pg_url, "host-a")[0::2] == (16, None)


def test_a_version_1_database_is_upgraded_with_its_counts_rebuilt(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    """A fleet database of version 1 whose counts kept records a SQL repair deleted (what the
    review found): the first command of this release upgrades it, and the report is right."""
    _, genuine = _forked(runner, tmp_path, pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to version 1's shape
        conn.execute("DROP TRIGGER IF EXISTS fleet_records_forget ON fleet_records")
        conn.execute("DROP TRIGGER IF EXISTS fleet_records_clear ON fleet_records")
        conn.execute("DROP FUNCTION IF EXISTS fleet_agreement_forget()")
        conn.execute("DROP FUNCTION IF EXISTS fleet_agreement_clear()")
        conn.execute("ALTER TABLE fleet_hosts DROP COLUMN checkpoint")  # version 3's
        conn.execute("UPDATE fleet_schema SET version = 1")
        (head,) = conn.execute(
            "SELECT record_hash FROM fleet_records WHERE host_id = 'host-a' AND seq = 9"
        ).fetchone() or ("",)
        conn.execute("DELETE FROM fleet_records WHERE host_id = 'host-a' AND seq >= 10")
        conn.execute(
            "UPDATE fleet_hosts SET size = 10, head_hash = %s, forked_seq = NULL "
            "WHERE host_id = 'host-a'",
            (head,),
        )
        stale = conn.execute("SELECT sum(spawns) FROM fleet_agreement").fetchone()
    assert stale == (16,)  # the six deleted records still counted
    ok(ingest(runner, pg_url, genuine))
    _assert_report_is(_report(runner, pg_url), {"host-a": genuine})
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM fleet_schema").fetchall() == [(SCHEMA_VERSION,)]
        held = conn.execute("SELECT checkpoint FROM fleet_hosts WHERE host_id = 'host-a'")
        assert held.fetchone() is not None  # the column version 3 added
