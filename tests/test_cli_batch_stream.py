"""``rensei explain-batch`` streams (issue 11): output equal to the library's decisions, a bad
line anywhere (past the first chunks too) prints and records nothing, observers hear every
record, and the collector settings it tunes are restored."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli._batch import CHUNK
from rensei_routing.cli._inputs import read_policy_file
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
POLICIES = EXAMPLES / "policies.json"


def _lines(count: int) -> list[str]:
    base = (EXAMPLES / "contexts.jsonl").read_text().splitlines()
    return [base[i % len(base)] for i in range(count)]


def _home(runner: CliRunner, tmp_path: Path) -> list[str]:
    home = ["--home", str(tmp_path / "h")]
    assert runner.invoke(cli, ["init", *home]).exit_code == 0
    assert runner.invoke(cli, ["policy", "save", str(POLICIES), *home]).exit_code == 0
    return home


def test_a_batch_of_several_chunks_prints_the_library_decisions(
    runner: CliRunner, tmp_path: Path
) -> None:
    lines = _lines(CHUNK + 7)
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(lines) + "\n")
    thresholds = gc.get_threshold()
    result = runner.invoke(cli, ["explain-batch", str(path), "--policies", str(POLICIES)])
    assert result.exit_code == 0, result.output
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0  # restored
    snapshot = read_policy_file(POLICIES)
    want = explain_batch([RouteContext.from_dict(json.loads(x)) for x in lines], snapshot)
    got = result.stdout.splitlines()
    assert got == [
        json.dumps(
            StampedDecision(d, Freshness.live()).to_dict(),
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for d in want
    ]


def test_a_bad_line_after_several_chunks_prints_and_records_nothing(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = _home(runner, tmp_path)
    lines = _lines(2 * CHUNK + 10)
    lines[2 * CHUNK + 3] = '{"repo": "a/b", "request_face": "telepathic"}'
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(cli, ["explain-batch", str(path), "--record", *home])
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"{path}:{2 * CHUNK + 4}: request_face" in line
    with AuditLog.open(Home(tmp_path / "h")) as log:
        assert log.count() == 1  # the policy save's mutation record alone


def test_a_recorded_batch_of_several_chunks_verifies_and_matches_the_output(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = _home(runner, tmp_path)
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(_lines(CHUNK + 3)) + "\n")
    result = runner.invoke(cli, ["explain-batch", str(path), "--record", *home])
    assert result.exit_code == 0, result.output
    printed = [json.loads(x) for x in result.stdout.splitlines()]
    with AuditLog.open(Home(tmp_path / "h")) as log:
        assert log.verify()
        records = list(log.records(start=1))  # seq 0: the policy save's mutation record
    assert [r.payload for r in records] == printed  # what was printed is what was recorded


def test_notes_about_the_snapshot_wait_for_the_input(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text('{"request_face": "telepathic"}\n')
    nowhere = ["--home", str(tmp_path / "nowhere")]
    bad = runner.invoke(cli, ["explain-batch", str(path), *nowhere])
    assert bad.exit_code == 1
    assert len(bad.stderr.strip().splitlines()) == 1  # the error alone, as before
    path.write_text('{"repo": "a/b"}\n')
    good = runner.invoke(cli, ["explain-batch", str(path), *nowhere])
    assert good.exit_code == 0 and "no store" in good.stderr
