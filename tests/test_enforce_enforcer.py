"""The Enforcer over a real home (rensei_routing/enforce/enforcer.py): every answer and refusal
code, each governed answer an audit record committed before it returns, the pin, the trip (by
rate and by a corrupt store), live arming by another process, and disarmed == never armed."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing import EnforcedRoute, EnforcementRefused, Enforcer, NotGoverned
from rensei_routing.core.enforce.records import enforced_view, lineage_of
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.enforce import arm, disarm, status
from rensei_routing.errors import StoreError
from rensei_routing.store.home import Home

from .enforce_support import (
    ELSEWHERE,
    NOW,
    REPO,
    STAMP,
    chain,
    gateway_doc,
    gateway_spawn,
    hint,
    locked_to_zai,
    make_home,
    payloads,
    record,
    rows,
    save,
)
from .shadow_support import registry, spawn

ROOT = Path(__file__).resolve().parent.parent


def _enforcer(home: Home) -> Enforcer:
    return Enforcer(home, registry(), clock=lambda: STAMP)


def _arm(home: Home, **kw: object) -> None:
    arm(home, REPO, now=NOW, actor="alice", **kw)  # type: ignore[arg-type]


# -- not governed -------------------------------------------------------------------------------


def test_nothing_armed_reads_nothing_and_writes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    before = chain(home)
    with _enforcer(home) as e:
        answer = e.enforce(gateway_spawn())
        assert answer == NotGoverned("nothing-armed") and not answer
        assert e._conn is None and e._log is None  # no database opened, no policy read
    assert chain(home) == before
    assert hint(home)[0] == 0


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (gateway_doc(repo="acme/gadgets"), "repo-not-armed"),
        (gateway_doc(repo="acme-widgets"), "lossy-repo"),  # the runtime slug of acme/widgets
        (gateway_doc(repo=None), "no-repo"),
        (spawn(accounts=[{"account_id": "a", "provider_binding": "anthropic"}]), "not-gateway"),
    ],
    ids=["other-repo", "lossy-slug", "no-repo", "not-gateway"],
)
def test_spawns_outside_the_bound_are_not_governed(
    tmp_path: Path, doc: dict[str, object], reason: str
) -> None:
    home = make_home(tmp_path)
    _arm(home)
    before = chain(home)
    with _enforcer(home) as e:
        assert e.enforce(Spawn.from_dict(doc)) == NotGoverned(reason)
    assert chain(home) == before  # a spawn not governed leaves no record


# -- governed answers ---------------------------------------------------------------------------


def test_an_enforced_route_carries_its_lineage_and_its_record_is_committed(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _arm(home)
    with _enforcer(home) as e:
        route = e.enforce(gateway_spawn())
    assert isinstance(route, EnforcedRoute)
    assert (route.kind, route.provider, route.account_id) == (
        "enforced",
        "gateway",  # never moved off (nor onto) the gateway: the spawn's own provider
        "anthropic-primary",
    )
    assert (route.policy_id, route.revision) == ("widgets-on-anthropic", 1)
    stored = {seq: p for seq, _, p in chain(home)}
    import json

    record = json.loads(stored[route.seq])
    assert record["record_type"] == "enforced-decision" and enforced_view(record)["enforced"]
    # the envelope stores only what the decision does not hold (here the lineage is all the
    # decision's, the route's account and model the decision's), and reads back whole
    assert not {"lineage", "transport", "repo", "route", "enforced"} & set(record)
    view = enforced_view(record)
    assert (view["transport"], view["repo"], view["principal_id"]) == (
        "gateway",
        "acme/widgets",
        record["decision"]["explanation"]["context"].get("principal_id"),
    )
    assert view["route"] == {
        "provider": "gateway",
        "account_id": route.account_id,
        "model": route.model,
    }
    assert view["lineage"] == {"revision": 1, "policy_hash": route.policy_hash}
    assert record["decision"]["explanation"]["trace"] == "compact"
    assert lineage_of(record) == {
        "policy_id": "widgets-on-anthropic",
        "revision": 1,
        "policy_hash": route.policy_hash,
        "decision_id": route.decision_id,
    }
    assert record["answer"] == "enforced" and record["decision"]["decision_id"] == route.decision_id


def test_a_spawn_no_policy_claims_keeps_its_own_route_as_legacy_compatible(tmp_path: Path) -> None:
    home = make_home(tmp_path, ELSEWHERE)
    _arm(home)
    own = gateway_spawn(model="claude-opus-4-1", account_id="anthropic-primary")
    with _enforcer(home) as e:
        route = e.enforce(own)
    assert isinstance(route, EnforcedRoute)
    assert (route.kind, route.policy_id, route.model, route.account_id) == (
        "legacy-compatible",
        None,
        "claude-opus-4-1",
        "anthropic-primary",
    )
    (record,) = payloads(home, "enforced-decision")
    assert record["answer"] == "legacy-compatible"
    assert record["decision"]["policy_source"] == "legacy-compatibility"
    assert enforced_view(record)["route"] == {
        "provider": route.provider,
        "account_id": route.account_id,
        "model": route.model,
    }


@pytest.mark.parametrize("code", ["held", "rejected"])
def test_held_and_rejected_are_refused_after_their_record_commits(
    tmp_path: Path, code: str
) -> None:
    home = make_home(tmp_path, locked_to_zai("hold" if code == "held" else "reject"))
    _arm(home, override=True, reason="rehearsing a refusal")
    with _enforcer(home) as e, pytest.raises(EnforcementRefused) as caught:
        e.enforce(gateway_spawn())
    refusal = caught.value
    assert refusal.code == code
    (record,) = payloads(home, "enforced-decision")
    assert record["answer"] == code and "route" not in record
    assert enforced_view(record)["route"] is None
    assert lineage_of(record)["decision_id"] == refusal.decision_id
    assert [s for s, _, _ in chain(home)][-1] == refusal.seq


# -- the pin ------------------------------------------------------------------------------------


def test_the_pinned_revision_is_enforced_until_a_gate_passes_for_a_newer_one(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    _arm(home)
    save(home, ELSEWHERE)  # revision 2: no longer claims acme/widgets
    with _enforcer(home) as e:
        first = e.enforce(gateway_spawn())
        assert isinstance(first, EnforcedRoute)
        assert (first.kind, first.revision) == ("enforced", 1)
        (canary,) = status(home, now=NOW)["canaries"]
        assert (canary["pinned_revision"], canary["current_revision"], canary["ahead"]) == (
            1,
            2,
            True,
        )
        armed = arm(home, REPO, now=NOW, actor="bob")  # re-gates revision 2, moves the pin
        assert (armed.prior_revision, armed.canary.revision) == (1, 2)
        second = e.enforce(gateway_spawn())
    assert isinstance(second, EnforcedRoute)
    assert (second.kind, second.revision) == ("legacy-compatible", 2)
    assert status(home, now=NOW)["canaries"][0]["ahead"] is False


def test_a_failed_re_gate_keeps_the_old_pin(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _arm(home)
    save(home, locked_to_zai())  # revision 2 would hold every spawn: its gate fails
    before = rows(home)[0]
    with pytest.raises(Exception) as caught:
        arm(home, REPO, now=NOW, actor="bob")
    assert getattr(caught.value, "code", None) == "gate-fail"
    assert rows(home)[0] == before
    with _enforcer(home) as e:
        route = e.enforce(gateway_spawn())
    assert isinstance(route, EnforcedRoute) and route.revision == 1


# -- the trip -----------------------------------------------------------------------------------


def test_refusals_over_the_declared_rate_trip_the_canary(tmp_path: Path) -> None:
    home = make_home(tmp_path, locked_to_zai())
    _arm(home, override=True, reason="trip rehearsal", trip_rate=0.1, trip_window_s=3600)
    codes = []
    with _enforcer(home) as e:
        for _ in range(3):
            with pytest.raises(EnforcementRefused) as caught:
                e.enforce(gateway_spawn())
            codes.append(caught.value.code)
        # 3 refusals > 0.1 x max(3, 20): the third trips; the canary is disarmed after it
        assert e.enforce(gateway_spawn()) == NotGoverned("nothing-armed")
    assert codes == ["held", "held", "tripped"]
    (trip,) = payloads(home, "enforce-trip")
    assert (trip["reason"], trip["decisions"], trip["refusals"]) == ("refusal-rate", 3, 3)
    assert trip["actor"] == "enforcer" and trip["armed_by"] == "alice"
    (canary,) = status(home, now=NOW)["canaries"]
    assert (canary["state"], canary["trip_reason"]) == ("tripped", "refusal-rate")
    assert hint(home)[0] == 0


def test_a_corrupt_policy_store_trips_and_never_returns_a_route(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _arm(home)
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute(
            "UPDATE policy_revisions SET body = CAST(? AS BLOB) WHERE revision = 1", (b"[",)
        )
    with _enforcer(home) as e:
        with pytest.raises(EnforcementRefused) as caught:
            e.enforce(gateway_spawn())
        assert caught.value.code == "tripped"
        assert e.enforce(gateway_spawn()) == NotGoverned("nothing-armed")
    (trip,) = payloads(home, "enforce-trip")
    assert trip["reason"] == "policy-store-corrupt"
    (decision,) = payloads(home, "enforced-decision")
    assert decision["answer"] == "held" and decision["decision"]["reason"] == "snapshot-unavailable"


# -- live arming, across processes ---------------------------------------------------------------


def _cli(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RENSEI_ACTOR": "ops", "RENSEI_ROUTING_LOAD_PLUGINS": ""}
    return subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", "enforce", *args, "--home", str(home.path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_an_arm_and_a_disarm_by_another_process_apply_from_the_next_call(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    with _enforcer(home) as e:
        assert e.enforce(gateway_spawn()) == NotGoverned("nothing-armed")
        # the evidence was recorded at STAMP: a window reaching back to it from today's clock
        armed = _cli(home, "arm", "--repo", REPO, "--window", "36500d")
        assert armed.returncode == 0, armed.stderr
        route = e.enforce(gateway_spawn())
        assert isinstance(route, EnforcedRoute) and route.kind == "enforced"
        gone = _cli(home, "disarm", "--repo", REPO)
        assert gone.returncode == 0, gone.stderr
        assert e.enforce(gateway_spawn()) == NotGoverned("nothing-armed")
    (arm_record,) = payloads(home, "enforce-arm")
    (disarm_record,) = payloads(home, "enforce-disarm")
    assert arm_record["actor"] == disarm_record["actor"] == "ops"


def test_an_enforcer_opened_before_the_hint_file_exists_follows_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    assert not (home.path / "enforce.state").exists()
    with _enforcer(home) as e:
        assert (home.path / "enforce.state").exists()
        _arm(home)
        assert isinstance(e.enforce(gateway_spawn()), EnforcedRoute)


def test_a_lost_hint_file_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _arm(home)
    (home.path / "enforce.state").unlink()
    with _enforcer(home) as e:
        assert isinstance(e.enforce(gateway_spawn()), EnforcedRoute)


def test_a_closed_enforcer_answers_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    e = _enforcer(home)
    e.close()
    e.close()
    with pytest.raises(StoreError):
        e.enforce(gateway_spawn())


# -- disarmed == never armed --------------------------------------------------------------------


def _run(home: Home) -> tuple[list[object], list[bytes]]:
    spawns = [gateway_spawn(), gateway_spawn(repo="acme/gadgets"), Spawn.from_dict(spawn())]
    with _enforcer(home) as e:
        answers: list[object] = [e.enforce(s) for s in spawns]
    before = {seq for seq, _, _ in chain(home)}
    record(home, spawns)
    shadow = [p for seq, _, p in chain(home) if seq not in before]
    return answers, shadow


def test_a_disarmed_canary_is_byte_identical_to_one_never_armed(tmp_path: Path) -> None:
    never = make_home(tmp_path / "never")
    was = make_home(tmp_path / "was")
    _arm(was)
    with _enforcer(was) as e:
        assert isinstance(e.enforce(gateway_spawn()), EnforcedRoute)
    disarm(was, REPO, now=NOW, actor="alice")
    assert hint(was)[0] == 0
    answers_never, shadow_never = _run(never)
    answers_was, shadow_was = _run(was)
    assert answers_never == answers_was == [NotGoverned("nothing-armed")] * 3
    assert shadow_never == shadow_was and len(shadow_was) == 3


# -- the property -------------------------------------------------------------------------------

_REPOS = st.sampled_from(["acme/widgets", "acme/gadgets", "acme-widgets", "Acme/Widgets", None])
_PROVIDERS = st.sampled_from(["gateway", "claude", "codex", "pi"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(
        st.builds(
            lambda repo, provider, model: spawn(
                repo=repo,
                stages=[{"mechanism": "default", "provider": provider}],
                model=model,
            ),
            _REPOS,
            _PROVIDERS,
            st.sampled_from(["claude-sonnet-4-5", "opus", "glm-4.6", None]),
        ),
        max_size=8,
    )
)
def test_an_unarmed_enforcer_never_governs_and_never_writes(
    tmp_path_factory: pytest.TempPathFactory, docs: list[dict[str, object]]
) -> None:
    home = _PROPERTY_HOMES.setdefault("home", make_home(tmp_path_factory.mktemp("p"), evidence=0))
    before = (chain(home), rows(home))
    with _enforcer(home) as e:
        for doc in docs:
            answer = e.enforce(Spawn.from_dict(doc))
            assert answer == NotGoverned("nothing-armed")
        assert e._conn is None and e._log is None
    assert (chain(home), rows(home)) == before


_PROPERTY_HOMES: dict[str, Home] = {}


# -- a crash inside an arm ----------------------------------------------------------------------

_CRASHING_ARM = """
import datetime as dt, os, signal, sys
from rensei_routing.enforce import canary
from rensei_routing.store import enforcement
from rensei_routing.store.home import Home

real = enforcement.set_hint

def set_then_die(home, value, *, durable):
    real(home, value, durable=durable)
    os.kill(os.getpid(), signal.SIGKILL)  # after the hint, before the arm's commit

enforcement.set_hint = set_then_die
canary.arm(Home(sys.argv[1]), "acme/widgets", now=dt.datetime(2026, 2, 3, 5, tzinfo=dt.UTC),
           actor="crash")
"""


def test_an_arm_killed_before_its_commit_leaves_a_set_hint_and_nothing_armed(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    gates = len(payloads(home, "enforce-gate"))
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_ARM, str(home.path)], cwd=ROOT, check=False
    )
    assert done.returncode == -9
    assert hint(home)[0] == 1  # errs towards "may be armed": one read, never a missed arm
    assert rows(home) == ([], []) and payloads(home, "enforce-arm") == []
    assert len(payloads(home, "enforce-gate")) == gates + 1  # the verdict had committed
    with _enforcer(home) as e:
        assert e.enforce(gateway_spawn()) == NotGoverned("nothing-armed")


def test_an_enforced_decision_replays_and_rederives_its_full_trace(tmp_path: Path) -> None:
    """An enforced decision is recorded compact; replay decides it again and ``audit show
    --full``'s path re-derives its full trace, the envelope kept as stored."""
    import json

    from rensei_routing.ops.rederive import full_trace
    from rensei_routing.ops.replay import Sources, replay_chain
    from rensei_routing.store.audit import AuditLog

    home = make_home(tmp_path)
    _arm(home)
    with _enforcer(home) as e:
        route = e.enforce(gateway_spawn())
    assert isinstance(route, EnforcedRoute)
    record = json.loads({seq: p for seq, _, p in chain(home)}[route.seq])
    sources = Sources(home)
    found = full_trace(record, sources, where="record")
    assert found.rederived and found.decision.decision_id == route.decision_id
    assert lineage_of(found.payload) == lineage_of(record)
    assert "eligible_account_ids" in found.payload["decision"]["explanation"]
    with AuditLog.open(home) as log:
        summary = replay_chain(log, sources)
    assert summary.ok and summary.by_kind.get("enforced") == 1


# -- what an Enforcer keeps between calls ---------------------------------------------------------


def test_a_canary_changed_by_another_connection_is_seen_while_another_stays_armed(
    tmp_path: Path,
) -> None:
    """The armed canaries an Enforcer last read are only a first guess: with the hint kept set
    by a second canary, a disarm, a re-arm and an arm elsewhere still apply from the next call."""
    home = make_home(tmp_path)
    _arm(home)
    arm(home, "acme/gadgets", now=NOW, actor="alice", override=True, reason="a second canary")
    with _enforcer(home) as e:
        first = e.enforce(gateway_spawn())
        assert isinstance(first, EnforcedRoute)
        disarm(home, REPO, now=NOW, actor="bob")
        before = chain(home)
        assert hint(home)[0] == 1  # acme/gadgets is still armed
        assert e.enforce(gateway_spawn()) == NotGoverned("repo-not-armed")
        assert chain(home) == before  # nothing recorded under the disarmed canary
        _arm(home)  # armed again: a new arm, read at the next call
        again = e.enforce(gateway_spawn())
        assert isinstance(again, EnforcedRoute) and again.seq > first.seq
        (*_, latest) = payloads(home, "enforce-arm")
        assert [p["repo"] for p in payloads(home, "enforce-arm")].count(REPO) == 2
        assert latest["repo"] == REPO
    with _enforcer(home) as e:
        assert e.enforce(gateway_spawn(repo="acme/other")) == NotGoverned("repo-not-armed")
        arm(home, "acme/other", now=NOW, actor="alice", override=True, reason="armed later")
        assert isinstance(e.enforce(gateway_spawn(repo="acme/other")), EnforcedRoute)


def test_the_trip_window_forgets_old_rows_without_changing_a_count(tmp_path: Path) -> None:
    """Decisions older than the window are deleted at the first of every FORGET_EVERY
    decisions and at each refusal; until then they stay but are never counted."""
    from rensei_routing.enforce import enforcer as module

    home = make_home(tmp_path)
    _arm(home, override=True, reason="window", trip_rate=0.5, trip_window_s=60)
    clock = iter(f"2026-02-03T04:{m:02d}:06.000007Z" for m in range(5, 60))
    with Enforcer(home, registry(), clock=lambda: next(clock)) as e:
        for _ in range(3):  # one a minute: each older than the next one's window
            assert isinstance(e.enforce(gateway_spawn()), EnforcedRoute)
        # the first call deleted (nothing); the next two kept what came before them
        assert [r[2] for r in rows(home)[1]] == [
            module.micros_of(f"2026-02-03T04:{m:02d}:06.000007Z") for m in (5, 6, 7)
        ]
        (canary,) = status(home, now=dt.datetime(2026, 2, 3, 4, 7, 30, tzinfo=dt.UTC))["canaries"]
        assert (canary["window"]["decisions"], canary["window"]["refusals"]) == (1, 0)
        e._noted = module.FORGET_EVERY  # the next call is one that forgets
        assert isinstance(e.enforce(gateway_spawn()), EnforcedRoute)
        assert [r[2] for r in rows(home)[1]] == [  # those inside its window
            module.micros_of(f"2026-02-03T04:{m:02d}:06.000007Z") for m in (7, 8)
        ]
