"""Every record <= 1,500 bytes (decision, shadow and enforced-decision records), and records
written before the smaller shapes still read.

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

from benchmarks.bench_shadow import _registry
from benchmarks.record_size import TARGET_BYTES, decision_record, enforced_records, shadow_record
from benchmarks.workload import build_contexts, policy_set
from rensei_routing import PolicySnapshot, RouteDecision, explain_batch
from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.enforce.records import enforced_view, lineage_of
from rensei_routing.core.routing.ids import record_decision_id
from rensei_routing.core.shadow.compare import ShadowDecision
from rensei_routing.ops.replay import Sources, replay_chain
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


@pytest.mark.parametrize("size", [10, 100])
def test_every_enforced_record_keeps_to_the_target_and_reads_back_whole(
    tmp_path: Path, size: int
) -> None:
    home, seqs = enforced_records(tmp_path, size, 150, _registry())
    assert len(seqs) > 100  # most contexts name a canonical repository: governed
    with AuditLog.open(home) as log:
        stored = {
            r.seq: r for r in log.records() if r.payload.get("record_type") == "enforced-decision"
        }
        assert sorted(stored) == sorted(seqs)
        for r in stored.values():
            assert len(r.payload_bytes) <= TARGET_BYTES, r.payload_bytes.decode()
            view = enforced_view(r.payload)
            context = view["decision"]["explanation"]["context"]
            assert view["transport"] == "gateway" and view["repo"] == context["repo"]["value"]
            assert view["principal_id"] == context.get("principal_id")
            lineage = lineage_of(r.payload)
            assert (lineage["revision"], lineage["decision_id"]) == (
                1,
                r.payload["decision"]["decision_id"],
            )
            if view["route"] is not None:
                assert set(view["route"]) == {"provider", "account_id", "model"}
        summary = replay_chain(log, Sources(home))
    assert summary.ok and summary.by_kind.get("enforced") == len(seqs)


def test_an_enforced_record_of_the_earlier_shape_still_reads_replays_and_shows(
    tmp_path: Path,
) -> None:
    """A record that stores its whole envelope (as written before the envelope left out what
    the decision holds) reads with its own values, replays and shows its full trace."""
    home, seqs = enforced_records(tmp_path, 10, 30, _registry())
    with AuditLog.open(home) as log:
        now = next(r.payload for r in log.records() if r.seq == seqs[0])
    earlier = enforced_view(now)  # every member stored, as the earlier records did
    assert set(earlier) > set(now)
    with AuditLog.open(home) as log:
        seq = log.append(earlier, recorded_at=earlier["recorded_at"]).seq
    assert enforced_view(earlier) == earlier
    assert lineage_of(earlier) == lineage_of(now)
    runner = CliRunner()
    assert _run(runner, home.path, "audit", "verify").exit_code == 0
    replay = _run(runner, home.path, "audit", "replay", "--json")
    assert replay.exit_code == 0 and json.loads(replay.stdout)["ok"], replay.output
    shown = _run(runner, home.path, "audit", "show", str(seq), "--full", "--json")
    assert shown.exit_code == 0, shown.output
    full = json.loads(shown.stdout)["payload"]
    assert full["lineage"] == earlier["lineage"] and full["transport"] == "gateway"
    assert "eligible_account_ids" in full["decision"]["explanation"]
