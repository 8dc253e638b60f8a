"""The four failure postures (document 000) and the claim gate: each failure mode gives the
posture's answer, never a silent widen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from rensei_routing.core.snapshot.postures import (
    POSTURES,
    ClaimGate,
    DecisionClass,
    Posture,
    admit_budget,
    authorize,
    choose_arm,
)


def _raise(exc: Exception) -> Any:
    def f() -> Any:
        raise exc

    return f


def test_class_posture_table() -> None:
    assert dict(POSTURES) == {
        DecisionClass.AUTHORIZATION: Posture.FAIL_CLOSED,
        DecisionClass.PLACEMENT: Posture.FAIL_STATIC,
        DecisionClass.BUDGET: Posture.CONSERVATIVE_CAP,
        DecisionClass.BANDIT: Posture.FAIL_OPEN_DETERMINISTIC,
    }


@pytest.mark.parametrize(
    ("evaluate", "default_permit", "allowed", "reason"),
    [
        (lambda: True, False, True, "permit"),
        (lambda: False, False, False, "forbid"),
        (lambda: False, True, False, "forbid"),  # default-permit never overrides a forbid
        (lambda: None, False, False, "no-policy"),
        (lambda: None, True, True, "default-permit"),
        (_raise(OSError("policy source unreachable")), False, False, "evaluation-failed"),
        # a read failure never becomes a permit, even with the default-permit fallback declared
        (_raise(KeyError("section")), True, False, "evaluation-failed"),
        (lambda: "yes", True, False, "evaluation-failed"),
        (lambda: 1, False, False, "evaluation-failed"),
    ],
    ids=[
        "permit",
        "forbid",
        "forbid-with-default",
        "no-policy",
        "default-permit",
        "unreachable",
        "failure-with-default",
        "string-verdict",
        "int-verdict",
    ],
)
def test_authorization_fails_closed(
    evaluate: Any, default_permit: bool, allowed: bool, reason: str
) -> None:
    result = authorize(evaluate, default_permit=default_permit)
    assert (result.allowed, result.reason, bool(result)) == (allowed, reason, allowed)


def _budget(**over: Any) -> Any:
    args: dict[str, Any] = {
        "read_counter": lambda: 3,
        "limit": 10,
        "read_live_signal": lambda: True,
        "local_inflight": 0,
        "local_cap": 2,
    }
    args.update(over)
    return admit_budget(**args)


@pytest.mark.parametrize(
    ("over", "admitted", "reason"),
    [
        ({}, True, "within-limit"),
        ({"read_counter": lambda: 10}, False, "over-limit"),
        # the authoritative counter fails closed, even with local headroom
        ({"read_counter": _raise(TimeoutError())}, False, "counter-unavailable"),
        ({"read_counter": lambda: True}, False, "counter-unavailable"),
        ({"read_live_signal": lambda: False}, False, "live-signal-throttled"),
        ({"read_live_signal": _raise(ConnectionError())}, True, "local-cap"),
        (
            {"read_live_signal": _raise(ConnectionError()), "local_inflight": 2},
            False,
            "local-cap-reached",
        ),
        # the local cap never stands in for the counter
        (
            {"read_counter": _raise(OSError()), "read_live_signal": _raise(OSError())},
            False,
            "counter-unavailable",
        ),
    ],
    ids=[
        "ok",
        "over",
        "counter-down",
        "counter-garbage",
        "throttled",
        "signal-down-cap",
        "signal-down-full",
        "both-down",
    ],
)
def test_budget_conservative_cap(over: dict[str, Any], admitted: bool, reason: str) -> None:
    result = _budget(**over)
    assert (result.admitted, result.reason) == (admitted, reason)


POSTERIOR = {
    "a": {"alpha": 2, "beta": 8},
    "b": {"alpha": 8, "beta": 2},
    "c": {"alpha": 1, "beta": 1},
}


def test_bandit_samples_deterministically_per_seed() -> None:
    picks = [
        choose_arm(
            arms=["a", "b", "c"], deterministic="a", read_posterior=lambda: POSTERIOR, seed=s
        )
        for s in range(200)
    ]
    assert all(p.mode == "sampled" for p in picks)
    again = [
        choose_arm(
            arms=["c", "b", "a"], deterministic="a", read_posterior=lambda: POSTERIOR, seed=s
        )
        for s in range(200)
    ]
    assert [p.arm for p in picks] == [p.arm for p in again]  # arm order does not matter
    counts = {arm: sum(p.arm == arm for p in picks) for arm in "abc"}
    assert counts["b"] > counts["c"] > counts["a"]  # it is actually sampling the posteriors


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"exploration_enabled": False}, "exploration-disabled"),
        ({"read_posterior": _raise(ConnectionError("posterior store down"))}, "sampler-failed"),
        ({"read_posterior": lambda: {"a": POSTERIOR["a"]}}, "no-prior"),
        ({"read_posterior": lambda: {**POSTERIOR, "c": {"alpha": 0, "beta": 1}}}, "no-prior"),
        ({"read_posterior": lambda: {**POSTERIOR, "c": {"alpha": 1}}}, "sampler-failed"),
        ({"arms": []}, "no-prior"),
    ],
    ids=["disabled", "store-down", "missing-prior", "zero-prior", "malformed", "no-arms"],
)
def test_bandit_falls_back_to_the_deterministic_choice(kwargs: dict[str, Any], reason: str) -> None:
    args: dict[str, Any] = {
        "arms": ["a", "b", "c"],
        "deterministic": "b",
        "read_posterior": lambda: POSTERIOR,
        "seed": 1,
    }
    args.update(kwargs)
    choice = choose_arm(**args)
    assert (choice.arm, choice.mode, choice.reason) == ("b", "deterministic", reason)


SECTIONS: Mapping[str, Any] = {
    "poolHostInventory": {
        "pools": [
            {"id": "pool-a", "status": "active"},
            {"id": "pool-b", "status": "active"},
            {"id": "pool-c", "status": "draining"},
            {"id": "pool-d", "status": "quarantined-by-some-new-rule"},
            {"id": "pool-e", "status": "active"},
            {"id": "pool-f"},
            {"id": "pool-g", "status": "active"},
        ],
        "hosts": [],
    },
    "capacityProfiles": {
        "profiles": [
            {"id": "general", "pools": ["pool-a", "pool-c", "pool-d", "pool-f"]},
            {"id": "team-x", "pools": ["pool-b"]},
            {"id": "revoked", "pools": ["pool-e"]},
        ],
        "grants": [{"profile": "general"}, {"profile": "team-x", "project": "proj-x"}],
    },
}


@pytest.mark.parametrize(
    ("pool", "project", "admitted", "reason"),
    [
        ("pool-a", None, True, "granted"),
        ("pool-a", "anything", True, "granted"),
        ("pool-b", "proj-x", True, "granted"),
        ("pool-b", "proj-y", False, "pool-not-granted"),
        # no project named: the daemon's three pool rules alone (SEMANTICS.md)
        ("pool-b", None, True, "granted"),
        ("pool-c", None, False, "pool-not-active"),
        ("pool-d", None, False, "pool-not-active"),  # unknown statuses refuse
        ("pool-f", None, False, "pool-not-active"),  # no status at all refuses
        ("pool-e", None, True, "granted"),  # named by a profile, even one with no grant
        ("pool-e", "proj-x", False, "pool-not-granted"),  # a named project needs a grant
        ("pool-g", None, False, "pool-not-granted"),  # named by no profile
        ("pool-z", None, False, "pool-not-in-inventory"),
    ],
)
def test_claim_gate(pool: str, project: str | None, admitted: bool, reason: str) -> None:
    result = ClaimGate(SECTIONS).check(pool, project)
    assert (result.admitted, result.reason) == (admitted, reason)


@pytest.mark.parametrize(
    "sections",
    [
        {},
        {"poolHostInventory": None},
        {"poolHostInventory": {"pools": "x"}},
        {"poolHostInventory": {"pools": [1, {"id": 2}]}, "capacityProfiles": {"grants": [7]}},
    ],
)
def test_claim_gate_on_malformed_sections_refuses(sections: Mapping[str, Any]) -> None:
    assert not ClaimGate(sections).check("pool-a")


def test_bandit_over_a_snapshot_posterior_summary() -> None:
    from rensei_routing.core.snapshot.postures import posterior_of

    sections = {
        "posteriorSummary": {
            "arms": [{"arm": "a", "alpha": 1, "beta": 50}, {"arm": "b", "alpha": 50, "beta": 1}]
        }
    }
    picks = {
        choose_arm(
            arms=["a", "b"],
            deterministic="a",
            seed=s,
            read_posterior=lambda: posterior_of(sections),
        ).arm
        for s in range(20)
    }
    assert picks == {"b"}
    # a snapshot without a posterior summary: the deterministic choice
    fallback = choose_arm(
        arms=["a", "b"], deterministic="a", seed=1, read_posterior=lambda: posterior_of({})
    )
    assert (fallback.arm, fallback.reason) == ("a", "sampler-failed")
