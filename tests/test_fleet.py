"""``rensei fleet trust|ingest|report`` against a real PostgreSQL cluster (the ``pg_url``
fixture: a fresh database per test) and real hosts' homes: shadow records written by
``rensei shadow record`` with the test seams installed, exported with ``rensei audit export``
and checkpointed with ``rensei audit checkpoint``."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import payload_hash
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.shadow.compare import ShadowDecision
from rensei_routing.core.shadow.report import GROUPINGS, ShadowReport
from rensei_routing.errors import FleetForkError, FleetIngestRefusedError
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .shadow_support import installed_seams

__all__ = ["installed_seams"]

pytest.importorskip("psycopg")
import psycopg

pytestmark = pytest.mark.usefixtures("installed_seams")

SAMPLES = Path(__file__).resolve().parent.parent / "plugins/rensei-seams-hydraflow/samples"
SPAWNS = SAMPLES / "hydraflow-spawns.jsonl"


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def make_host(runner: CliRunner, where: Path, name: str, first: int, count: int) -> Path:
    """A host's home with the sample policies and ``count`` shadow records (sample spawns from
    line ``first``)."""
    home = where / name
    ok(runner.invoke(cli, ["--home", str(home), "init"]))
    # Written straight into the revision store: `policy save` would put its mutation record on
    # the chain, and the counts and seqs here are the shadow records' alone.
    from contextlib import closing

    from rensei_routing.core.routing.structure import read_policy_document
    from rensei_routing.store.policies import PolicyStore

    doc = json.loads((SAMPLES / "policies.json").read_text(encoding="utf-8"))
    with closing(Home(home).connect(write=True)) as conn:
        PolicyStore(conn).save(
            read_policy_document(doc).policies, saved_at="2026-11-29T12:00:00.000000Z"
        )
    record(runner, home, first, count)
    return home


def record(runner: CliRunner, home: Path, first: int, count: int) -> None:
    lines = SPAWNS.read_text(encoding="utf-8").splitlines()[first : first + count]
    spawns = home.parent / f"{home.name}-spawns-{first}.jsonl"
    spawns.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ok(runner.invoke(cli, ["--home", str(home), "shadow", "record", str(spawns)]))


def export(runner: CliRunner, home: Path, stem: Path, *, since: int = 0) -> Path:
    """Checkpoint, then export (seqs ``since``..): ``stem.checkpoint`` and ``stem.jsonl``, and,
    when the home signed a checkpoint before, ``stem.consistency`` from that one's size to the
    new one (what the fleet asks for when it holds the earlier checkpoint)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = stem.with_suffix(".checkpoint")
    with AuditLog.open(Home(home)) as log:
        before = [cp.size for cp in log.checkpoints()]
    ok(runner.invoke(cli, ["--home", str(home), "audit", "checkpoint", "-o", str(checkpoint)]))
    if before:
        proof = stem.with_suffix(".consistency")
        args = ["--home", str(home), "audit", "consistency", str(max(before)), str(checkpoint)]
        ok(runner.invoke(cli, [*args, "-o", str(proof)]))
    target = stem.with_suffix(".jsonl")
    args = ["--home", str(home), "audit", "export", str(target), "--since", str(since)]
    ok(runner.invoke(cli, args))
    return target


def trust(runner: CliRunner, url: str, host_id: str, home: Path) -> Result:
    return runner.invoke(cli, ["fleet", "trust", "--to", url, host_id, str(home / "keys/host.pub")])


def ingest(runner: CliRunner, url: str, *paths: Path) -> Result:
    return runner.invoke(cli, ["fleet", "ingest", "--to", url, "--json", *map(str, paths)])


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT host_id, count(*) FROM fleet_records GROUP BY host_id"
        ).fetchall()
    return {h: int(n) for h, n in rows}


def host_row(url: str, host_id: str) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT size, head_hash, forked_seq FROM fleet_hosts WHERE host_id = %s", (host_id,)
        ).fetchone()
    assert row is not None
    return tuple(row)


def head_of(export_file: Path) -> tuple[int, str]:
    last = json.loads(export_file.read_text(encoding="utf-8").splitlines()[-1])
    return last["seq"] + 1, last["record_hash"]


@pytest.fixture
def fleet(tmp_path: Path, runner: CliRunner, pg_url: str) -> dict[str, Path]:
    """Two trusted hosts, 12 and 8 records, each exported with its checkpoint."""
    homes = {
        "host-a": make_host(runner, tmp_path, "a", 0, 12),
        "host-b": make_host(runner, tmp_path, "b", 100, 8),
    }
    for host_id, home in homes.items():
        ok(trust(runner, pg_url, host_id, home))
    return homes


def test_verified_ingest_loads_every_record_and_tracks_each_host_head(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    out = tmp_path / "exports"
    files = {h: export(runner, home, out / h) for h, home in fleet.items()}
    result = ok(ingest(runner, pg_url, out))
    assert [(r["host_id"], r["added"]) for r in json.loads(result.output)] == [
        ("host-a", 12),
        ("host-b", 8),
    ]
    assert counts(pg_url) == {"host-a": 12, "host-b": 8}
    for host_id, f in files.items():
        size, head = head_of(f)
        assert host_row(pg_url, host_id) == (size, head, None)
    # The central copy is the hosts' evidence: every payload hashes to its payload_hash again.
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT payload::text, payload_hash FROM fleet_records").fetchall()
    assert all(payload_hash(canonical_bytes(json.loads(p))) == h for p, h in rows)


def test_a_tampered_export_is_refused_and_nothing_is_loaded(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    f = export(runner, fleet["host-a"], tmp_path / "x" / "a")
    lines = f.read_text(encoding="utf-8").splitlines(keepends=True)
    assert '"agreed":true' in lines[5] or '"agreed":false' in lines[5]
    flip = ("true", "false") if '"agreed":true' in lines[5] else ("false", "true")
    lines[5] = lines[5].replace(f'"agreed":{flip[0]}', f'"agreed":{flip[1]}', 1)
    f.write_text("".join(lines), encoding="utf-8")
    result = ingest(runner, pg_url, f)
    assert result.exit_code == 1
    [refusal] = json.loads(result.stdout)
    assert refusal["seq"] == 5 and "payload-hash-mismatch" in refusal["refused"]
    assert "Traceback" not in result.output
    assert counts(pg_url) == {}
    assert host_row(pg_url, "host-a")[0] == 0


def test_an_export_signed_by_no_trusted_key_is_refused(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    a = make_host(runner, tmp_path, "a", 0, 4)
    stranger = make_host(runner, tmp_path, "s", 10, 4)
    ok(trust(runner, pg_url, "host-a", a))
    f = export(runner, stranger, tmp_path / "x" / "s")
    result = ingest(runner, pg_url, f)
    assert result.exit_code == 1
    assert "not signed by the key of any trusted host" in result.output
    # Host a's checkpoint over the stranger's records: signed by a trusted key, but its head
    # is not the head of these records.
    own = export(runner, a, tmp_path / "y" / "a")
    shutil.copy(own.with_suffix(".checkpoint"), f.with_suffix(".checkpoint"))
    result = ingest(runner, pg_url, f)
    assert result.exit_code == 1 and "truncated-below-checkpoint" in result.output
    assert counts(pg_url) == {}


def test_a_missing_or_mismatched_checkpoint_is_refused(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    home = fleet["host-a"]
    f = export(runner, home, tmp_path / "x" / "a")
    cp = f.with_suffix(".checkpoint")
    saved = cp.read_bytes()
    cp.unlink()
    result = ingest(runner, pg_url, f)
    assert result.exit_code == 1 and "no usable checkpoint" in result.output
    cp.write_text("not a checkpoint\n", encoding="utf-8")
    assert ingest(runner, pg_url, f).exit_code == 1
    # A checkpoint of a longer log than the export holds vouches for records it lacks.
    record(runner, home, 50, 3)
    later = export(runner, home, tmp_path / "later" / "a")
    shutil.copy(later.with_suffix(".checkpoint"), cp)
    result = ingest(runner, pg_url, f)
    assert result.exit_code == 1 and "truncated-below-checkpoint" in result.output
    cp.write_bytes(saved)
    assert counts(pg_url) == {}
    assert json.loads(ok(ingest(runner, pg_url, f)).output)[0]["added"] == 12


def test_reingest_is_idempotent_and_an_extended_chain_adds_only_its_new_records(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    home = fleet["host-a"]
    first = export(runner, home, tmp_path / "1" / "a")
    assert json.loads(ok(ingest(runner, pg_url, first)).output)[0]["added"] == 12
    again = json.loads(ok(ingest(runner, pg_url, first)).output)[0]
    assert (again["added"], again["held"]) == (0, 12)
    assert counts(pg_url) == {"host-a": 12}
    record(runner, home, 200, 5)
    whole = export(runner, home, tmp_path / "2" / "a")  # the whole chain again, 17 records
    grown = json.loads(ok(ingest(runner, pg_url, whole)).output)[0]
    assert (grown["added"], grown["first_added"], grown["held"]) == (5, 12, 17)
    record(runner, home, 300, 4)
    tail = export(runner, home, tmp_path / "3" / "a", since=17)  # only seqs 17..20
    step = json.loads(ok(ingest(runner, pg_url, tail)).output)[0]
    assert (step["first_seq"], step["added"], step["held"]) == (17, 4, 21)
    assert counts(pg_url) == {"host-a": 21}
    assert host_row(pg_url, "host-a")[:2] == head_of(tail)
    with psycopg.connect(pg_url) as conn:
        logged = conn.execute("SELECT added FROM fleet_ingests ORDER BY id").fetchall()
    assert [n for (n,) in logged] == [12, 0, 5, 4]
    # The report's counts, added to by each ingest, are those of the whole chain.
    everything = export(runner, home, tmp_path / "4" / "a")
    report = json.loads(
        ok(runner.invoke(cli, ["fleet", "report", "--from", pg_url, "--json"])).output
    )
    expected = _python_report({"host-a": everything})
    assert report["total"] == expected["total"] and report["groups"]["seam"] == expected["seam"]


def test_records_past_the_checkpoint_are_not_loaded_and_a_gap_is_refused(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    home = fleet["host-a"]
    ok(
        runner.invoke(
            cli, ["--home", str(home), "audit", "checkpoint", "-o", str(tmp_path / "a.checkpoint")]
        )
    )
    record(runner, home, 400, 3)  # appended after the checkpoint: not vouched by the key
    ok(runner.invoke(cli, ["--home", str(home), "audit", "export", str(tmp_path / "a.jsonl")]))
    done = json.loads(ok(ingest(runner, pg_url, tmp_path / "a.jsonl")).output)[0]
    assert (done["added"], done["held"], done["beyond_checkpoint"]) == (12, 12, 3)
    record(runner, home, 500, 2)
    gap = export(runner, home, tmp_path / "g" / "a", since=15)
    result = ingest(runner, pg_url, gap)
    assert result.exit_code == 1 and "ingest the export of seqs 12..14 first" in result.output
    assert counts(pg_url) == {"host-a": 12}


def test_a_record_the_database_cannot_hold_refuses_its_file_only(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    with AuditLog.open(Home(fleet["host-b"])) as log:  # jsonb cannot store the escape \u0000
        log.append({"record_type": "note", "text": "a\x00b"}, recorded_at="2026-06-01T00:00:00Z")
    out = tmp_path / "x"
    for h, home in fleet.items():
        export(runner, home, out / h)
    result = ingest(runner, pg_url, out)
    assert result.exit_code == 1
    a, b = json.loads(result.stdout)
    assert a["added"] == 12 and "the database refused a record" in b["refused"]
    assert counts(pg_url) == {"host-a": 12}
    assert host_row(pg_url, "host-b")[0] == 0


def test_a_fork_raises_an_alarm_naming_the_host_and_seq_and_loads_nothing(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    home = fleet["host-a"]
    twin = tmp_path / "a-twin"
    shutil.copytree(home, twin)  # the same host's home, copied at 12 records
    record(runner, home, 600, 3)
    record(runner, twin, 700, 5)  # another history from seq 12 on, signed by the same key
    ok(ingest(runner, pg_url, export(runner, home, tmp_path / "1" / "a")))
    forked = export(runner, twin, tmp_path / "2" / "a")
    result = runner.invoke(cli, ["fleet", "ingest", "--to", pg_url, str(forked)])
    assert result.exit_code == 1
    assert "ALARM" in result.output and "host host-a" in result.output
    assert "at seq 12" in result.output and "Traceback" not in result.output
    assert counts(pg_url) == {"host-a": 15}
    assert host_row(pg_url, "host-a")[2] == 12
    with psycopg.connect(pg_url) as conn:
        alarms = conn.execute("SELECT host_id, kind, seq, file FROM fleet_alarms").fetchall()
    assert alarms == [("host-a", "fork", 12, str(forked))]
    # The library raises the typed error; the host stays refused, even for a valid export.
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.ingest import ingest_file

    with connect(pg_url) as conn:
        with pytest.raises(FleetIngestRefusedError, match="forked at seq 12") as refused:
            ingest_file(conn, tmp_path / "1" / "a.jsonl")
        assert not isinstance(refused.value, FleetForkError)


def test_an_older_export_that_disagrees_is_a_fork_too(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    home = fleet["host-a"]
    twin = tmp_path / "a-twin"
    shutil.copytree(home, twin)
    record(runner, home, 800, 6)
    record(runner, twin, 900, 2)  # 14 records, differing from seq 12
    ok(ingest(runner, pg_url, export(runner, home, tmp_path / "1" / "a")))
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.ingest import ingest_file

    with connect(pg_url) as conn, pytest.raises(FleetForkError) as fork:
        ingest_file(conn, export(runner, twin, tmp_path / "2" / "a"))
    assert (fork.value.host_id, fork.value.seq) == ("host-a", 12)
    assert counts(pg_url) == {"host-a": 18}


def _python_report(files: dict[str, Path]) -> dict[str, Any]:
    """The figures of the fleet report, recomputed with the core's shadow report."""
    payloads = {
        h: [json.loads(line)["payload"] for line in f.read_text(encoding="utf-8").splitlines()]
        for h, f in files.items()
    }
    records = {
        h: [ShadowDecision.from_dict(p, redacted=True) for p in ps if "seam" in p]
        for h, ps in payloads.items()
    }
    out: dict[str, Any] = {}
    total = ShadowReport()
    by_host = []
    for h, rs in records.items():
        one = ShadowReport()
        for r in rs:
            one.add(r)
            total.add(r)
        by_host.append({**one.total.to_dict(), "group": h})
    out["total"] = total.total.to_dict()
    out["host"] = sorted(by_host, key=lambda r: (-r["spawns"], r["group"]))
    for by in ("repo", "role", "mechanism", "seam"):
        assert by in GROUPINGS
        rep = ShadowReport(by)
        for rs in records.values():
            for r in rs:
                rep.add(r)
        out[by] = [r.to_dict() for r in rep.rows()]
    return out


def test_the_report_equals_a_python_recomputation_over_the_same_records(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    fleet["host-c"] = make_host(runner, tmp_path, "c", 1000, 30)
    ok(trust(runner, pg_url, "host-c", fleet["host-c"]))
    files = {h: export(runner, home, tmp_path / "x" / h) for h, home in fleet.items()}
    ok(ingest(runner, pg_url, tmp_path / "x"))
    report = json.loads(
        ok(runner.invoke(cli, ["fleet", "report", "--from", pg_url, "--json"])).output
    )
    expected = _python_report(files)
    assert report["total"] == expected["total"]
    for dim in ("host", "repo", "role", "mechanism", "seam"):
        assert report["groups"][dim] == expected[dim], dim
    hosts = {h["host_id"]: h for h in report["hosts"]}
    for host_id, f in files.items():
        size, head = head_of(f)
        assert (hosts[host_id]["records"], hosts[host_id]["head_hash"]) == (size, head)
        assert hosts[host_id]["policy_revision"] == 1 and hosts[host_id]["org"] == "local"
    assert report["forked"] == report["stale"] == report["old_revision"] == []
    text = ok(runner.invoke(cli, ["fleet", "report", "--from", pg_url])).output
    assert f"{expected['total']['spawns']:,} shadow record(s)" in text


def _append_claim(home: Path, rev: str) -> None:
    """A record citing a ruleset snapshot, as a claim decision does (``rulesetRev``)."""
    with AuditLog.open(Home(home)) as log:
        log.append(
            {"record_type": "claim-decision", "pool_id": "p", "admitted": True, "rulesetRev": rev},
            recorded_at="2026-06-01T00:00:00.000000Z",
        )


def test_the_report_names_hosts_that_forked_stopped_reporting_or_run_an_old_revision(
    tmp_path: Path, runner: CliRunner, pg_url: str, fleet: dict[str, Path]
) -> None:
    _append_claim(fleet["host-a"], "local@3")
    _append_claim(fleet["host-b"], "local@2")
    for h, home in fleet.items():
        ok(ingest(runner, pg_url, export(runner, home, tmp_path / "x" / h)))
    from rensei_routing.fleet.db import connect
    from rensei_routing.fleet.report import fleet_report

    with connect(pg_url) as conn:
        last = conn.execute("SELECT max(last_ingest_at) FROM fleet_hosts").fetchone()[0]
        fresh = fleet_report(conn, now=last + dt.timedelta(minutes=1))
        late = fleet_report(conn, now=last + dt.timedelta(hours=2))
        pinned = fleet_report(conn, now=last, revision=4)
    assert [h.host_id for h in fresh.old_revision] == ["host-b"]
    assert {h.host_id: h.snapshot_revision for h in fresh.hosts} == {"host-a": 3, "host-b": 2}
    assert fresh.stale == () and fresh.other_records == 2
    assert [h.host_id for h in late.stale] == ["host-a", "host-b"]
    assert [h.host_id for h in pinned.old_revision] == ["host-a", "host-b"]
    lag = {h.host_id: h.lag_s for h in fresh.hosts}
    assert all(s is not None and s > 0 for s in lag.values())
    # A forked host is named.
    twin = tmp_path / "twin"
    shutil.copytree(fleet["host-b"], twin)
    record(runner, fleet["host-b"], 1500, 1)
    record(runner, twin, 1600, 1)
    ok(ingest(runner, pg_url, export(runner, fleet["host-b"], tmp_path / "y" / "b")))
    assert ingest(runner, pg_url, export(runner, twin, tmp_path / "z" / "b")).exit_code == 1
    report = json.loads(
        ok(runner.invoke(cli, ["fleet", "report", "--from", pg_url, "--json"])).output
    )
    assert report["forked"] == ["host-b"]
    assert report["alarms"][0]["host_id"] == "host-b" and report["alarms"][0]["seq"] == 9


def test_trust_is_idempotent_and_refuses_a_second_key_or_a_reused_key(
    tmp_path: Path, runner: CliRunner, pg_url: str
) -> None:
    a = make_host(runner, tmp_path, "a", 0, 1)
    b = make_host(runner, tmp_path, "b", 1, 1)
    assert "trusted: host host-a" in ok(trust(runner, pg_url, "host-a", a)).output
    assert "already trusted" in ok(trust(runner, pg_url, "host-a", a)).output
    other = trust(runner, pg_url, "host-a", b)
    assert other.exit_code == 1 and "trusted with another key" in other.output
    reused = trust(runner, pg_url, "host-z", a)
    assert reused.exit_code == 1 and "already trusted for host host-a" in reused.output
    bad = trust(runner, pg_url, "bad id!", b)
    assert bad.exit_code == 1 and "not a host id" in bad.output
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM fleet_hosts").fetchone() == (1,)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "--from", "mysql://x@localhost/db"], "not a PostgreSQL URL"),
        (["report", "--from", "postgresql://u:secret@127.0.0.1:{port}/db"], "cannot connect"),
        (["ingest", "--to", "postgresql://u@127.0.0.1:{port}/db", "{tmp}"], "cannot connect"),
        (["trust", "--to", "postgresql://u@127.0.0.1:{port}/db", "h", "{key}"], "cannot connect"),
    ],
)
def test_cli_errors_are_one_line_with_a_non_zero_exit(
    tmp_path: Path, runner: CliRunner, args: list[str], message: str
) -> None:
    key = tmp_path / "host.pub"
    key.write_text(signing.generate().public_key.to_text() + "\n", encoding="utf-8")
    (tmp_path / "x.jsonl").write_text("", encoding="utf-8")
    port = _closed_port()
    argv = [a.format(port=port, tmp=tmp_path, key=key) for a in args]
    result = runner.invoke(cli, ["fleet", *argv])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ") and message in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert "secret" not in result.output


def test_without_psycopg_the_error_names_the_extra(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)
    result = runner.invoke(cli, ["fleet", "report", "--from", "postgresql://u@127.0.0.1:1/db"])
    assert result.exit_code == 1
    assert "pip install 'rensei-routing[postgres]'" in result.output
