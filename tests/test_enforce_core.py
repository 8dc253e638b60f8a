"""The pure enforcement rules (rensei_routing/core/enforce/): the bound's order of checks, the
trip rule, and the records' shapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.enforce.bound import Canary, NotGoverned, bound_of, transport_bound
from rensei_routing.core.enforce.records import ENFORCE_RECORDS, arm_record, trip_record
from rensei_routing.core.enforce.trip import TRIP_FLOOR, TripRule
from rensei_routing.core.routing.members import RepoIdentity

CANARY = Canary(
    repo="acme/widgets",
    armed=True,
    revision=3,
    policy_hash="sha256:" + "0" * 64,
    gate_seq=7,
    arm_seq=8,
    override=False,
    trip_rate=None,
    trip_window_s=None,
    armed_at="2026-02-03T04:05:06.000007Z",
    armed_at_us=0,
    actor="alice",
)
ARMED = {"acme/widgets": CANARY}


@pytest.mark.parametrize(
    ("repo", "armed", "expected"),
    [
        (RepoIdentity.from_canonical("acme/widgets"), {}, NotGoverned("nothing-armed")),
        (None, ARMED, NotGoverned("no-repo")),
        (
            RepoIdentity(value="acme/widgets", version="legacy-lossy"),
            ARMED,
            NotGoverned("lossy-repo"),
        ),
        (RepoIdentity.from_runtime_slug("acme-widgets"), ARMED, NotGoverned("lossy-repo")),
        (RepoIdentity.from_canonical("acme/gadgets"), ARMED, NotGoverned("repo-not-armed")),
        (RepoIdentity.from_canonical("Acme/Widgets"), ARMED, CANARY),
    ],
    ids=["nothing-armed", "no-repo", "lossy-same-text", "lossy-slug", "other-repo", "armed"],
)
def test_the_bound(repo: RepoIdentity | None, armed: dict[str, Canary], expected: object) -> None:
    assert bound_of(repo, armed) == expected


def test_only_the_gateway_is_governed() -> None:
    assert transport_bound("gateway") is None
    for other in ("harness-direct", "direct-http"):
        assert transport_bound(other) == NotGoverned("not-gateway")
    assert not NotGoverned("not-gateway")


@given(
    rate=st.floats(0, 0.99),
    decisions=st.integers(0, 10_000),
    refusals=st.integers(0, 10_000),
)
def test_the_trip_rule(rate: float, decisions: int, refusals: int) -> None:
    refusals = min(refusals, decisions)
    trips = TripRule(rate=rate, window_s=60).trips(decisions, refusals)
    assert trips == (refusals > rate * max(decisions, TRIP_FLOOR))
    if decisions >= TRIP_FLOOR:
        assert trips == (refusals / decisions > rate)
    if refusals == 0:
        assert not trips  # no refusal never trips


def test_records_are_canonical_json_with_their_actor() -> None:
    arm = arm_record(
        recorded_at=CANARY.armed_at,
        actor="alice",
        repo="acme/widgets",
        revision=3,
        policy_hash=CANARY.policy_hash,
        gate_seq=7,
        verdict="fail",
        override_reason="rehearsal",
        trip_rate=0.1,
        trip_window_s=3600,
        prior_revision=None,
    )
    trip = trip_record(
        recorded_at=CANARY.armed_at,
        repo="acme/widgets",
        reason="refusal-rate",
        revision=3,
        armed_by="alice",
        arm_seq=8,
        decision_seq=9,
        decisions=3,
        refusals=3,
        trip_rate=0.1,
        trip_window_s=3600,
    )
    for record in (arm, trip):
        assert record["record_type"] in ENFORCE_RECORDS and record["actor"]
        canonical_bytes(record)  # raises on anything that is not canonical JSON
    assert (arm["override"], arm["reason"]) == (True, "rehearsal")
