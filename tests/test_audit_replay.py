"""``rensei audit replay`` (issue 21): every recorded decision decided again from its stored
context against the revision it cites. A record whose context an attacker with the key edited
(and whose chain they rehashed) passes ``verify`` and fails replay; an edited revision fails it;
a redacted context and a snapshot this home no longer holds are reported apart (exit 4), never as
matches; a revision this home never held is a mismatch."""

from __future__ import annotations

import json
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.audit.replay import decision_of
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.snapshot.envelope import seal
from rensei_routing.host.cache import HostCache
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
CONTROL = signing.PrivateKey(bytes(range(32)))


def _run(runner: CliRunner, home: Path, *args: str, stdin: str | None = None) -> Result:
    return runner.invoke(cli, ["--no-plugins", "--home", str(home), *args], input=stdin)


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "h"
    for args in (
        ["init", "--org", "acme"],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["explain", "--record", str(EXAMPLES / "context.json")],
        ["explain-batch", "--record", str(EXAMPLES / "contexts.jsonl")],
        ["policy", "save", str(EXAMPLES / "policies.json")],  # revision 2: same policies
        ["explain", "--record", str(EXAMPLES / "context.json")],
    ):
        result = _run(runner, path, *args)
        assert result.exit_code == 0, result.output
    return path


def _replay(runner: CliRunner, home: Path) -> tuple[int, dict[str, Any]]:
    result = _run(runner, home, "audit", "replay", "--json")
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


def _records(home: Path) -> list[tuple[str, Any]]:
    with AuditLog.open(Home(home)) as log:
        return [(r.recorded_at, r.payload) for r in log.records()]


def _rewrite(home: Path, records: list[tuple[str, Any]]) -> None:
    """What an attacker holding the host key does: replace the chain with one of their own,
    every link and hash recomputed, a fresh checkpoint signed."""
    with closing(Home(home).connect(write=True)) as conn, conn:
        conn.execute("DELETE FROM audit_records")
        conn.execute("DELETE FROM audit_checkpoints")
        conn.execute("DELETE FROM audit_tree")
    with AuditLog.open(Home(home)) as log:
        for recorded_at, payload in records:
            log.append(payload, recorded_at=recorded_at)
        log.checkpoint()


def test_every_recorded_decision_replays_to_itself(home: Path, runner: CliRunner) -> None:
    code, report = _replay(runner, home)
    lines = len((EXAMPLES / "contexts.jsonl").read_text().splitlines())
    assert code == 0
    assert report["replayed"] == report["matched"] == 2 + lines
    assert report["mismatched"] == 0 and report["unreplayable"] == {}
    text = _run(runner, home, "audit", "replay").stdout.splitlines()
    assert text[0] == f"replayed {2 + lines}, matched {2 + lines}, mismatched 0"


def test_an_edited_context_with_a_rehashed_chain_passes_verify_and_fails_replay(
    home: Path, runner: CliRunner
) -> None:
    records = _records(home)
    _, payload = records[1]  # seq 0 is revision 1's policy-mutation record
    payload["explanation"]["context"]["principal_id"] = "reviewer"  # who asked, changed
    _rewrite(home, records)
    assert _run(runner, home, "audit", "verify").exit_code == 0  # the bytes hold together
    code, report = _replay(runner, home)
    assert code == 1
    assert report["firstMismatch"]["seq"] == 1
    assert report["firstMismatch"]["field"] in ("outcome", "reason", "policy_id", "decision_id")
    result = _run(runner, home, "audit", "replay")
    assert result.exit_code == 1
    assert "mismatched 1 (first: seq 1, field" in result.stdout
    assert result.stderr.startswith("Error: 1 replayed decision(s) disagree")


def test_an_edited_decision_field_fails_replay(home: Path, runner: CliRunner) -> None:
    records = _records(home)
    records[1][1]["effective_model"] = "glm-5.3"  # seq 0 is a policy-mutation record
    _rewrite(home, records)
    code, report = _replay(runner, home)
    assert (code, report["firstMismatch"]) == (1, {"seq": 1, "field": "effective_model"})


@pytest.mark.parametrize("rehash", [True, False])
def test_an_edited_revision_in_the_store_fails_replay(
    home: Path, runner: CliRunner, rehash: bool
) -> None:
    with closing(Home(home).connect(write=True)) as conn, conn:
        conn.execute(
            "UPDATE policy_revisions SET body = CAST(? AS BLOB) WHERE revision = 1",
            (b"[]",),
        )
        if rehash:  # the content hash made to match the edited body: a different policy set
            from rensei_routing.core.routing.policy import hash_policies

            conn.execute(
                "UPDATE policy_revisions SET content_hash = ? WHERE revision = 1",
                (hash_policies(()),),
            )
    code, report = _replay(runner, home)
    assert code == 1
    assert report["firstMismatch"]["seq"] == 1  # seq 0: revision 1's policy-mutation record
    assert report["firstMismatch"]["field"] == ("snapshot_hash" if rehash else "policy_revision")
    assert report["matched"] >= 1  # revision 2's decision still replays


def test_a_redacted_context_that_no_longer_decides_the_same_is_unreplayable(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "r"
    policies = {
        "policies": [
            {
                "id": "globex-billing",
                "priority": 10,
                "match": {"repo_ids": ["globex/asiapacificbilling01"]},
                "action": {"account_pool": ["anthropic-primary"]},
            }
        ]
    }
    policy_file = tmp_path / "p.json"
    policy_file.write_text(json.dumps(policies))
    context = {
        "repo": "globex/asiapacificbilling01",  # the AWS key pattern matches: redacted
        "repo_class": "client",
        "principal_id": "implementer",
        "model_requirement": {"kind": "concrete_model", "value": "claude-sonnet-4-5"},
        "accounts": [{"account_id": "anthropic-primary", "provider_binding": "anthropic"}],
    }
    assert _run(runner, home, "init").exit_code == 0
    # `policy save` refuses this repo id (credential-shaped, issue 30): the revision is written
    # as a store from before that check could have it.
    from rensei_routing.core.routing.policy import RoutingPolicy
    from rensei_routing.store.policies import PolicyStore

    with closing(Home(home).connect(write=True)) as conn:
        PolicyStore(conn).save(
            [RoutingPolicy.from_dict(d) for d in policies["policies"]],
            saved_at="2026-11-29T12:00:00.000000Z",
        )
    recorded = _run(runner, home, "explain", "--record", json.dumps(context))
    assert recorded.exit_code == 0, recorded.output
    _, payload = _records(home)[0]
    assert "[REDACTED:" in json.dumps(payload["explanation"]["context"]["repo"])
    code, report = _replay(runner, home)
    assert code == 4  # not a mismatch, not a clean replay either
    assert (report["replayed"], report["unreplayable"]) == (0, {"redacted input": 1})


def test_a_revision_this_home_never_held_is_a_mismatch(home: Path, runner: CliRunner) -> None:
    # no decision recorded here cites one (explain --record refuses --policies FILE): a record
    # that does was not decided here (tests/test_audit_replay_forged.py has the forgery)
    records = _records(home)
    records[1][1]["policy_revision"] = 7  # seq 0 is a policy-mutation record
    _rewrite(home, records)
    code, report = _replay(runner, home)
    assert (code, report["firstMismatch"]) == (1, {"seq": 1, "field": "policy_revision"})
    assert report["unreplayable"] == {}


def test_claims_replay_their_grant_check_against_the_snapshot_they_cite(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "host"
    assert _run(runner, home, "init").exit_code == 0
    cache = HostCache(home / "host")
    cache.trust(CONTROL.public_key)
    now = datetime.now(UTC)

    def snap(revision: int, granted: bool) -> bytes:
        return seal(
            org_id="org_a",
            revision=revision,
            compiled_at=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            sections={
                "poolHostInventory": {"pools": [{"id": "pool-a", "status": "active"}]},
                "capacityProfiles": {
                    "profiles": [{"id": "g", "pools": ["pool-a"]}],
                    "grants": [{"profile": "g"}] if granted else [],
                },
            },
            signing_key_id=CONTROL.public_key.key_id,
            sign=CONTROL.sign,
        ).to_bytes()

    cache.accept(snap(1, True), now=now, source="test")
    assert _run(runner, home, "host", "claim", "--pool", "pool-a").exit_code == 0
    assert _run(runner, home, "host", "claim", "--pool", "pool-b").exit_code == 1
    code, report = _replay(runner, home)
    assert code == 0 and report["byKind"] == {"claim": 2} and report["matched"] == 2
    # a claim record whose grant verdict was edited (chain rehashed with the key) is caught
    records = _records(home)
    grant = next(
        o for o in records[0][1]["authorization"]["authorizers"] if o["name"] == "grant-check"
    )
    grant["reason"] = "pool-not-granted"
    grant["allowed"] = False
    _rewrite(home, records)
    code, report = _replay(runner, home)
    assert (code, report["firstMismatch"]) == (1, {"seq": 0, "field": "allowed"})
    # once the host holds a newer snapshot, the older one's claims cannot be re-run here
    cache.accept(snap(2, False), now=now, source="test")
    code, report = _replay(runner, home)
    assert report["unreplayable"] == {"snapshot org_a@1 absent": 2} and code == 4


def test_decision_of_takes_plain_and_shadow_records_only() -> None:
    plain = {"decision_id": "sha256:x", "explanation": {"context": {}}}
    assert decision_of(plain) == ("decision", plain)
    assert decision_of({"record_type": "shadow-decision", "proposed": plain}) == ("shadow", plain)
    assert decision_of({"record_type": "claim-decision", **plain}) is None
    assert decision_of({"decision_id": "sha256:x"}) is None
    assert decision_of([plain]) is None
    assert canonical_bytes(plain)  # the fixture is a canonical JSON value
