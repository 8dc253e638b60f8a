"""``rensei policy whatif``: the recorded contexts re-explained against the current revision and
a candidate, end to end over a real chain holding shadow records and plain recorded decisions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.home import Home

from .shadow_support import (
    ACCOUNTS,
    POLICIES,
    home_with_policies,
    installed_seams,
    write_lines,
)
from .test_cli_shadow import SPAWNS

__all__ = ["installed_seams"]

pytestmark = pytest.mark.usefixtures("installed_seams")

CANDIDATE: dict[str, Any] = {
    "policies": [
        {
            "id": "client-on-zai",
            "priority": 10,
            "match": {"repo_classes": ["client"]},
            "action": {
                "provider_lock": "zai-harness",
                "requirement_map": [{"requirement": "balanced", "model": "glm-4.6"}],
            },
        },
        POLICIES["policies"][1],  # reviewers-on-zai, unchanged
        {
            "id": "adr-loop-pool",
            "priority": 10,
            "match": {"principal_ids": ["adr_reviewer"]},
            "action": {"account_pool": ["retired-account"], "on_unavailable": "reject"},
        },
    ]
}
#: A plain `explain --record` context: balanced on a client repo (held before: unmapped).
CONTEXT = {
    "repo": "acme/widgets",
    "repo_class": "client",
    "principal_id": "implementer",
    "model_requirement": "balanced",
    "accounts": ACCOUNTS,
    "legacy_route": {"provider_binding": "anthropic", "account_id": "anthropic-primary"},
}


def _chain(tmp_path: Path, runner: CliRunner) -> Home:
    home = home_with_policies(tmp_path)
    spawns = write_lines(tmp_path / "s.jsonl", SPAWNS)
    assert runner.invoke(cli, ["shadow", "record", str(spawns)]).exit_code == 0
    recorded = runner.invoke(cli, ["explain", json.dumps(CONTEXT), "--record"])
    assert recorded.exit_code == 0, recorded.output
    return home


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "candidate.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_change_matrix(tmp_path: Path, runner: CliRunner) -> None:
    _chain(tmp_path, runner)
    candidate = _write(tmp_path, CANDIDATE)
    result = runner.invoke(cli, ["policy", "whatif", str(candidate), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["contexts"] == 5
    assert {k: doc[k] for k in ("changed", "moved_provider", "moved_model", "moved_account")} == {
        "changed": 4,
        "moved_provider": 1,
        "moved_model": 0,
        "moved_account": 1,
    }
    assert (doc["newly_held"], doc["newly_rejected"], doc["newly_selected"]) == (1, 1, 1)
    assert doc["policy_changed"] == 4
    cells = {(c["before"], c["after"]): c for c in doc["matrix"]}
    assert {k: (c["count"], c["changed"]) for k, c in cells.items()} == {
        ("selected/matched-policy", "held/literal-family-unsatisfiable"): (1, 1),
        ("selected/matched-policy", "selected/matched-policy"): (1, 1),
        ("selected/no-policy-applies", "rejected/no-eligible-account"): (1, 1),
        ("held/no-eligible-account", "held/no-eligible-account"): (1, 0),
        ("held/capability-unmapped", "selected/matched-policy"): (1, 1),
    }
    moved = cells[("selected/matched-policy", "selected/matched-policy")]["examples"]
    assert [e["seq"] for e in moved] == [1]
    assert moved[0]["before_decision_id"] != moved[0]["after_decision_id"]
    plain = cells[("held/capability-unmapped", "selected/matched-policy")]["examples"]
    assert [e["seq"] for e in plain] == [4]  # the plain recorded decision counts too
    assert doc["examples"]["newly_rejected"][0]["seq"] == 2
    assert doc["current"]["revision"] == 1 and doc["candidate"]["policy_count"] == 3
    text = runner.invoke(cli, ["policy", "whatif", str(candidate)])
    assert text.exit_code == 0
    assert "what-if over 5 recorded contexts: current revision 1 (ok)" in text.stdout
    assert re.search(r"^  changed +4 \(80\.0%\)", text.stdout, re.M)
    assert re.search(r"^  newly rejected +1   e\.g\. seq 2 ", text.stdout, re.M)
    assert "before \\ after" in text.stdout


def test_fail_on_change_gates(tmp_path: Path, runner: CliRunner) -> None:
    _chain(tmp_path, runner)
    changed = runner.invoke(
        cli, ["policy", "whatif", str(_write(tmp_path, CANDIDATE)), "--fail-on-change"]
    )
    assert changed.exit_code == 1
    assert changed.stderr == "Error: 4 of 5 recorded spawns would change\n"
    assert "before \\ after" in changed.stdout  # the matrix is still printed
    same = _write(tmp_path, POLICIES, "same.json")
    unchanged = runner.invoke(cli, ["policy", "whatif", str(same), "--fail-on-change"])
    assert unchanged.exit_code == 0, unchanged.output
    assert re.search(r"^  changed +0 \(0\.0%\)$", unchanged.stdout, re.M)


def test_an_invalid_candidate_is_refused_before_anything(tmp_path: Path, runner: CliRunner) -> None:
    _chain(tmp_path, runner)
    bad = {"policies": [CANDIDATE["policies"][0], CANDIDATE["policies"][0]]}
    result = runner.invoke(cli, ["policy", "whatif", str(_write(tmp_path, bad))])
    assert result.exit_code == 1 and result.stdout == ""
    assert "duplicate-policy-id" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: 1 validation issue(s) in {tmp_path / 'candidate.json'}; nothing compared"
    )
    lying = {**CANDIDATE, "content_hash": "sha256:" + "0" * 64}
    refused = runner.invoke(cli, ["policy", "whatif", str(_write(tmp_path, lying))])
    assert refused.exit_code == 1 and "does not match its policies" in refused.stderr


def test_every_recorded_spawn_counts_and_limit_takes_the_latest(
    tmp_path: Path, runner: CliRunner
) -> None:
    _chain(tmp_path, runner)
    spawns = write_lines(tmp_path / "again.jsonl", SPAWNS[:1])
    assert runner.invoke(cli, ["shadow", "record", str(spawns)]).exit_code == 0  # seq 5
    candidate = str(_write(tmp_path, CANDIDATE))
    doc = json.loads(runner.invoke(cli, ["policy", "whatif", candidate, "--json"]).stdout)
    assert doc["contexts"] == 6 and doc["newly_held"] == 2  # the duplicate counts again
    latest = runner.invoke(cli, ["policy", "whatif", candidate, "--limit", "2", "--json"])
    doc = json.loads(latest.stdout)
    assert doc["contexts"] == 2
    assert sorted(e["seq"] for c in doc["matrix"] for e in c["examples"]) == [4, 5]
    none = runner.invoke(cli, ["policy", "whatif", candidate, "--since", "2999-01-01"])
    assert none.exit_code == 0 and none.stdout == "no recorded contexts in that period\n"


def test_records_without_a_context_are_skipped_and_said(tmp_path: Path, runner: CliRunner) -> None:
    from rensei_routing.store.audit import AuditLog

    home = _chain(tmp_path, runner)
    with AuditLog.open(home) as log:
        log.append({"note": "a checkpoint marker"}, recorded_at="2026-01-01T00:00:00Z")
    result = runner.invoke(cli, ["policy", "whatif", str(_write(tmp_path, CANDIDATE)), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["skipped_records"] == 1
    assert "1 record(s) carry no readable context (first: seq 5)" in result.stderr


def test_whatif_needs_a_home(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["policy", "whatif", str(_write(tmp_path, CANDIDATE))])
    assert result.exit_code == 1 and "rensei init" in result.stderr
    assert result.stderr.count("\n") == 1
