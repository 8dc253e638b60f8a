"""What an Enforcer keeps across requests (rensei_routing/enforce/enforcer.py: each question's
route, decision and record template, by spawn and deciding stage, and by pin) changes nothing
it answers or stores: a stream of requests, the same ones asked again and again, answers and
stores byte for byte what the plain path gives for each request on its own (the seam's route,
``explain`` under the pinned snapshot, ``encode_payload`` of ``decision_record``), whatever the
spawns, their order and their times, credentials in them included."""

from __future__ import annotations

import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing import EnforcedRoute, EnforcementRefused, Enforcer, NotGoverned
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.enforce.records import decision_record
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing.decision import STATE_OK
from rensei_routing.core.routing.resolver import RECORD_TRACE, explain
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.enforce import arm
from rensei_routing.enforce.enforcer import _answer
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.enforcement import armed
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .enforce_support import ANTHROPIC_ONLY, NOW, REPO, gateway_doc, locked_to_zai, make_home
from .shadow_support import ACCOUNTS, registry

_SECRET = "ghp_" + "a1" * 18
#: The spawns of a stream: the same question often, and ones that differ in what the record
#: holds (principal, model, accounts, the deciding stage, a credential where a name goes).
_DOCS = [
    gateway_doc(),
    gateway_doc(principal_id="reviewer"),
    gateway_doc(principal_id=_SECRET),
    gateway_doc(model="claude-opus-4-1"),
    gateway_doc(accounts=ACCOUNTS),
    gateway_doc(accounts=ACCOUNTS, account_id="zai-main"),
    gateway_doc(
        stages=[
            {"mechanism": "default", "provider": "claude"},
            *[{"mechanism": "fleet-ratchet", "provider": "gateway"}],
        ]
    ),
    gateway_doc(accounts=ANTHROPIC_ONLY, model=None),
]


def _home(root: Path, policies: dict[str, Any]) -> Home:
    home = make_home(root, policies)
    arm(home, REPO, now=NOW, actor="alice", override=True, reason="a stream of requests")
    return home


def _plain(home: Home, spawn: Spawn, recorded_at: str) -> tuple[str, bytes]:
    """The answer and the stored bytes of ``spawn``'s request worked out afresh, as the
    Enforcer did before it kept anything."""
    with Enforcer(home, registry()) as fresh, closing(home.connect()) as conn:
        canary = armed(conn)[REPO]
        context, actual = fresh.route(spawn)  # the seam's route, nothing kept
        snapshot = PolicyStore(conn).load(canary.revision).snapshot
    decision = explain(
        context, snapshot, snapshot_state=STATE_OK, redactor=DEFAULT_REDACTOR, trace=RECORD_TRACE
    )
    answer, account, model = _answer(decision, actual)
    record = decision_record(
        recorded_at=recorded_at,
        seam=spawn.seam,
        principal_id=spawn.principal_id,
        repo=canary.repo,
        answer=answer,
        provider=actual.provider,
        account_id=account,
        model=model,
        revision=canary.revision,
        policy_hash=canary.policy_hash,
        decision=decision,
    )
    return answer, encode_payload(record, DEFAULT_REDACTOR)


def _stream(policies: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = _home(Path(tmp), policies)

        @settings(max_examples=25, deadline=None)
        @given(st.lists(st.integers(0, len(_DOCS) - 1), min_size=1, max_size=12))
        def check(picks: list[int]) -> None:
            times = iter(f"2026-02-03T05:{i // 60:02d}:{i % 60:02d}.{i:06d}Z" for i in range(99))
            stamps: list[str] = []

            def clock() -> str:
                stamps.append(next(times))
                return stamps[-1]

            answers: list[tuple[str, int | None]] = []
            with Enforcer(home, registry(), clock=clock) as enforcer:
                for i in picks:  # fresh Spawn values: kept by value, not by object
                    try:
                        got = enforcer.enforce(Spawn.from_dict(_DOCS[i]))
                    except EnforcementRefused as refused:
                        answers.append((refused.code, refused.seq))
                    else:
                        assert not isinstance(got, NotGoverned)
                        assert isinstance(got, EnforcedRoute)
                        answers.append((got.kind, got.seq))
            with AuditLog.open(home) as log:
                stored = [log.get(seq).payload_bytes for _, seq in answers if seq is not None]
            for (answer, _), pick, stamp, data in zip(answers, picks, stamps, stored, strict=True):
                assert (answer, data) == _plain(home, Spawn.from_dict(_DOCS[pick]), stamp)

        check()


def test_a_stream_of_repeated_requests_stores_the_plain_paths_bytes() -> None:
    _stream(
        {
            "policies": [
                {
                    "id": "keep",
                    "priority": 10,
                    "match": {"repo_ids": [REPO]},
                    "action": {"provider_lock": "anthropic"},
                }
            ]
        }
    )


def test_a_stream_of_held_and_enforced_requests_stores_the_plain_paths_bytes() -> None:
    _stream(locked_to_zai())
