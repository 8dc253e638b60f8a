"""Issue 14 item 3: validation is bounded in time and memory, and a capped report is still exact
about validity.

An all-pairs oracle written here (the definition of SEMANTICS, "Validation") checks the
indexed search on generated sets; the caps are checked on sets where every pair conflicts.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing import RoutingPolicy, precedence_level, validate_policies
from rensei_routing.cli import cli
from rensei_routing.core.routing.validation import (
    MAX_ISSUES,
    MAX_ISSUES_PER_POLICY,
    ValidationIssue,
    validate,
)
from rensei_routing.errors import PolicyValidationError
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

T = "2026-11-30T12:00:00Z"


def _globals(n: int) -> list[RoutingPolicy]:
    """``n`` enabled global rules at priority 0, each with its own action: every pair conflicts."""
    return [
        RoutingPolicy.from_dict({"id": f"p{i:05d}", "action": {"account_pool": [f"acct-{i}"]}})
        for i in range(n)
    ]


def test_every_pair_conflicting_is_capped_and_counted() -> None:
    n = 3_000
    report = validate(_globals(n))
    assert not report
    assert len(report.issues) == MAX_ISSUES
    assert report.total == n * (n - 1) // 2  # every pair found, once
    per_policy: dict[str | None, int] = defaultdict(int)
    for issue in report.issues:
        per_policy[issue.policy_id] += 1
    assert max(per_policy.values()) == MAX_ISSUES_PER_POLICY
    # The lowest ids are listed first, each with its lowest partners.
    assert report.issues[0] == ValidationIssue(
        code="equal-precedence-conflict",
        policy_id="p00000",
        detail="overlaps 'p00001' at rung 8, priority 0, with a different action",
    )
    assert validate_policies(_globals(n)) == report.issues


def test_a_capped_report_never_makes_a_conflicting_set_look_valid() -> None:
    policies = _globals(50)
    report = validate(policies, max_issues=1, max_per_policy=1)
    assert not report and len(report.issues) == 1 and report.omitted == 50 * 49 // 2 - 1
    # A nonsensical cap is raised to 1: something is always listed.
    assert len(validate(policies, max_issues=0, max_per_policy=0).issues) == 1


def _oracle(policies: list[RoutingPolicy]) -> list[ValidationIssue]:
    """Equal-precedence conflicts by the definition, over all pairs."""
    out = []
    enabled = sorted(
        (p for p in policies if p.enabled),
        key=lambda p: (p.id, json.dumps(p.to_dict(), sort_keys=True)),
    )
    for a, b in itertools.combinations(enabled, 2):
        rung = precedence_level(a)
        if (rung, a.priority) != (precedence_level(b), b.priority):
            continue
        if a.action.canonical() == b.action.canonical():
            continue
        if all(
            not a.match.dimension(d)
            or not b.match.dimension(d)
            or a.match.dimension(d) & b.match.dimension(d)
            for d in (
                "repo_ids",
                "repo_classes",
                "roles",
                "principal_ids",
                "model_requirements",
                "request_faces",
            )
        ):
            out.append(
                ValidationIssue(
                    code="equal-precedence-conflict",
                    policy_id=a.id,
                    detail=f"overlaps {b.id!r} at rung {rung}, priority {a.priority}, "
                    "with a different action",
                )
            )
    return out


def _random_policy(rng: random.Random, i: int) -> RoutingPolicy:
    match: dict[str, Any] = {}
    for dim, values in (
        ("repo_ids", ["acme/a", "acme/b", "acme/c"]),
        ("repo_classes", ["hydraflow", "client"]),
        ("roles", ["reviewer", "planner", "explorer"]),
        ("principal_ids", ["adr_reviewer", "bot"]),
        ("model_requirements", ["claude-opus", "balanced"]),
        ("request_faces", ["agentic", "one-shot"]),
    ):
        if rng.random() < 0.4:
            match[dim] = rng.sample(values, rng.randint(1, 2))
    action = {"provider_lock": rng.choice([None, "anthropic", "zai-harness"])}
    return RoutingPolicy.from_dict(
        {
            "id": f"r{i:03d}",
            "enabled": rng.random() < 0.9,
            "priority": rng.choice([0, 0, 5]),
            "system_safety": rng.random() < 0.05,
            "match": match,
            "action": action,
        }
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_indexed_search_finds_exactly_the_pairs_of_the_definition(seed: int) -> None:
    rng = random.Random(seed)
    policies = [_random_policy(rng, i) for i in range(rng.randint(2, 60))]
    expected = sorted(_oracle(policies), key=lambda i: (i.policy_id, i.code, i.detail))
    big = validate(policies, max_issues=10**9, max_per_policy=10**9)
    got = [i for i in big.issues if i.code == "equal-precedence-conflict"]
    assert got == expected and big.omitted == 0
    # With the default caps: the same selection the definition gives, order-independent.
    listed: list[ValidationIssue] = []
    by_policy: dict[str | None, list[ValidationIssue]] = defaultdict(list)
    for issue in big.issues:
        by_policy[issue.policy_id].append(issue)
    for pid in sorted(by_policy, key=lambda p: p or ""):
        listed.extend(by_policy[pid][: min(MAX_ISSUES_PER_POLICY, MAX_ISSUES - len(listed))])
    capped = validate(policies)
    assert list(capped.issues) == listed and capped.total == big.total
    shuffled = policies[:]
    rng.shuffle(shuffled)
    assert validate(shuffled) == capped


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="test")
    return h


def test_save_refuses_a_capped_set_and_writes_nothing(home: Home) -> None:
    with closing(home.connect(write=True)) as conn:
        store = PolicyStore(conn)
        with pytest.raises(PolicyValidationError) as info:
            store.save(_globals(400), saved_at=T)
        assert len(info.value.issues) == MAX_ISSUES
        assert info.value.omitted == 400 * 399 // 2 - MAX_ISSUES
        assert store.history() == []


def test_cli_validate_and_save_report_the_omitted_count(
    home: Home, runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "policies.json"
    path.write_text(json.dumps([p.to_dict() for p in _globals(100)]))
    total = 100 * 99 // 2
    result = runner.invoke(cli, ["policy", "validate", str(path), "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["valid"] is False and len(doc["issues"]) == MAX_ISSUES
    assert doc["issues_omitted"] == total - MAX_ISSUES
    assert f"{total:,} validation issue(s) ({total - MAX_ISSUES:,} not listed)" in result.stderr
    assert "4,950 validation issue(s) (3,950 not listed)" in result.stderr
    saved = runner.invoke(cli, ["policy", "save", str(path), "--home", str(home.path)])
    assert saved.exit_code == 1 and "nothing was saved" in saved.stderr
    assert "Traceback" not in saved.output
    shown = runner.invoke(cli, ["policy", "history", "--json", "--home", str(home.path)])
    assert json.loads(shown.stdout) == []
    valid = tmp_path / "valid.json"
    valid.write_text(json.dumps([{"id": "only"}]))
    ok = runner.invoke(cli, ["policy", "validate", str(valid), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["issues_omitted"] == 0
