"""``rensei audit tail`` reads like a log (issue 22, edge 12): a header and one line per record
(seq, recorded_at, kind, outcome, policy, route) for every kind of record the chain holds;
``--json`` is the raw form (the stored records, hashes and payloads)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.shadow.summary import RecordSummary, summarize

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _ok(*args: str) -> Result:
    done = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert done.exit_code == 0, (args, done.output)
    return done


def _home_with_every_kind(tmp_path: Path) -> str:
    home = str(tmp_path / "home")
    at = ["--home", home]
    _ok("init", *at)
    _ok("policy", "save", str(EXAMPLES / "policies.json"), *at)
    _ok("org", "load", str(EXAMPLES / "org.json"), *at)
    _ok("snapshot", "compile", *at)
    _ok("snapshot", "export", str(tmp_path / "snap.json"), *at)
    _ok("host", "trust", str(Path(home, "keys", "host.pub")), *at)
    _ok("host", "sync", "--from", str(tmp_path / "snap.json"), *at)
    _ok("--no-plugins", "explain", str(EXAMPLES / "context.json"), "--record", *at)
    receipt = str(tmp_path / "receipt.json")
    _ok("--no-plugins", "host", "claim", "--pool", "local-a", "--receipt", receipt, *at)
    _ok("--no-plugins", "host", "session", "start", "--receipt", receipt, *at)
    return home


def test_tail_prints_one_readable_line_per_record_of_every_kind(tmp_path: Path) -> None:
    home = _home_with_every_kind(tmp_path)
    lines = _ok("audit", "tail", "--home", home).stdout.splitlines()
    assert lines[0].split() == ["seq", "recorded_at", "kind", "outcome", "policy", "route"]
    rows = [line.split(None, 5) for line in lines[1:]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    mutation, decision, claim, session = rows
    assert mutation[2:5] == ["policy", "save:0->1", "+7/-0/~0"]  # the 7 example policies
    assert mutation[5].startswith("by ")
    assert decision[2] == "decision" and decision[3].split("/")[0] in {
        "selected",
        "held",
        "rejected",
    }
    assert " via " in decision[5]
    assert claim[2:5] == ["claim", claim[3], "local@1"] and claim[3].startswith("admitted")
    assert claim[5] == "pool local-a"
    assert session[2] == "session" and session[3].startswith("none->open")
    assert session[4] == "local@1" and session[5].startswith("pool local-a session ")
    # --json: the raw records, as stored
    raw = json.loads(_ok("audit", "tail", "--home", home, "--json").stdout)
    assert [r["seq"] for r in raw] == [0, 1, 2, 3]
    assert {"record_hash", "prev_hash", "payload"} <= set(raw[0])


def test_every_payload_gets_a_summary() -> None:
    assert summarize({"n": 1}) == RecordSummary("record", "-", "-", "-")
    assert summarize(None) == RecordSummary("record", "-", "-", "-")
    assert summarize(b"", error="not JSON: x") == RecordSummary(
        "UNPARSEABLE", "not JSON: x", "-", "-"
    )
    shadow = {
        "record_type": "shadow-decision",
        "agreed": False,
        "divergence": "provider",
        "actual": {"model": "glm-5.3", "account_id": "zai", "mechanism": "role-dial"},
        "proposed": {
            "outcome": "selected",
            "reason": "matched-policy",
            "policy_id": "p1",
            "effective_model": "glm-5.3",
            "account_id": "backup",
        },
    }
    assert summarize(shadow) == RecordSummary(
        "shadow",
        "diverged:provider selected/matched-policy",
        "p1",
        "glm-5.3 via backup; legacy glm-5.3 via zai (role-dial)",
    )
    imported = {
        "record_type": "hydraflow-import",
        "origin": {"chain": "c1", "seq": 4},
        "payload": {"whatever": True},
    }
    assert summarize(imported) == RecordSummary("import (record)", "-", "-", "-; from c1#4")
    assert summarize(
        {
            "record_type": "authorization-decision",
            "allowed": True,
            "reason": "permit",
            "policy_ids": ["a", "b"],
            "action": "spawn",
            "resource": "pool:x",
        }
    ) == RecordSummary("authorization", "allowed/permit", "a, b", "spawn on pool:x")
