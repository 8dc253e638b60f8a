"""Revision-safe policy writes through the Python API, on both control backends (issue 30,
part 1): the expected revision checked in the write's transaction, the audited mutation record
committed with the revision, rollback as a new revision, scoped edits, credential-shaped values
refused. Every refusal is typed and leaves every stored row (revisions, control events, the
audit chain or the mutation table) exactly as it was.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.control.policy_writes import (
    resolve_actor,
    rollback_policies,
    save_policies,
)
from rensei_routing.core.routing.edits import MUTATION_RECORD
from rensei_routing.core.routing.policy import RoutingPolicy
from rensei_routing.errors import (
    CorruptSnapshotError,
    CredentialValueError,
    InputError,
    OutOfScopeError,
    RollbackTargetError,
    StaleRevisionError,
)
from rensei_routing.plugins.loading import register_plugin
from rensei_routing.plugins.manager import get_plugin_manager, redactor
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.policies import encode_policies

from .control_backends import BACKENDS, ControlHome, T, control_home
from .plugins import sample

GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ACME_SECRET = "acme_" + "Zz9Yy8Xx7Ww6Vv5Uu4"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str | None:
    return None if backend == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture
def ctl(tmp_path: Path, backend: str, url: str | None) -> ControlHome:
    return control_home(tmp_path / "home", backend, url)


def pol(pid: str, *, repo: str | None = None, **extra: Any) -> RoutingPolicy:
    doc: dict[str, Any] = {"id": pid, **extra}
    if repo is not None:
        doc.setdefault("match", {})["repo_ids"] = [repo]
    return RoutingPolicy.from_dict(doc)


def save(ctl: ControlHome, policies: list[RoutingPolicy], **kw: Any) -> Any:
    store = ctl.open()
    try:
        return save_policies(store, policies, saved_at=T, actor=kw.pop("actor", "alice"), **kw)
    finally:
        store.close()


def rollback(ctl: ControlHome, to: int, **kw: Any) -> Any:
    store = ctl.open()
    try:
        return rollback_policies(store, to=to, saved_at=T, actor=kw.pop("actor", "alice"), **kw)
    finally:
        store.close()


def ids_at(ctl: ControlHome, revision: int | None = None) -> list[str]:
    store = ctl.open(write=False)
    try:
        return sorted(p.id for p in store.load_policies(revision).snapshot.policies)
    finally:
        store.close()


def revisions(ctl: ControlHome) -> list[int]:
    store = ctl.open(write=False)
    try:
        return [r.revision for r in store.policy_history()]
    finally:
        store.close()


def mutations(ctl: ControlHome) -> list[dict[str, Any]]:
    """Every mutation record as stored: on SQLite from the home's audit chain (which must
    verify), on PostgreSQL from ``control_policy_mutations``."""
    if ctl.url is None:
        with AuditLog.open(ctl.home) as log:
            assert log.verify().ok
            return [
                r.payload
                for r in log.records()
                if isinstance(r.payload, dict) and r.payload.get("record_type") == MUTATION_RECORD
            ]
    import psycopg

    with psycopg.connect(ctl.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT actor, payload FROM control_policy_mutations ORDER BY revision"
        ).fetchall()
    out = []
    for actor, payload in rows:
        doc = json.loads(bytes(payload))
        assert doc["actor"] == actor
        out.append(doc)
    return out


def raw_revision(ctl: ControlHome, policies: list[RoutingPolicy]) -> None:
    """A revision written around every check (as a release before issue 30 could): the
    next row and counter, nothing else."""
    body, digest = encode_policies(policies)
    if ctl.url is None:
        conn = ctl.home.connect(write=True)
        try:
            with conn:
                n = conn.execute("SELECT coalesce(max(revision), 0) FROM policy_revisions").get
                conn.execute(
                    "INSERT INTO policy_revisions(revision, content_hash, body, saved_at) "
                    "VALUES (?, ?, ?, ?)",
                    (int(str(n)) + 1, digest, body, T),
                )
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(ctl.url, autocommit=True) as conn, conn.transaction():
        (n,) = conn.execute(
            "UPDATE control_orgs SET policy_rev = policy_rev + 1 RETURNING policy_rev"
        ).fetchone()  # type: ignore[misc]
        conn.execute(
            "INSERT INTO control_policy_revisions(org_id, revision, content_hash, body, saved_at) "
            "VALUES ('acme', %s, %s, %s, %s)",
            (n, digest, body, T),
        )


def corrupt_head(ctl: ControlHome) -> None:
    if ctl.url is None:
        conn = ctl.home.connect(write=True)
        try:
            with conn:
                conn.execute(
                    "UPDATE policy_revisions SET body = CAST('[' AS BLOB) WHERE revision = "
                    "(SELECT max(revision) FROM policy_revisions)"
                )
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(ctl.url, autocommit=True) as conn:
        conn.execute(
            "UPDATE control_policy_revisions SET body = '\\x5b'::bytea WHERE revision = "
            "(SELECT max(revision) FROM control_policy_revisions)"
        )


# -- the expected revision ----------------------------------------------------------------------


def test_a_save_at_the_expected_revision_commits_with_its_mutation_record(
    ctl: ControlHome,
) -> None:
    first = save(ctl, [pol("a", repo="acme/a"), pol("b", repo="acme/b")], expected_revision=0)
    second = save(
        ctl,
        [pol("a", repo="acme/a", priority=5), pol("c", repo="acme/c")],
        expected_revision=1,
        actor="bob",
    )
    assert (first.snapshot.revision, second.snapshot.revision) == (1, 2)
    records = mutations(ctl)
    assert [(m["prior_revision"], m["revision"], m["actor"]) for m in records] == [
        (0, 1, "alice"),
        (1, 2, "bob"),
    ]
    last = records[-1]
    assert (last["added"], last["removed"], last["changed"]) == (["c"], ["b"], ["a"])
    assert last["content_hash"] == second.snapshot.content_hash
    assert last["action"] == "save" and last["expected_revision"] == 1
    assert second.mutation.to_dict() == last


def test_the_mutation_history_reads_back_through_the_store(ctl: ControlHome) -> None:
    written = [
        save(ctl, [pol("a", repo="acme/a")]),
        save(ctl, [pol("b", repo="acme/b")], actor="bob"),
        rollback(ctl, 1, actor="carol"),
    ]
    store = ctl.open(write=False)
    try:
        history = store.policy_mutations()
    finally:
        store.close()
    assert history == [w.mutation for w in written]
    assert [(m.action, m.actor, m.revision) for m in history] == [
        ("save", "alice", 1),
        ("save", "bob", 2),
        ("rollback", "carol", 3),
    ]
    assert [m.to_dict() for m in history] == mutations(ctl)


def test_a_stale_save_is_typed_names_the_winner_and_writes_nothing(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    save(ctl, [pol("b", repo="acme/b")])
    before = ctl.state()
    with pytest.raises(StaleRevisionError) as caught:
        save(ctl, [pol("c", repo="acme/c")], expected_revision=1)
    assert (caught.value.expected, caught.value.current) == (1, 2)
    assert "revision 2 is current" in str(caught.value)
    assert ctl.state() == before
    assert revisions(ctl) == [1, 2] and len(mutations(ctl)) == 2


def test_without_an_expected_revision_a_save_behaves_as_before(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    save(ctl, [pol("b", repo="acme/b")])
    saved = save(ctl, [pol("c", repo="acme/c")])
    assert saved.snapshot.revision == 3 and ids_at(ctl) == ["c"]


def _racer(root: str, url: str | None, name: str, gate: Any, out: Any) -> None:
    from rensei_routing.store.home import Home

    c = ControlHome(Home(Path(root)), url)
    gate.wait(30)
    try:
        written = save(c, [pol(name, repo=f"acme/{name}")], expected_revision=1, actor=name)
        out.put((name, "ok", written.snapshot.revision))
    except StaleRevisionError as e:
        out.put((name, "stale", e.current))


def test_two_processes_saving_at_one_expected_revision_exactly_one_wins(
    ctl: ControlHome, url: str | None
) -> None:
    save(ctl, [pol("base", repo="acme/base")])
    ctx = multiprocessing.get_context("fork")
    gate, out = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(str(ctl.home.path), url, f"w{i}", gate, out))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    results = sorted(out.get(timeout=5) for _ in procs)
    won = [r for r in results if r[1] == "ok"]
    assert len(won) == 1 and won[0][2] == 2
    assert all(r == (r[0], "stale", 2) for r in results if r[1] != "ok")
    assert revisions(ctl) == [1, 2] and ids_at(ctl) == [won[0][0]]
    assert [m["actor"] for m in mutations(ctl)] == ["alice", won[0][0]]


# -- rollback -----------------------------------------------------------------------------------


def test_a_rollback_saves_the_target_set_as_the_next_revision(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    save(ctl, [pol("b", repo="acme/b")])
    back = rollback(ctl, 1, expected_revision=2)
    assert back.snapshot.revision == 3 and ids_at(ctl) == ["a"]
    assert ids_at(ctl, 2) == ["b"]  # history is never rewritten
    empty = rollback(ctl, 0)
    assert empty.snapshot.revision == 4 and ids_at(ctl) == []
    last = mutations(ctl)[-1]
    assert (last["action"], last["rollback_to"], last["removed"]) == ("rollback", 0, ["a"])


@pytest.mark.parametrize("target", [3, 99, 2**53 - 1, 2**53])
def test_a_rollback_to_a_revision_that_never_existed_is_refused(
    ctl: ControlHome, target: int
) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    save(ctl, [pol("b", repo="acme/b")])
    before = ctl.state()
    with pytest.raises(RollbackTargetError) as caught:
        rollback(ctl, target)
    assert caught.value.reason == "no-such-revision"
    assert ctl.state() == before


def test_a_stale_rollback_is_refused(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    save(ctl, [pol("b", repo="acme/b")])
    before = ctl.state()
    with pytest.raises(StaleRevisionError) as caught:
        rollback(ctl, 1, expected_revision=1)
    assert caught.value.current == 2 and ctl.state() == before


def test_a_rollback_to_a_corrupt_revision_is_refused(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    corrupt_head(ctl)
    save_over = ctl.open()
    try:
        save_policies(save_over, [pol("b", repo="acme/b")], saved_at=T, over_corrupt=True)
    finally:
        save_over.close()
    before = ctl.state()
    with pytest.raises(RollbackTargetError) as caught:
        rollback(ctl, 1)
    assert caught.value.reason == "target-corrupt" and ctl.state() == before


# -- scope --------------------------------------------------------------------------------------


def _scoped_base(ctl: ControlHome) -> None:
    save(
        ctl,
        [
            pol("mine", repo="acme/a"),
            pol("mine-2", repo="acme/a", priority=3),
            pol("theirs", repo="acme/b"),
            pol("global", match={"roles": ["implementer"]}),
            pol("safety", repo="acme/a", system_safety=True),
        ],
    )


def test_a_scoped_edit_changes_only_the_slice(ctl: ControlHome) -> None:
    _scoped_base(ctl)
    # FILE holds only the slice: mine changed, mine-2 removed, new added.
    written = save(
        ctl,
        [pol("mine", repo="acme/a", priority=9), pol("new", repo="acme/a")],
        scope="acme/a",
        expected_revision=1,
    )
    assert ids_at(ctl) == ["global", "mine", "new", "safety", "theirs"]
    m = written.mutation
    assert (m.added, m.removed, m.changed, m.scope) == (("new",), ("mine-2",), ("mine",), "acme/a")
    # FILE holds the whole set with everything outside the slice unchanged: carried forward.
    whole = [
        pol("mine", repo="acme/a", priority=9),
        pol("theirs", repo="acme/b"),
        pol("global", match={"roles": ["implementer"]}),
        pol("safety", repo="acme/a", system_safety=True),
    ]
    again = save(ctl, whole, scope="ACME/A")
    assert again.mutation.removed == ("new",) and again.mutation.changed == ()


@pytest.mark.parametrize(
    ("smuggled", "named"),
    [
        ([pol("mine", repo="acme/a"), pol("extra", repo="acme/b")], "extra"),
        ([pol("mine", repo="acme/a"), pol("theirs", repo="acme/b", priority=7)], "theirs"),
        ([pol("mine", repo="acme/a"), pol("global", repo="acme/a")], "global"),
        ([pol("mine", match={"roles": ["implementer"]})], "mine"),
        ([pol("safety", repo="acme/a", system_safety=True, priority=2)], "safety"),
        ([pol("mine", match={"repo_ids": ["acme/a"], "repo_classes": ["client"]})], "mine"),
    ],
    ids=["adds-outside", "changes-outside", "pulls-in", "pushes-out", "safety", "class"],
)
def test_a_scoped_edit_that_smuggles_an_out_of_scope_change_is_refused(
    ctl: ControlHome, smuggled: list[RoutingPolicy], named: str
) -> None:
    _scoped_base(ctl)
    before = ctl.state()
    with pytest.raises(OutOfScopeError) as caught:
        save(ctl, smuggled, scope="acme/a")
    assert caught.value.policy_id == named and caught.value.code == "out-of-scope"
    assert ctl.state() == before


def test_a_scoped_rollback_brings_back_only_the_slice(ctl: ControlHome) -> None:
    _scoped_base(ctl)
    save(ctl, [pol("theirs", repo="acme/b", priority=4), pol("solo", repo="acme/a")])
    back = rollback(ctl, 1, scope="acme/a")
    assert ids_at(ctl) == ["mine", "mine-2", "theirs"]
    store = ctl.open(write=False)
    try:
        theirs = {p.id: p for p in store.load_policies().snapshot.policies}["theirs"]
    finally:
        store.close()
    assert theirs.priority == 4  # outside the slice: the current one, carried forward
    assert back.mutation.added == ("mine", "mine-2") and back.mutation.removed == ("solo",)


def test_a_bad_scope_is_refused(ctl: ControlHome) -> None:
    before = ctl.state()
    with pytest.raises(InputError):
        save(ctl, [pol("a", repo="acme/a")], scope="acme-a")
    assert ctl.state() == before


# -- credential-shaped values -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "label"),
    [("description", "github-token"), ("account", "github-token")],
)
def test_a_credential_in_a_new_policy_is_refused_by_label(
    ctl: ControlHome, field: str, label: str
) -> None:
    save(ctl, [pol("ok", repo="acme/ok")])
    bad = (
        pol("leaky", repo="acme/a", description=f"token {GITHUB_TOKEN}")
        if field == "description"
        else pol("leaky", repo="acme/a", action={"account_pool": [GITHUB_TOKEN]})
    )
    before = ctl.state()
    with pytest.raises(CredentialValueError) as caught:
        save(ctl, [pol("ok", repo="acme/ok"), bad])
    assert caught.value.label == label and "'leaky'" in str(caught.value)
    assert GITHUB_TOKEN not in str(caught.value) and GITHUB_TOKEN[4:20] not in str(caught.value)
    assert ctl.state() == before


def test_a_plugins_redaction_pattern_refuses_too(ctl: ControlHome) -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    register_plugin(pm, sample, "sample")
    red = redactor(pm)
    before = ctl.state()
    store = ctl.open()
    try:
        with pytest.raises(CredentialValueError) as caught:
            save_policies(
                store,
                [pol("p", repo="acme/a", description=f"key {ACME_SECRET}")],
                saved_at=T,
                actor="alice",
                redactor=red,
            )
    finally:
        store.close()
    assert caught.value.label == "acme-token" and ACME_SECRET not in str(caught.value)
    assert ctl.state() == before


def test_a_policy_left_as_it_is_never_blocks_an_edit_but_a_rollback_checks_it(
    ctl: ControlHome,
) -> None:
    leaky = pol("leaky", repo="acme/a", description=f"token {GITHUB_TOKEN}")
    raw_revision(ctl, [leaky])  # revision 1, written before the check existed
    kept = save(ctl, [leaky, pol("new", repo="acme/b")], expected_revision=1)
    assert kept.mutation.added == ("new",) and kept.mutation.changed == ()
    save(ctl, [pol("new", repo="acme/b")])  # revision 3: leaky removed
    before = ctl.state()
    with pytest.raises(CredentialValueError) as caught:
        rollback(ctl, 1)
    assert caught.value.label == "github-token" and "'leaky'" in str(caught.value)
    assert ctl.state() == before


# -- a corrupt store, the actor -----------------------------------------------------------------


def test_a_save_over_a_corrupt_store_is_refused_and_writes_nothing(ctl: ControlHome) -> None:
    save(ctl, [pol("a", repo="acme/a")])
    corrupt_head(ctl)
    before = ctl.state()
    with pytest.raises(CorruptSnapshotError):
        save(ctl, [pol("b", repo="acme/b")], expected_revision=1)
    with pytest.raises(CorruptSnapshotError):  # the repair cannot carry a slice forward
        store = ctl.open()
        try:
            save_policies(
                store, [pol("b", repo="acme/a")], saved_at=T, scope="acme/a", over_corrupt=True
            )
        finally:
            store.close()
    assert ctl.state() == before


def test_the_actor_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    monkeypatch.setenv("RENSEI_ACTOR", "from-env")
    assert resolve_actor("given") == "given"
    assert resolve_actor() == "from-env"
    monkeypatch.delenv("RENSEI_ACTOR")
    assert resolve_actor() == getpass.getuser()
    with pytest.raises(CredentialValueError) as caught:
        resolve_actor(GITHUB_TOKEN)
    assert caught.value.label == "github-token" and GITHUB_TOKEN not in str(caught.value)
    for bad in ("", "x" * 129, "a\nb"):
        with pytest.raises(InputError):
            resolve_actor(bad)
