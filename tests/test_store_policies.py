"""Policy revisions on a real SQLite file: absent / ok / corrupt, refusals that change nothing."""

from __future__ import annotations

import hashlib
import json
from contextlib import closing
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing import PolicySnapshot, RouteContext, RoutingPolicy, explain, hash_policies
from rensei_routing.cli import cli
from rensei_routing.errors import (
    CorruptSnapshotError,
    MalformedError,
    NotFoundError,
    PolicyValidationError,
    RevisionLimitError,
)
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
T = "2026-11-29T12:00:00Z"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="test")
    return h


def _store(home: Home, write: bool = True) -> closing:
    return closing(home.connect(write=write))


def _policies(*ids: str) -> list[RoutingPolicy]:
    return [RoutingPolicy.from_dict({"id": i, "match": {"repo_ids": [f"acme/{i}"]}}) for i in ids]


def _file_state(home: Home) -> str:
    """A digest of every row of every table (bar SQLite's own statistics), read afresh."""
    h = hashlib.sha256()
    conn = apsw.Connection(str(home.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        for table in tables:
            h.update(table.encode())
            # every column, in order: WITHOUT ROWID tables (the shadow index's) have no rowid
            width = len(conn.execute(f'PRAGMA table_info("{table}")').fetchall())
            order = ", ".join(str(i) for i in range(1, width + 1))
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY {order}'):
                h.update(repr(row).encode())
    finally:
        conn.close()
    return h.hexdigest()


def _tamper(home: Home, sql: str, *args: object) -> None:
    conn = apsw.Connection(str(home.db_path))
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def test_a_new_store_is_absent_and_resolves_normally(home: Home) -> None:
    with _store(home) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "absent"
    assert loaded.snapshot == PolicySnapshot.empty()
    ctx = RouteContext.from_dict({"legacy_route": {"provider_binding": "anthropic"}})
    decision = explain(ctx, loaded.snapshot, snapshot_state=loaded.state)
    assert (decision.outcome, decision.reason) == ("selected", "no-policy-applies")


def test_save_writes_revisions_from_one_and_loads_them_back(home: Home) -> None:
    with _store(home) as conn:
        store = PolicyStore(conn)
        first = store.save(_policies("a", "b"), saved_at=T)
        second = store.save(list(reversed(_policies("a", "b"))), saved_at=T)
        loaded = store.load()
        old = store.load(1)
    assert (first.revision, second.revision) == (1, 2)
    assert first.content_hash == second.content_hash  # order-independent
    assert loaded.state == "ok" and loaded.snapshot.revision == 2
    assert sorted(p.id for p in loaded.snapshot.policies) == ["a", "b"]
    assert old.snapshot.revision == 1


def test_an_empty_set_is_a_real_revision(home: Home) -> None:
    with _store(home) as conn:
        store = PolicyStore(conn)
        store.save(_policies("a"), saved_at=T)
        empty = store.save([], saved_at=T)
        assert empty.revision == 2
        loaded = store.load()
    assert loaded.state == "ok" and loaded.snapshot.policies == ()
    assert loaded.snapshot.revision == 2


def test_revisions_stay_monotonic_across_reopen(home: Home) -> None:
    for expected in (1, 2, 3):
        with _store(home) as conn:
            assert PolicyStore(conn).save(_policies("a"), saved_at=T).revision == expected
    with _store(home, write=False) as conn:
        assert [r.revision for r in PolicyStore(conn).history()] == [1, 2, 3]


def test_validation_refusal_writes_nothing(home: Home) -> None:
    with _store(home) as conn:
        PolicyStore(conn).save(_policies("a"), saved_at=T)
    before = _file_state(home)
    bad = [RoutingPolicy.from_dict({"id": "Bad!"}), *_policies("a", "a")]
    with _store(home) as conn:
        with pytest.raises(PolicyValidationError) as info:
            PolicyStore(conn).save(bad, saved_at=T)
        assert {i.code for i in info.value.issues} == {"invalid-policy-id", "duplicate-policy-id"}
        assert PolicyStore(conn).load().snapshot.revision == 1
    assert _file_state(home) == before


@pytest.mark.parametrize(
    ("sql", "args", "detail"),
    [
        ("UPDATE policy_revisions SET body = ? WHERE revision = 2", (b"{not json",), "unparseable"),
        (
            "UPDATE policy_revisions SET body = ? WHERE revision = 2",
            (b'[{"id":"evil","enabled":true}]',),
            "does not match",
        ),
        (
            "UPDATE policy_revisions SET content_hash = ? WHERE revision = 2",
            ("sha256:" + "0" * 64,),
            "does not match",
        ),
        (
            "UPDATE policy_revisions SET body = ? WHERE revision = 2",
            (b'[{"id":"x","match":{"roles":["wizard"]}}]',),
            "unparseable",
        ),
    ],
    ids=["unparseable", "edited-policies", "edited-hash", "outside-vocabulary"],
)
def test_corrupt_current_revision_holds_and_refuses_writes(
    home: Home, sql: str, args: tuple, detail: str
) -> None:
    with _store(home) as conn:
        store = PolicyStore(conn)
        store.save(_policies("a"), saved_at=T)
        store.save(_policies("a", "b"), saved_at=T)
    _tamper(home, sql, *args)
    with _store(home) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "corrupt" and not loaded
    assert detail in (loaded.detail or "")
    # Never partial policies; revision 0.
    assert loaded.snapshot.policies == () and loaded.snapshot.revision == 0
    ctx = RouteContext.from_dict({"legacy_route": {"provider_binding": "anthropic"}})
    decision = explain(ctx, loaded.snapshot, snapshot_state=loaded.state)
    assert (decision.outcome, decision.reason) == ("held", "snapshot-unavailable")
    before = _file_state(home)
    with _store(home) as conn, pytest.raises(CorruptSnapshotError):
        PolicyStore(conn).save(_policies("c"), saved_at=T)
    assert _file_state(home) == before
    with _store(home) as conn:
        assert [r.revision for r in PolicyStore(conn).history()] == [1, 2]


def test_an_edit_that_parses_to_the_same_policies_is_still_corrupt(home: Home) -> None:
    with _store(home) as conn:
        saved = PolicyStore(conn).save(_policies("a", "b"), saved_at=T)
    assert saved.content_hash == hash_policies(saved.policies)
    with _store(home, write=False) as conn:
        (body,) = conn.execute("SELECT body FROM policy_revisions").fetchone()
    _tamper(home, "UPDATE policy_revisions SET body = ?", bytes(body).replace(b",", b", "))
    with _store(home) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "corrupt" and "does not match" in (loaded.detail or "")


@pytest.mark.parametrize(
    ("body", "state"),
    [
        ("same bytes, stored as TEXT", "ok"),
        ("[" + "9" * 5000 + "]", "corrupt"),
        ("[" * 100_000 + "]" * 100_000, "corrupt"),
        ('[{"id": "a", "id": "b"}]', "corrupt"),
    ],
    ids=["text-column", "huge-integer", "deep-nesting", "garbage-policy"],
)
def test_a_hand_edited_body_loads_typed_never_crashes(
    home: Home, runner: CliRunner, body: str, state: str
) -> None:
    with _store(home) as conn:
        saved = PolicyStore(conn).save(_policies("a"), saved_at=T)
        (stored,) = conn.execute("SELECT body FROM policy_revisions").fetchone()
    text = bytes(stored).decode() if body.startswith("same bytes") else body
    # What `sqlite3 rensei.db "UPDATE ..."` does: the value goes in as TEXT. STRICT refuses
    # TEXT in a BLOB column, so the edit goes through a cast the way a hand repair would.
    _tamper(home, "UPDATE policy_revisions SET body = CAST(? AS BLOB)", text)
    with _store(home) as conn:
        loaded = PolicyStore(conn).load()
        assert [r.revision for r in PolicyStore(conn).history()] == [1]
    assert loaded.state == state
    if state == "ok":
        assert loaded.snapshot.content_hash == saved.content_hash
    for args in (["policy", "show"], ["policy", "history"], ["explain", "{}", "--json"]):
        result = runner.invoke(cli, [*args, "--home", str(home.path)])
        assert result.exit_code == 0, (args, result.output)
        assert "Traceback" not in result.output


def test_policy_revision_column_is_strict(home: Home) -> None:
    with _store(home) as conn, pytest.raises(apsw.Error):
        conn.execute(
            "INSERT INTO policy_revisions(revision, content_hash, body, saved_at) "
            "VALUES (1, 'x', 'text, not a blob', 't')"
        )


def test_out_of_range_revision_numbers_are_clear_errors(runner: CliRunner, home: Home) -> None:
    for rev in ("99999999999999999999", "0"):
        result = runner.invoke(cli, ["policy", "show", "--rev", rev, "--home", str(home.path)])
        assert result.exit_code == 2 and "Traceback" not in result.output
    with _store(home) as conn, pytest.raises(NotFoundError):
        PolicyStore(conn).load(2**63)


def test_an_unknown_revision_is_not_found(home: Home) -> None:
    with _store(home) as conn, pytest.raises(NotFoundError):
        PolicyStore(conn).load(7)


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_save_show_history_and_explain_from_the_store(runner: CliRunner, home: Home) -> None:
    args = ["--home", str(home.path)]
    saved = runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *args])
    assert saved.exit_code == 0, saved.output
    assert saved.stderr.startswith("saved revision 1: 7 policies")  # a confirmation: stderr
    show = runner.invoke(cli, ["policy", "show", "--json", *args])
    doc = json.loads(show.stdout)
    assert doc["state"] == "ok" and doc["revision"] == 1 and len(doc["policies"]) == 7
    history = runner.invoke(cli, ["policy", "history", "--json", *args])
    assert [r["revision"] for r in json.loads(history.stdout)] == [1]
    explained = runner.invoke(cli, ["explain", str(EXAMPLES / "context.json"), "--json", *args])
    decision = json.loads(explained.stdout)
    assert decision["policy_revision"] == 1 and decision["policy_id"] == "acme-widgets-implementer"


def test_cli_save_refuses_an_invalid_file_and_keeps_the_revision(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    args = ["--home", str(home.path)]
    runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *args])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "a"}, {"id": "a"}]))
    result = runner.invoke(cli, ["policy", "save", str(bad), *args])
    assert result.exit_code == 1
    assert "duplicate-policy-id" in result.stderr and "nothing was saved" in result.stderr
    show = runner.invoke(cli, ["policy", "show", "--json", *args])
    assert json.loads(show.stdout)["revision"] == 1


def test_cli_on_an_uninitialised_home(runner: CliRunner, tmp_path: Path) -> None:
    missing = ["--home", str(tmp_path / "nowhere")]
    saved = runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *missing])
    assert saved.exit_code == 1 and "rensei init" in saved.stderr
    # explain still resolves (absent), and says so on stderr.
    ctx = json.dumps({"legacy_route": {"provider_binding": "anthropic"}})
    explained = runner.invoke(cli, ["explain", ctx, "--json", *missing])
    assert explained.exit_code == 0
    assert json.loads(explained.stdout)["snapshot_state"] == "absent"
    assert "no store" in explained.stderr


def test_an_explicit_repair_writes_the_next_revision_and_keeps_the_evidence(
    home: Home, runner: CliRunner
) -> None:
    with _store(home) as conn:
        PolicyStore(conn).save(_policies("a"), saved_at=T)
        PolicyStore(conn).save(_policies("a", "b"), saved_at=T)
    _tamper(home, "UPDATE policy_revisions SET body = ? WHERE revision = 2", b"{damaged")
    args = ["--home", str(home.path)]
    refused = runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *args])
    assert refused.exit_code == 1 and "--over-corrupt" in refused.stderr
    repaired = runner.invoke(
        cli, ["policy", "save", str(EXAMPLES / "policies.json"), "--over-corrupt", *args]
    )
    assert repaired.exit_code == 0, repaired.output
    assert repaired.stderr.startswith("saved revision 3: 7 policies")
    with _store(home, write=False) as conn:
        store = PolicyStore(conn)
        assert store.load().state == "ok" and store.load().snapshot.revision == 3
        assert store.load(2).state == "corrupt"  # the evidence stays, never renumbered
        (body,) = conn.execute("SELECT body FROM policy_revisions WHERE revision = 2").fetchone()
    assert bytes(body) == b"{damaged"


# -- Revision numbers past 2**53 - 1 (issue 14 item 10) -----------------------------------------

MAX_REV = 2**53 - 1


@pytest.mark.parametrize("revision", [2**53, 2**63 - 1, -1], ids=["2^53", "2^63-1", "negative"])
def test_a_stored_revision_outside_the_json_range_loads_corrupt(
    home: Home, runner: CliRunner, revision: int
) -> None:
    with _store(home) as conn:
        PolicyStore(conn).save(_policies("a"), saved_at=T)
    _tamper(home, "UPDATE policy_revisions SET revision = ?", revision)
    with _store(home, write=False) as conn:
        loaded = PolicyStore(conn).load()
    assert loaded.state == "corrupt" and str(revision) in (loaded.detail or "")
    assert loaded.snapshot.revision == 0 and loaded.snapshot.policies == ()
    # explain stays total: the CLI holds, it does not crash.
    result = runner.invoke(cli, ["explain", "{}", "--json", "--home", str(home.path)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reason"] == "snapshot-unavailable"


@pytest.mark.parametrize("repair", [False, True], ids=["plain", "over-corrupt"])
@pytest.mark.parametrize("current", [MAX_REV, 2**63 - 1], ids=["2^53-1", "2^63-1"])
def test_cli_save_past_the_last_revision_number_is_one_line_and_writes_nothing(
    home: Home, runner: CliRunner, current: int, repair: bool
) -> None:
    with _store(home) as conn:
        PolicyStore(conn).save(_policies("a"), saved_at=T)
    _tamper(home, "UPDATE policy_revisions SET revision = ?", current)
    before = _file_state(home)
    args = ["policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home.path)]
    result = runner.invoke(cli, args + (["--over-corrupt"] if repair else []))
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert _file_state(home) == before


def test_store_save_after_the_last_revision_number_is_a_typed_refusal(home: Home) -> None:
    with _store(home) as conn:
        PolicyStore(conn).save(_policies("a"), saved_at=T)
    _tamper(home, "UPDATE policy_revisions SET revision = ?", MAX_REV)
    before = _file_state(home)
    with _store(home) as conn:
        store = PolicyStore(conn)
        assert store.load().state == "ok" and store.load().snapshot.revision == MAX_REV
        with pytest.raises(RevisionLimitError):
            store.save(_policies("b"), saved_at=T)
    assert _file_state(home) == before


@pytest.mark.parametrize("revision", [2**53, 2**70, -1, True, 1.0], ids=str)
def test_a_snapshot_cannot_be_built_with_a_revision_a_decision_cannot_carry(
    revision: object,
) -> None:
    with pytest.raises(MalformedError, match="revision"):
        PolicySnapshot.of((), revision=revision)  # type: ignore[arg-type]
    with pytest.raises(MalformedError, match="revision"):
        PolicySnapshot(revision=revision, policies=(), content_hash="x")  # type: ignore[arg-type]


def test_explain_at_the_last_revision_number_is_total() -> None:
    decision = explain(RouteContext(), PolicySnapshot.of((), revision=MAX_REV))
    assert decision.policy_revision == MAX_REV and decision.reason == "no-legacy-route"
