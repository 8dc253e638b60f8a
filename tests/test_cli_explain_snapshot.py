"""``explain --snapshot`` / ``explain-batch --snapshot``: decisions resolved through the host's
cached ruleset snapshot carry document 000's stamp (rulesetRev, snapshotAgeMs, degraded); a
decision from the live store carries rulesetRev null, degraded false; both are recorded as such,
and the stamp never enters the decision id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
CONTEXT = str(EXAMPLES / "context.json")


def _run(*args: str, offset: float = 0) -> Result:
    env = {"RENSEI_REHEARSAL_CLOCK_OFFSET_S": str(offset)} if offset else {}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    control, host = tmp_path / "control", tmp_path / "host"
    for args in (
        ("init", "--home", str(control), "--org", "org_a1b2c3"),
        ("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(control)),
        ("snapshot", "compile", "--home", str(control)),
        ("snapshot", "export", str(tmp_path / "snap.json"), "--home", str(control)),
        ("init", "--home", str(host)),
        ("host", "trust", str(control / "keys" / "host.pub"), "--home", str(host)),
        ("host", "sync", "--from", str(tmp_path / "snap.json"), "--home", str(host)),
    ):
        assert _run(*args).exit_code == 0, args
    return host


def test_live_and_cached_decisions_are_distinguishable_and_recorded(host: Path) -> None:
    live = json.loads(_run("explain", CONTEXT, "--home", str(host), "--json").stdout)
    assert (live["rulesetRev"], live["snapshotAgeMs"], live["degraded"]) == (None, None, False)
    cached = json.loads(
        _run("explain", CONTEXT, "--snapshot", "--record", "--home", str(host), "--json").stdout
    )
    assert cached["rulesetRev"] == "org_a1b2c3@1" and cached["degraded"] is False
    assert isinstance(cached["snapshotAgeMs"], int)
    # the cached snapshot carries the control side's policies: a managed decision, where the
    # host's own (empty) store gives legacy compatibility; the stamp is not in the id
    assert cached["policy_source"] == "managed-policy" != live["policy_source"]
    degraded = json.loads(
        _run("explain", CONTEXT, "--snapshot", "--home", str(host), "--json", offset=400).stdout
    )
    assert degraded["degraded"] is True and degraded["decision_id"] == cached["decision_id"]
    with AuditLog.open(Home(host)) as log:
        record = log.get(0)
    stamped = StampedDecision.from_dict(record.payload, redacted=True)
    assert stamped.freshness.ruleset_rev == "org_a1b2c3@1"
    assert record.payload["degraded"] is False
    assert stamped.canonical() == canonical_bytes(record.payload)


def test_expired_snapshot_is_a_typed_refusal(host: Path) -> None:
    result = _run("explain", CONTEXT, "--snapshot", "--home", str(host), offset=2000)
    assert result.exit_code == 1 and "RefuseAfter" in result.stderr
    assert "Traceback" not in result.output
    batch = _run(
        "explain-batch",
        str(EXAMPLES / "contexts.jsonl"),
        "--snapshot",
        "--record",
        "--home",
        str(host),
        offset=2000,
    )
    assert batch.exit_code == 1 and batch.stdout == ""
    with AuditLog.open(Home(host)) as log:
        assert log.count() == 0  # nothing recorded


def test_batch_lines_carry_the_stamp(host: Path) -> None:
    out = _run("explain-batch", str(EXAMPLES / "contexts.jsonl"), "--snapshot", "--home", str(host))
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines and {line["rulesetRev"] for line in lines} == {"org_a1b2c3@1"}
    text = _run("explain", CONTEXT, "--snapshot", "--home", str(host)).stdout
    assert "ruleset     org_a1b2c3@1 (cached snapshot, age" in text


def test_snapshot_and_policies_are_exclusive(host: Path, tmp_path: Path) -> None:
    result = _run(
        "explain",
        CONTEXT,
        "--snapshot",
        "--policies",
        str(EXAMPLES / "policies.json"),
        "--home",
        str(host),
    )
    assert result.exit_code == 2


def test_no_cached_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    result = _run("explain", CONTEXT, "--snapshot", "--home", str(tmp_path / "nothing"))
    assert result.exit_code == 1 and "nothing is cached" in result.stderr  # as host status says


@pytest.mark.parametrize(
    "stamp",
    [
        Freshness.live(),
        Freshness(ruleset_rev="org@7", age_ms=12_345, degraded=True),
        Freshness(ruleset_rev='o"rg\\@1', age_ms=0, degraded=False),
    ],
)
def test_stamped_canonical_bytes_equal_the_encoder(stamp: Freshness) -> None:
    from rensei_routing import PolicySnapshot, RouteContext, explain

    doc = json.loads((EXAMPLES / "context.json").read_text())
    policies = json.loads((EXAMPLES / "policies.json").read_text())
    decision = explain(RouteContext.from_dict(doc), PolicySnapshot.from_dict(policies))
    stamped = StampedDecision(decision, stamp)
    assert stamped.canonical() == canonical_bytes(stamped.to_dict())
    assert StampedDecision.from_dict(stamped.to_dict()).freshness == stamp
