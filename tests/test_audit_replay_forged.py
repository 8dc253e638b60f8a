"""``audit replay`` against decisions forged by someone holding the host key (issue 29, M5; the
review's ``replay_forge.sh``): the record is re-appended through ``AuditLog`` so its chain and
checkpoints are genuine and ``audit verify`` passes. A redaction marker makes a record
unreplayable only where the replayed decision read that field; a revision the home never held
is a mismatch; whatever could not be replayed is in the exit status (4), never a clean 0."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
MARKER = "[REDACTED:github-token]"
STAMP = "2026-08-22T10:00:00.000000Z"


def _run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])


def _home(runner: CliRunner, path: Path, *, policies: bool) -> Path:
    assert _run(runner, path, "init", "--org", "acme").exit_code == 0
    if policies:
        assert _run(runner, path, "policy", "save", str(EXAMPLES / "policies.json")).exit_code == 0
    done = _run(runner, path, "explain", "--record", str(EXAMPLES / "context.json"))
    assert done.exit_code == 0, done.output
    return path


def _forge(home: Path, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Re-append the recorded decision (the last record: a policy save's mutation record may
    precede it) with ``edit`` applied, as the key holder can."""
    with AuditLog.open(Home(home)) as log:
        forged = copy.deepcopy(log.get(log.head()[0] - 1).payload)
        edit(forged)
        log.append(forged, recorded_at=STAMP)
    return forged


def _last(home: Path) -> int:
    """The seq of the forged record (the last one)."""
    return _state(home)[0] - 1


def _state(home: Path) -> tuple[int, str]:
    with AuditLog.open(Home(home)) as log:
        seq, head = log.head()
        return seq, head


def _replay(runner: CliRunner, home: Path) -> tuple[int, dict[str, Any], Result]:
    assert _run(runner, home, "audit", "verify").exit_code == 0  # the bytes hold together
    before = _state(home)
    result = _run(runner, home, "audit", "replay", "--json")
    assert "Traceback" not in result.output
    assert _state(home) == before  # replay never writes
    return result.exit_code, json.loads(result.stdout), result


def _lie(forged: dict[str, Any]) -> None:
    forged["account_id"], forged["provider_binding"] = "zai-main", "zai-harness"


def _context(forged: dict[str, Any]) -> dict[str, Any]:
    context: dict[str, Any] = forged["explanation"]["context"]
    return context


def test_a_plain_forgery_is_a_mismatch(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(runner, tmp_path / "plain", policies=True)
    _forge(home, _lie)
    code, report, _ = _replay(runner, home)
    assert code == 1
    assert report["firstMismatch"] == {"seq": _last(home), "field": "account_id"}
    assert report["unreplayable"] == {} and report["verdict"] == "mismatch"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mechanism_detail", MARKER),  # the review's case: a field that decides nothing
        ("model", f"claude-opus-4-1 {MARKER}"),  # a managed decision never reads the legacy route
        ("account_id", MARKER),
    ],
)
def test_a_marker_in_a_field_the_decision_did_not_read_leaves_a_mismatch(
    tmp_path: Path, runner: CliRunner, field: str, value: str
) -> None:
    home = _home(runner, tmp_path / "marker", policies=True)
    forged = _forge(home, lambda d: (_lie(d), _context(d)["legacy_route"].update({field: value})))
    assert MARKER in json.dumps(_context(forged))
    code, report, result = _replay(runner, home)
    assert code == 1, result.output
    assert report["firstMismatch"] == {"seq": _last(home), "field": "account_id"}
    assert report["unreplayable"] == {}


def test_a_marker_in_an_account_of_a_legacy_decision_leaves_a_mismatch(
    tmp_path: Path, runner: CliRunner
) -> None:
    # no policy saved: the context is decided by its legacy route, which reads no account
    home = _home(runner, tmp_path / "legacy", policies=False)

    def edit(d: dict[str, Any]) -> None:
        d["account_id"] = "anthropic-backup"  # the lie: another account than the legacy route's
        _context(d)["accounts"][2]["account_id"] = MARKER

    _forge(home, edit)
    code, report, _ = _replay(runner, home)
    assert (code, report["firstMismatch"]) == (1, {"seq": _last(home), "field": "account_id"})
    assert report["unreplayable"] == {}


@pytest.mark.parametrize(
    ("policies", "edit"),
    [
        (True, lambda c: c.update(principal_id=MARKER)),  # a match field
        (True, lambda c: c["accounts"][0].update(account_id=MARKER)),  # the applied pool
        (False, lambda c: c["legacy_route"].update(account_id=MARKER)),  # the legacy rung's
    ],
    ids=["principal", "account-of-a-managed-decision", "legacy-account-of-a-legacy-decision"],
)
def test_a_marker_in_a_field_the_decision_read_is_unreplayable_and_exits_4(
    tmp_path: Path,
    runner: CliRunner,
    policies: bool,
    edit: Callable[[dict[str, Any]], None],
) -> None:
    home = _home(runner, tmp_path / "read", policies=policies)

    def forge(d: dict[str, Any]) -> None:
        d["account_id"] = "zai-main"
        edit(_context(d))

    _forge(home, forge)
    code, report, _ = _replay(runner, home)
    assert (report["mismatched"], report["unreplayable"]) == (0, {"redacted input": 1})
    assert report["verdict"] == "incomplete" and report["ok"] is False
    assert code == 4
    text = _run(runner, home, "audit", "replay")
    assert text.exit_code == 4
    assert f"unreplayable: redacted input: 1 (first: seq {_last(home)})" in text.stdout
    assert text.stderr.startswith("Error: 1 record(s) could not be replayed")


def test_a_revision_the_home_never_held_is_a_mismatch(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(runner, tmp_path / "absent", policies=True)
    _forge(home, lambda d: (_lie(d), d.update(policy_revision=99)))
    code, report, _ = _replay(runner, home)
    assert code == 1
    assert report["firstMismatch"] == {"seq": _last(home), "field": "policy_revision"}
    assert report["unreplayable"] == {}


def test_record_refuses_an_unsaved_policy_file_and_records_nothing(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(runner, tmp_path / "dry", policies=True)
    before = _state(home)
    for command, source in (("explain", "context.json"), ("explain-batch", "contexts.jsonl")):
        done = _run(
            runner,
            home,
            command,
            "--record",
            "--policies",
            str(EXAMPLES / "policies.json"),
            str(EXAMPLES / source),
        )
        assert done.exit_code == 2, done.output
        assert "save the file first" in done.stderr and "Traceback" not in done.output
    assert _state(home) == before
    # without --record, the file is still a dry run
    dry = _run(
        runner,
        home,
        "explain",
        "--policies",
        str(EXAMPLES / "policies.json"),
        str(EXAMPLES / "context.json"),
    )
    assert dry.exit_code == 0, dry.output
