"""Every reader of the audit chain reads across its segments (issue 21): ``shadow report``,
``policy whatif`` and ``audit replay`` (with ``--segment``) answer the same after a rotation
moved the records they read into a sealed segment file, and count records in both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog, rotation
from rensei_routing.store.home import Home

from .shadow_support import home_with_policies, installed_seams, write_lines
from .test_cli_shadow import SPAWNS
from .test_cli_whatif import CANDIDATE, CONTEXT

__all__ = ["installed_seams"]

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _ok(runner: CliRunner, *args: str) -> Result:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result


def _rotate(home: Home) -> str:
    with AuditLog.open(home) as log:
        done = rotation.rotate(log)
    assert done is not None
    return done.segment.name


def _live_count(home: Home) -> int:
    conn = home.connect()
    try:
        return int(conn.execute("SELECT count(*) FROM audit_records").get)
    finally:
        conn.close()


@pytest.mark.usefixtures("installed_seams")
def test_shadow_report_and_whatif_read_across_segments(tmp_path: Path, runner: CliRunner) -> None:
    home = home_with_policies(tmp_path)
    spawns = write_lines(tmp_path / "s.jsonl", SPAWNS)
    _ok(runner, "shadow", "record", str(spawns))
    _ok(runner, "explain", json.dumps(CONTEXT), "--record")
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(CANDIDATE))

    def answers() -> tuple[Any, Any]:
        report = json.loads(_ok(runner, "shadow", "report", "--by", "seam", "--json").stdout)
        whatif = json.loads(_ok(runner, "policy", "whatif", str(candidate), "--json").stdout)
        return report, whatif

    before = answers()
    assert _rotate(home) == "0-4" and _live_count(home) == 0
    assert answers() == before  # every record they read is now in the sealed segment
    _ok(runner, "shadow", "record", str(spawns))  # seqs 5..8, live
    report, whatif = answers()
    assert report["total"]["spawns"] == 2 * before[0]["total"]["spawns"] == 8
    assert whatif["contexts"] == before[1]["contexts"] + 4
    latest = json.loads(
        _ok(runner, "policy", "whatif", str(candidate), "--limit", "6", "--json").stdout
    )
    seqs = sorted(e["seq"] for c in latest["matrix"] for e in c["examples"])
    assert latest["contexts"] == 6 and min(seqs) <= 4 < 5 <= max(seqs)  # newest first, across


def test_replay_reads_across_segments_and_one_segment(tmp_path: Path, runner: CliRunner) -> None:
    home = tmp_path / "h"

    def run(*args: str) -> Result:
        return runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])

    for args in (
        ["init", "--org", "acme"],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["explain", "--record", str(EXAMPLES / "context.json")],
        ["explain-batch", "--record", str(EXAMPLES / "contexts.jsonl")],
    ):
        assert run(*args).exit_code == 0
    whole = json.loads(run("audit", "replay", "--json").stdout)
    assert whole["replayed"] == whole["matched"] > 1 and whole["mismatched"] == 0
    name = _rotate(Home(home))
    assert run("explain", "--record", str(EXAMPLES / "context.json")).exit_code == 0
    after = json.loads(run("audit", "replay", "--json").stdout)
    assert after["replayed"] == after["matched"] == whole["replayed"] + 1
    sealed = json.loads(run("audit", "replay", "--segment", name, "--json").stdout)
    assert sealed["replayed"] == sealed["matched"] == whole["replayed"]
    live = json.loads(run("audit", "replay", "--segment", "live", "--json").stdout)
    assert live["replayed"] == live["matched"] == 1
    unknown = run("audit", "replay", "--segment", "7-9")
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and f"segments: {name}, live" in unknown.stderr
