"""Every record <= 1,500 bytes, and records written before the smaller shapes still read.

``tests/data/compact_v1_home`` was written by the code before compact explanations were stored
by ids and shadow records' actual routes by what the context lacks (the example policies;
``explain --record`` and ``explain-batch --record``, compact and ``--trace full``; three shadow
records each way): it must still verify, replay, what-if and show as it did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from benchmarks.record_size import TARGET_BYTES, decision_record, shadow_record
from benchmarks.workload import build_contexts, policy_set
from rensei_routing import PolicySnapshot, RouteDecision, explain_batch
from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.routing.ids import record_decision_id
from rensei_routing.core.shadow.compare import ShadowDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


@pytest.mark.parametrize("size", [10, 100])
def test_every_compact_record_keeps_to_the_target(size: int) -> None:
    ps = policy_set(size)
    snapshot = PolicySnapshot.of(ps.policies)
    for d in explain_batch(build_contexts(ps, 400, seed=size), snapshot, trace="compact"):
        for record in (decision_record(d), shadow_record(d)):
            data = encode_payload(record)
            assert len(data) <= TARGET_BYTES, data.decode()
        stored = json.loads(encode_payload(d))
        assert RouteDecision.from_dict(stored, redacted=True) == d  # reads back whole
        assert record_decision_id(stored) == d.decision_id
        shadow = json.loads(encode_payload(shadow_record(d)))
        assert ShadowDecision.from_dict(shadow, redacted=True) == shadow_record(d)


def _run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])


def test_records_written_before_still_verify_replay_whatif_and_show(tmp_path: Path) -> None:
    home = tmp_path / "h"
    shutil.copytree(DATA / "compact_v1_home", home)
    runner = CliRunner()
    assert _run(runner, home, "audit", "verify").exit_code == 0
    replay = _run(runner, home, "audit", "replay", "--json")
    assert replay.exit_code == 0, replay.output
    report = json.loads(replay.stdout)
    assert report["ok"] and report["replayed"] == 20
    whatif = _run(runner, home, "policy", "whatif", str(EXAMPLES / "policies.json"), "--json")
    assert whatif.exit_code == 0, whatif.output
    with AuditLog.open(Home(home)) as log:
        records = list(log.records())
    decisions = [r for r in records if "decision_id" in r.payload]
    n = len(decisions) // 2
    for compact, full in zip(decisions[:n], decisions[n:], strict=True):
        assert compact.payload["explanation"]["trace"] == "compact"
        assert "considered" in compact.payload["explanation"]  # the earlier compact shape
        shown = _run(runner, home, "audit", "show", str(compact.seq), "--full", "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["payload"] == full.payload
        assert record_decision_id(compact.payload) == compact.payload["decision_id"]
    shadows = [r for r in records if r.payload.get("record_type") == "shadow-decision"]
    assert len(shadows) == 6
    for r in shadows:
        read = ShadowDecision.from_dict(r.payload, redacted=True)
        assert read.actual.to_dict() == r.payload["actual"]  # the earlier, whole actual route
