"""The evidence gate (rensei_routing/enforce/gate.py and core/enforce/gate.py): pass, fail naming
each figure, inconclusive, evidence-unreadable on a chain that does not verify (nothing appended,
nothing armed, override or not), the verdict always appended otherwise, and overrides."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rensei_routing.core.enforce.gate import GateBar, GateFigures, gate_verdict
from rensei_routing.enforce import arm, run_gate
from rensei_routing.errors import EnforcementError
from rensei_routing.store.home import Home

from .enforce_support import (
    ELSEWHERE,
    NOW,
    REPO,
    chain,
    gateway_spawn,
    locked_to_zai,
    make_home,
    payloads,
    record,
    rows,
)


def _gate(home: Home, **bar: object) -> object:
    return run_gate(home, REPO, now=NOW, actor="alice", bar=GateBar(**bar))  # type: ignore[arg-type]


def test_a_pass_is_appended_with_its_figures_window_and_revision(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    run = run_gate(home, REPO, now=NOW, actor="alice")
    assert (run.verdict.verdict, run.verdict.failed, run.figures.samples) == ("pass", (), 60)
    (record,) = payloads(home, "enforce-gate")
    assert record["verdict"] == "pass" and record["actor"] == "alice"
    assert (record["revision"], record["policy_hash"]) == (1, run.policy_hash)
    assert record["figures"]["samples"] == 60 and record["figures"]["agreed"] == 60
    assert record["window"]["seconds"] == 7 * 86_400 and record["bar"]["min_samples"] == 50
    assert run.seq == chain(home)[-1][0]


def test_too_few_samples_is_inconclusive_never_a_pass(tmp_path: Path) -> None:
    home = make_home(tmp_path, evidence=10)
    run = run_gate(home, REPO, now=NOW, actor="alice")
    assert (run.verdict.verdict, run.verdict.failed) == ("inconclusive", ("samples",))
    assert not run.verdict
    with pytest.raises(EnforcementError) as caught:
        arm(home, REPO, now=NOW, actor="alice")
    assert caught.value.code == "gate-inconclusive"
    assert caught.value.verdict_seq == chain(home)[-1][0]  # the refused arm's verdict is kept
    assert rows(home) == ([], [])  # and no arm state


def test_evidence_outside_the_window_or_the_bound_does_not_count(tmp_path: Path) -> None:
    home = make_home(tmp_path, evidence=30)
    record(home, [gateway_spawn(repo="acme/gadgets")] * 30)  # another repository
    record(home, [gateway_spawn(repo="acme-widgets")] * 30)  # the lossy slug
    run = run_gate(home, REPO, now=NOW, actor="alice", bar=GateBar(min_samples=1))
    assert run.figures.samples == 30
    later = NOW.replace(day=NOW.day + 8)  # the evidence is older than the 7-day window
    assert (
        run_gate(home, REPO, now=later, actor="a", bar=GateBar(min_samples=1)).figures.samples == 0
    )


def test_refusals_fail_the_gate_naming_the_figure(tmp_path: Path) -> None:
    home = make_home(tmp_path, locked_to_zai())
    run = run_gate(home, REPO, now=NOW, actor="alice", bar=GateBar(min_agreement=0.5))
    assert run.verdict.verdict == "fail"
    assert run.verdict.failed == ("refusal-rate", "agreement")
    assert (run.figures.held, run.figures.refusal_rate) == (60, 1.0)
    allowed = run_gate(home, REPO, now=NOW, actor="a", bar=GateBar(max_refusal_rate=1.0))
    assert allowed.verdict.verdict == "pass"


def test_a_gate_judges_the_revision_asked_for(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    from .enforce_support import save

    save(home, locked_to_zai())
    assert run_gate(home, REPO, now=NOW, actor="a").verdict.verdict == "fail"
    assert run_gate(home, REPO, now=NOW, actor="a", revision=1).verdict.verdict == "pass"


def test_a_failed_gate_arms_only_with_an_override_that_records_who_and_why(tmp_path: Path) -> None:
    home = make_home(tmp_path, locked_to_zai())
    with pytest.raises(EnforcementError) as caught:
        arm(home, REPO, now=NOW, actor="alice")
    assert caught.value.code == "gate-fail"
    assert rows(home) == ([], [])
    armed = arm(home, REPO, now=NOW, actor="bob", override=True, reason="rehearse the hold")
    assert armed.canary.override and armed.gate.verdict.verdict == "fail"
    (record,) = payloads(home, "enforce-arm")
    assert (record["actor"], record["override"], record["reason"]) == (
        "bob",
        True,
        "rehearse the hold",
    )
    assert record["gate_seq"] == armed.gate.seq and record["verdict"] == "fail"
    assert len(payloads(home, "enforce-gate")) == 2  # both verdicts are evidence


def _tamper(home: Home) -> None:
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 5", (b'{"n":1}',))


@pytest.mark.parametrize("override", [False, True], ids=["plain", "override"])
def test_a_chain_that_does_not_verify_is_evidence_unreadable_and_writes_nothing(
    tmp_path: Path, override: bool
) -> None:
    home = make_home(tmp_path)
    _tamper(home)
    before = (chain(home), rows(home))
    run = run_gate(home, REPO, now=NOW, actor="alice")
    assert (run.verdict.verdict, run.verdict.failed, run.seq) == (
        "fail",
        ("evidence-unreadable",),
        None,
    )
    with pytest.raises(EnforcementError) as caught:
        arm(home, REPO, now=NOW, actor="alice", override=override, reason="x" if override else None)
    assert caught.value.code == "evidence-unreadable"
    assert (chain(home), rows(home)) == before


def test_agreement_counts_spawns_whose_route_is_kept(tmp_path: Path) -> None:
    home = make_home(tmp_path, ELSEWHERE)  # no policy claims them: legacy routes kept
    run = run_gate(home, REPO, now=NOW, actor="a", bar=GateBar(min_agreement=1.0))
    assert (run.verdict.verdict, run.figures.agreed) == ("pass", 60)


# -- the verdict rule, pure ---------------------------------------------------------------------


@given(
    samples=st.integers(0, 200),
    refused=st.integers(0, 200),
    agreed=st.integers(0, 200),
    min_samples=st.integers(1, 100),
    max_rate=st.floats(0, 1),
    min_agreement=st.none() | st.floats(0, 1),
    readable=st.booleans(),
)
def test_the_verdict_rule(
    samples: int,
    refused: int,
    agreed: int,
    min_samples: int,
    max_rate: float,
    min_agreement: float | None,
    readable: bool,
) -> None:
    refused, agreed = min(refused, samples), min(agreed, samples - min(refused, samples))
    figures = GateFigures(samples=samples, held=refused, agreed=agreed)
    bar = GateBar(min_samples=min_samples, max_refusal_rate=max_rate, min_agreement=min_agreement)
    verdict = gate_verdict(figures, bar, readable=readable)
    if not readable:
        assert verdict.failed == ("evidence-unreadable",) and verdict.verdict == "fail"
    elif samples < min_samples:
        assert verdict.verdict == "inconclusive"
    else:
        assert bool(verdict) == (
            refused / samples <= max_rate
            and (min_agreement is None or agreed / samples >= min_agreement)
        )
        assert bool(verdict) == (verdict.verdict == "pass") == (not verdict.failed)
