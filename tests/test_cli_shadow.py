"""``rensei shadow record|report|enable|disable|status`` end to end, with the test seams installed
through a real entry point and a real home."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.shadow.compare import ShadowDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .shadow_support import home_with_policies, installed_seams, spawn, write_lines

__all__ = ["installed_seams"]

pytestmark = pytest.mark.usefixtures("installed_seams")

# Four spawns whose expected verdicts under shadow_support.POLICIES are known:
SPAWNS = [
    # client repo on Anthropic: the policy agrees
    spawn(),
    # client repo, credit failover moved it to z.ai: the policy locks Anthropic (same concrete
    # model, no mapping) -> provider
    spawn(
        stages=[
            {"mechanism": "default", "provider": "claude"},
            {"mechanism": "credit-failover", "provider": "zai"},
        ],
        model="glm-5.3",
        account_id="zai-main",
    ),
    # a loop principal at the one-shot seam, on z.ai over direct HTTP; no policy: legacy agrees
    spawn(
        seam="lightweight-agent",
        principal_id="adr_reviewer",
        repo="hydra/flow",
        repo_class="hydraflow",
        stages=[{"mechanism": "role-dial", "provider": "zai"}],
        model="glm-4.6",
        account_id="zai-main",
    ),
    # a reviewer on hydraflow ran on Claude; policy wants z.ai but no z.ai account: held
    spawn(
        seam="streaming-agent",
        principal_id="reviewer",
        repo="hydra/flow",
        repo_class="hydraflow",
        accounts=[{"account_id": "anthropic-primary", "provider_binding": "anthropic"}],
        stages=[
            {"mechanism": "maintenance-default", "provider": "claude"},
            {"mechanism": "fleet-ratchet", "provider": "gateway"},
        ],
        model="claude-sonnet-4-5",
    ),
]


def _home(tmp_path: Path) -> Home:
    return home_with_policies(tmp_path)


def _invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(cli, [*args], catch_exceptions=False)


def _stored(home: Home) -> list[ShadowDecision]:
    with AuditLog.open(home) as log:
        return [ShadowDecision.from_dict(r.payload) for r in log.records()]


def test_record_then_report_by_mechanism(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    path = write_lines(tmp_path / "spawns.jsonl", SPAWNS)
    result = _invoke(runner, "shadow", "record", str(path), "--batch", "3")
    assert result.exit_code == 0, result.output
    assert "recorded 4 spawns (seqs 0..3) against revision 1 (ok)" in result.output
    stored = _stored(home)
    assert [r.divergence for r in stored] == ["none", "provider", "none", "not-selected"]
    assert [r.actual.mechanism for r in stored] == [
        "default",
        "credit-failover",
        "role-dial",
        "fleet-ratchet",
    ]
    assert [r.actual.transport for r in stored] == [
        "harness-direct",
        "harness-direct",
        "direct-http",
        "gateway",
    ]
    assert stored[0].recorded_at == stored[2].recorded_at != stored[3].recorded_at  # 2 batches
    out = _invoke(runner, "shadow", "report", "--by", "mechanism", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    groups = {g["group"]: g for g in doc["groups"]}
    assert set(groups) == {"default", "credit-failover", "role-dial", "fleet-ratchet"}
    assert groups["credit-failover"]["divergence"]["provider"] == 1
    assert groups["credit-failover"]["agreement_rate"] == 0.0
    assert groups["role-dial"]["direct_http_share"] == 1.0
    assert groups["fleet-ratchet"]["held"] == 1
    total = doc["total"]
    assert (total["spawns"], total["agreed"], total["held"], total["direct_http"]) == (4, 2, 1, 1)
    assert total["agreement_rate"] == 0.5
    text = _invoke(runner, "shadow", "report", "--by", "mechanism")
    lines = text.output.splitlines()
    assert "disagreed with the legacy route, by kind" in lines[0]  # names the kind columns
    assert lines[1].split()[:4] == ["mechanism", "spawns", "agreed", "rate"]
    assert lines[-1].split()[:4] == ["(all)", "4", "2", "50.0%"]
    assert _invoke(runner, "audit", "verify").exit_code == 0


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("seam", {"agentic-runner": 2, "lightweight-agent": 1, "streaming-agent": 1}),
        ("repo", {"acme/widgets": 2, "hydra/flow": 2}),
        ("role", {"implementer": 2, "(none)": 1, "reviewer": 1}),
        ("transport", {"harness-direct": 2, "direct-http": 1, "gateway": 1}),
    ],
)
def test_report_groups(
    tmp_path: Path, runner: CliRunner, by: str, expected: dict[str, int]
) -> None:
    _home(tmp_path)
    _invoke(runner, "shadow", "record", str(write_lines(tmp_path / "s.jsonl", SPAWNS)))
    doc = json.loads(_invoke(runner, "shadow", "report", "--by", by, "--json").output)
    assert {g["group"]: g["spawns"] for g in doc["groups"]} == expected


def test_every_line_is_checked_before_anything_is_recorded(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = _home(tmp_path)
    bad = [*SPAWNS, spawn(seam="lightweight-agent")]  # lightweight has no plain "default" stage
    path = write_lines(tmp_path / "bad.jsonl", bad)
    result = runner.invoke(cli, ["shadow", "record", str(path)])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "bad.jsonl:5: stages[0]" in result.stderr
    assert "Traceback" not in result.output
    assert _stored(home) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "s.jsonl:2: not valid JSON"),
        (json.dumps(spawn(seam="warp-drive")), "s.jsonl:2: seam: no seam named 'warp-drive'"),
        (json.dumps(spawn(face="one-shot")), "contradicts seam 'agentic-runner'"),
        (json.dumps({**spawn(), "route": {"provider": "zai"}}), "exactly one of"),
    ],
    ids=["json", "unknown-seam", "face", "stages-and-route"],
)
def test_bad_lines_name_the_line(
    tmp_path: Path, runner: CliRunner, line: str, message: str
) -> None:
    home = _home(tmp_path)
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(SPAWNS[0]) + "\n" + line + "\n")
    result = runner.invoke(cli, ["shadow", "record", str(path)])
    assert result.exit_code == 1
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert _stored(home) == []


def test_the_seam_option_fills_and_guards_lines(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    path = write_lines(tmp_path / "s.jsonl", [spawn(seam=None), spawn(seam=None)])
    result = _invoke(runner, "shadow", "record", str(path), "--seam", "subprocess-runner")
    assert result.exit_code == 0, result.output
    assert {r.seam for r in _stored(home)} == {"subprocess-runner"}
    other = write_lines(tmp_path / "o.jsonl", [spawn()])
    result = runner.invoke(cli, ["shadow", "record", str(other), "--seam", "subprocess-runner"])
    assert result.exit_code == 1 and "contradicts --seam" in result.stderr
    unknown = runner.invoke(cli, ["shadow", "record", str(path), "--seam", "nope"])
    assert unknown.exit_code == 1 and "no seam named 'nope'" in unknown.stderr
    assert len(_stored(home)) == 2


def test_the_kill_switch(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    path = write_lines(tmp_path / "s.jsonl", SPAWNS)
    assert _invoke(runner, "shadow", "status").output == "shadow recording: on\n"
    assert _invoke(runner, "shadow", "disable").exit_code == 0
    assert json.loads(_invoke(runner, "shadow", "status", "--json").output) == {"enabled": False}
    refused = runner.invoke(cli, ["shadow", "record", str(path)])
    assert refused.exit_code == 1 and "shadow recording is off" in refused.stderr
    assert _stored(home) == []
    assert _invoke(runner, "shadow", "enable").exit_code == 0
    assert _invoke(runner, "shadow", "record", str(path)).exit_code == 0
    assert len(_stored(home)) == 4


def test_an_uninitialised_home_is_one_line(tmp_path: Path, runner: CliRunner) -> None:
    path = write_lines(tmp_path / "s.jsonl", SPAWNS)
    for args in (["shadow", "record", str(path)], ["shadow", "report"], ["shadow", "status"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, args
        assert "rensei init" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "home").exists()


def test_report_refuses_a_broken_chain_unless_unverified(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _invoke(runner, "shadow", "record", str(write_lines(tmp_path / "s.jsonl", SPAWNS)))
    with closing(home.connect(write=True)) as conn, conn:
        # the canonical bytes, however stored (a forger decompresses too)
        payload = conn.execute(
            "SELECT rensei_payload(payload) FROM audit_records WHERE seq = 1"
        ).get
        assert isinstance(payload, bytes)
        forged = payload.replace(b'"divergence":"provider"', b'"divergence":"none"')
        forged = forged.replace(b'"agreed":false', b'"agreed":true')
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 1", (forged,))
    refused = runner.invoke(cli, ["shadow", "report", "--by", "seam"])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "does not verify (seq 1: payload-hash-mismatch)" in refused.stderr
    assert refused.stderr.count("\n") == 1
    anyway = runner.invoke(cli, ["shadow", "report", "--unverified", "--json"])
    assert anyway.exit_code == 0
    doc = json.loads(anyway.stdout)
    assert doc["verified"] is False
    assert doc["unreadable_records"] == 1  # the forgery does not even read back
    assert doc["total"]["spawns"] == 3


def test_report_counts_only_shadow_records_since(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    with AuditLog.open(home) as log:
        log.append({"note": "not a decision"}, recorded_at="2020-01-01T00:00:00Z")
    _invoke(runner, "shadow", "record", str(write_lines(tmp_path / "s.jsonl", SPAWNS)))
    doc = json.loads(_invoke(runner, "shadow", "report", "--json").output)
    assert (doc["total"]["spawns"], doc["other_records"]) == (4, 1)
    later = _invoke(runner, "shadow", "report", "--since", "2999-01-01", "--json")
    assert json.loads(later.output)["total"]["spawns"] == 0
    assert _invoke(runner, "shadow", "report", "--since", "2999-01-01").output == (
        "no shadow records in that period\n"
    )
    recent = json.loads(_invoke(runner, "shadow", "report", "--since", "1h", "--json").output)
    assert (recent["total"]["spawns"], recent["other_records"]) == (4, 0)
    bad = runner.invoke(cli, ["shadow", "report", "--since", "2026-01-01T00:00:00"])
    assert bad.exit_code == 2 and "no time zone" in bad.stderr


def test_record_reads_stdin_and_speaks_json(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    text = "".join(json.dumps(d) + "\n\n" for d in SPAWNS)  # blank lines are skipped
    result = runner.invoke(cli, ["shadow", "record", "-", "--json"], input=text)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["recorded"], doc["first_seq"], doc["last_seq"]) == (4, 0, 3)
    assert (doc["policy_revision"], doc["snapshot_state"], doc["agreed"]) == (1, "ok", 2)
    assert doc["divergence"] == {
        "none": 2,
        "provider": 1,
        "model": 0,
        "provider-and-model": 0,
        "not-selected": 1,
    }
    assert len(_stored(home)) == 4
    empty = runner.invoke(cli, ["shadow", "record", "-"], input="\n")
    assert empty.exit_code == 0
    assert empty.stdout == "recorded 0 spawns against revision 1 (ok)\n"
    assert len(_stored(home)) == 4


def test_since_edges(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path)
    _invoke(runner, "shadow", "record", str(write_lines(tmp_path / "s.jsonl", SPAWNS)))
    too_far = runner.invoke(cli, ["shadow", "report", "--since", "999999999d"])
    assert too_far.exit_code == 2 and "before the year 1" in too_far.stderr
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute("UPDATE audit_records SET recorded_at = 'yesterday' WHERE seq = 0")
    damaged = runner.invoke(
        cli, ["shadow", "report", "--unverified", "--since", "2000-01-01", "--json"]
    )
    assert damaged.exit_code == 0, damaged.output
    assert json.loads(damaged.stdout)["total"]["spawns"] == 3  # the undated record is not since


@pytest.mark.parametrize(("args", "compact"), [((), True), (("--trace", "full"), False)])
def test_shadow_record_stores_the_compact_explanation_unless_asked_for_the_full_one(
    runner: CliRunner, tmp_path: Path, args: tuple[str, ...], compact: bool
) -> None:
    home = home_with_policies(tmp_path)
    path = write_lines(tmp_path / "s.jsonl", SPAWNS)
    result = runner.invoke(cli, ["--home", str(home.path), "shadow", "record", str(path), *args])
    assert result.exit_code == 0, result.output
    with AuditLog.open(home) as log:
        shadows = [r.payload for r in log.records() if "proposed" in r.payload]
    assert len(shadows) == len(SPAWNS)
    for payload in shadows:
        explanation = payload["proposed"]["explanation"]
        assert ("trace" in explanation) is compact
        assert ("eligible_account_ids" in explanation) is not compact
