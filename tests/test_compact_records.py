"""Compact decision records: a record carries the context, the revision and hashes, the outcome
and a compact explanation (the winner and its ties, the rest counted); the full per-policy
trace is re-derived on demand through replay's path (``rensei audit show SEQ --full``, the
console's decision page). Nothing is lost: for every decision of the policy sets below, the
re-derived payload is byte for byte what a record made with the full trace stores. Records with
the full trace (``--trace full``, and every record written before compact records) still
verify, show, replay and what-if as before."""

from __future__ import annotations

import json
import statistics
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.workload import build_contexts, policy_set
from rensei_routing import PolicySnapshot, RouteContext, RouteDecision, RoutingPolicy
from rensei_routing.cli import cli
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing.resolver import explain, explain_batch
from rensei_routing.errors import TraceUnavailableError
from rensei_routing.ops.rederive import full_trace
from rensei_routing.ops.replay import Sources
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .shadow_support import home_with_policies, registry, spawn
from .strategies import context_dicts, policy_dicts
from .test_core_semantics import DECISION_CASES

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
STAMP = "2026-01-01T00:00:00.000000Z"
#: The size a compact decision record keeps to (typical record), at any policy count.
TARGET_BYTES = 1_500


def _rederived_equals_full(compact: RouteDecision, full: RouteDecision, snap: Any) -> None:
    """Re-derive as replay does (the stored context, read back from the stored bytes, against
    the snapshot) and compare with what a full-trace record stores."""
    stored = RouteDecision.from_dict(json.loads(compact.canonical()), redacted=True)
    assert stored == compact  # the compact record reads back as it was written
    again = explain(
        stored.explanation.context, snap, snapshot_state=stored.snapshot_state, trace="full"
    )
    assert again.canonical() == full.canonical()
    assert compact.decision_id == full.decision_id  # ids keep their meaning


# -- nothing lost, in the core ------------------------------------------------------------------


@pytest.mark.parametrize(("ctx_doc", "docs", "state", "expected"), DECISION_CASES)
def test_every_specified_decision_rederives_to_its_full_trace(
    ctx_doc: dict[str, Any], docs: list[dict[str, Any]], state: str, expected: Any
) -> None:
    snap = PolicySnapshot.of([RoutingPolicy.from_dict(d) for d in docs], revision=7)
    ctx = RouteContext.from_dict(ctx_doc)
    compact = explain(ctx, snap, snapshot_state=state, trace="compact")
    full = explain(ctx, snap, snapshot_state=state, trace="full")
    assert compact.explanation.compact and not full.explanation.compact
    _rederived_equals_full(compact, full, snap)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(policy_dicts(ids=[f"p{i}" for i in range(30)]), max_size=30),
    st.lists(context_dicts(), min_size=1, max_size=4),
    st.sampled_from(["ok", "absent", "corrupt"]),
)
def test_generated_decisions_rederive_to_their_full_trace(
    policies: list[dict[str, Any]], contexts: list[dict[str, Any]], state: str
) -> None:
    snap = PolicySnapshot.of(tuple(RoutingPolicy.from_dict(p) for p in policies), revision=3)
    ctxs = [RouteContext.from_dict(c) for c in contexts]
    compacts = explain_batch(ctxs, snap, snapshot_state=state, trace="compact")
    fulls = explain_batch(ctxs, snap, snapshot_state=state, trace="full")
    for compact, full in zip(compacts, fulls, strict=True):
        ex = compact.explanation
        # the compact explanation: the winners, every other match counted, the rest counted
        matched = [c for c in full.explanation.considered if c.matched]
        assert ex.considered == tuple(c for c in matched if c.reason == "matched")
        assert ex.unlisted_outranked_count == len(matched) - len(ex.considered)
        assert ex.unlisted_policy_count == len(full.explanation.considered) - len(matched)
        assert ex.eligible_account_ids == () and ex.rejected_accounts == ()
        assert compact.canonical() == canonical_bytes(compact.to_dict())
        _rederived_equals_full(compact, full, snap)


# -- nothing lost, through a home: the benchmark's policy sets ----------------------------------


def _home(tmp_path: Path, policies: tuple[RoutingPolicy, ...]) -> tuple[Home, PolicySnapshot]:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    with closing(home.connect(write=True)) as conn:
        store = PolicyStore(conn)
        store.save(policies, saved_at=STAMP)
        snap = store.load().snapshot
    assert snap is not None
    return home, snap


def _stored(home: Home) -> list[tuple[int, bytes, Any]]:
    with AuditLog.open(home) as log:
        return [(r.seq, r.payload_bytes, r.payload) for r in log.records()]


@pytest.mark.parametrize("size", [10, 100, 1_000])
def test_a_compact_record_rederives_to_what_a_full_record_stores(tmp_path: Path, size: int) -> None:
    ps = policy_set(size)
    home, snap = _home(tmp_path, ps.policies)
    contexts = build_contexts(ps, 40, seed=size)
    compact = explain_batch(contexts, snap, trace="compact")
    full = explain_batch(contexts, snap, trace="full")
    with AuditLog.open(home) as log:
        log.append_many(compact, recorded_at=STAMP)
        log.append_many(full, recorded_at=STAMP)
    records = [r for r in _stored(home) if "decision_id" in r[2]]
    assert len(records) == 2 * len(contexts)
    sources = Sources(home)
    sizes = []
    for (seq, compact_bytes, payload), (_, full_bytes, full_payload) in zip(
        records[: len(contexts)], records[len(contexts) :], strict=True
    ):
        sizes.append(len(compact_bytes))
        found = full_trace(payload, sources, where=f"record {seq}")
        assert found.rederived and found.revision == snap.revision
        assert canonical_bytes(found.payload) == full_bytes
        as_stored = full_trace(full_payload, sources, where="full")
        assert not as_stored.rederived and as_stored.payload == full_payload
    # a tenth the size: the compact record does not grow with the policy count
    assert statistics.median(sizes) <= TARGET_BYTES


def test_a_compact_shadow_record_rederives_to_what_a_full_one_stores(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    spawns = [
        spawn(),
        spawn(repo_class="hydraflow", principal_id="reviewer", model_requirement="balanced"),
        spawn(repo_class="personal"),
    ]
    from rensei_routing.core.shadow.spawn import Spawn

    items = [Spawn.from_dict(s) for s in spawns]
    with ShadowRecorder(home, registry(), clock=lambda: STAMP) as default:
        records, _ = default.record_many(items)
    assert all(r.proposed.explanation.compact for r in records)  # compact by default
    with ShadowRecorder(home, registry(), clock=lambda: STAMP, trace="full") as full:
        full.record_many(items)
    stored = [r for r in _stored(home) if r[2].get("record_type") == "shadow-decision"]
    n = len(items)
    sources = Sources(home)
    for (seq, _, payload), (_, full_bytes, _) in zip(stored[:n], stored[n:], strict=True):
        assert payload["proposed"]["explanation"]["trace"] == "compact"
        found = full_trace(payload, sources, where=f"record {seq}")
        assert found.rederived
        assert canonical_bytes(found.payload) == full_bytes


# -- the CLI: compact by default, --trace full kept, audit show --full --------------------------


def _run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(cli, ["--no-plugins", "--home", str(home), *args])


@pytest.fixture
def mixed_home(tmp_path: Path, runner: CliRunner) -> Path:
    """Compact records (the default) and full-trace records (``--trace full``, what every
    record written before compact records holds) in one chain."""
    path = tmp_path / "h"
    for args in (
        ["init", "--org", "acme"],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["explain", "--record", str(EXAMPLES / "context.json")],
        ["explain-batch", "--record", str(EXAMPLES / "contexts.jsonl")],
        ["explain", "--record", "--trace", "full", str(EXAMPLES / "context.json")],
        ["explain-batch", "--record", "--trace", "full", str(EXAMPLES / "contexts.jsonl")],
    ):
        result = _run(runner, path, *args)
        assert result.exit_code == 0, result.output
    return path


def test_full_and_compact_records_verify_replay_and_whatif(
    mixed_home: Path, runner: CliRunner
) -> None:
    stored = _stored(Home(mixed_home))
    decisions = [p for _, _, p in stored if "decision_id" in p]
    lines = len((EXAMPLES / "contexts.jsonl").read_text().splitlines())
    assert len(decisions) == 2 * (1 + lines)
    compact = [d for d in decisions if d["explanation"].get("trace") == "compact"]
    assert len(compact) == 1 + lines
    assert _run(runner, mixed_home, "audit", "verify").exit_code == 0
    replay = _run(runner, mixed_home, "audit", "replay", "--json")
    assert replay.exit_code == 0, replay.output
    report = json.loads(replay.stdout)
    assert report["matched"] == report["replayed"] == len(decisions)
    whatif = _run(runner, mixed_home, "policy", "whatif", str(EXAMPLES / "policies.json"), "--json")
    assert whatif.exit_code == 0, whatif.output
    assert json.loads(whatif.stdout)["contexts"] == len(decisions)


def test_audit_show_full_rederives_a_compact_record(mixed_home: Path, runner: CliRunner) -> None:
    stored = _stored(Home(mixed_home))
    seqs = [s for s, _, p in stored if "decision_id" in p]
    compact_seq, full_seq = seqs[0], seqs[len(seqs) // 2]
    plain = json.loads(_run(runner, mixed_home, "audit", "show", str(compact_seq), "--json").stdout)
    assert plain["payload"]["explanation"]["trace"] == "compact"
    shown = _run(runner, mixed_home, "audit", "show", str(compact_seq), "--full", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["trace_rederived"] is True
    # what the same decision recorded with --trace full stores
    full_record = json.loads(
        _run(runner, mixed_home, "audit", "show", str(full_seq), "--json").stdout
    )
    assert data["payload"] == full_record["payload"]
    again = json.loads(
        _run(runner, mixed_home, "audit", "show", str(full_seq), "--full", "--json").stdout
    )
    assert again["trace_rederived"] is False and again["payload"] == full_record["payload"]
    text = _run(runner, mixed_home, "audit", "show", str(compact_seq), "--full").stdout
    assert "trace:        full, re-derived" in text and '"eligible_account_ids"' in text


def test_audit_show_full_refuses_what_it_cannot_rederive(
    mixed_home: Path, runner: CliRunner
) -> None:
    before = _stored(Home(mixed_home))
    result = _run(runner, mixed_home, "audit", "show", "0", "--full")  # a policy mutation
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "Error: record 0 holds no routing decision: no trace to re-derive"
    ]
    assert "Traceback" not in result.output
    assert _stored(Home(mixed_home)) == before  # nothing written


def test_a_changed_revision_is_refused_not_explained(tmp_path: Path) -> None:
    """A trace of another decision would explain nothing: a record whose stored decision the
    replay does not give again is refused with the field that differs."""
    ps = policy_set(10)
    home, snap = _home(tmp_path, ps.policies)
    decision = explain(build_contexts(ps, 1, seed=1)[0], snap, trace="compact")
    payload = json.loads(decision.canonical())
    payload["effective_model"] = "glm-5.3" if decision.effective_model != "glm-5.3" else "x"
    with pytest.raises(TraceUnavailableError, match="it differs on effective_model"):
        full_trace(payload, Sources(home), where="record 9")
