"""``rensei policy save --expected-revision/--scope-repo/--actor`` and ``rensei policy
rollback`` through the CLI (issue 30, part 1): real processes on one home racing at one
expected revision, and every refusal one ``Error:`` line, exit 1, nothing written (the home's
rows and its audit chain unchanged).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.routing.edits import MUTATION_RECORD
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

RENSEI = [sys.executable, "-m", "rensei_routing.cli"]
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.init(org="acme")
    return h


def write(path: Path, policies: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(policies))
    return path


def repo(pid: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": pid, "match": {"repo_ids": [name]}, **extra}


def state(home: Home) -> str:
    """Every row of the policy revisions, control events and audit chain, read afresh."""
    h = hashlib.sha256()
    conn = apsw.Connection(str(home.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for table in ("policy_revisions", "control_events", "audit_records"):
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid'):
                h.update(repr(row).encode())
    finally:
        conn.close()
    return h.hexdigest()


def mutations(home: Home) -> list[dict[str, Any]]:
    with AuditLog.open(home) as log:
        assert log.verify().ok
        return [
            r.payload
            for r in log.records()
            if isinstance(r.payload, dict) and r.payload.get("record_type") == MUTATION_RECORD
        ]


def run(runner: CliRunner, home: Home, *args: str, **env: str) -> Any:
    return runner.invoke(cli, [*args, "--home", str(home.path)], env=env or None)


def one_error_line(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return str(lines[0])


def test_save_at_the_expected_revision_records_actor_and_ids(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    first = write(tmp_path / "a.json", [repo("a", "acme/a"), repo("b", "acme/b")])
    assert (
        run(runner, home, "policy", "save", str(first), "--expected-revision", "0").exit_code == 0
    )
    second = write(tmp_path / "b.json", [repo("a", "acme/a", priority=2), repo("c", "acme/c")])
    done = run(
        runner,
        home,
        "policy",
        "save",
        str(second),
        "--expected-revision",
        "1",
        "--json",
        RENSEI_ACTOR="carol",
    )
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert (out["revision"], out["prior_revision"], out["actor"]) == (2, 1, "carol")
    assert (out["added"], out["removed"], out["changed"]) == (["c"], ["b"], ["a"])
    last = mutations(home)[-1]
    assert last["actor"] == "carol" and last["content_hash"] == out["content_hash"]
    named = run(runner, home, "policy", "save", str(first), "--actor", "dave", RENSEI_ACTOR="x")
    assert named.exit_code == 0 and mutations(home)[-1]["actor"] == "dave"


def test_a_stale_save_is_one_error_line_naming_the_winner(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    f = write(tmp_path / "a.json", [repo("a", "acme/a")])
    for _ in range(2):
        assert run(runner, home, "policy", "save", str(f)).exit_code == 0
    before = state(home)
    line = one_error_line(run(runner, home, "policy", "save", str(f), "--expected-revision", "1"))
    assert line.startswith("Error: stale-revision: expected revision 1, but revision 2")
    assert state(home) == before


def test_two_processes_at_one_expected_revision_exactly_one_wins(
    home: Home, tmp_path: Path
) -> None:
    base = write(tmp_path / "base.json", [repo("base", "acme/base")])
    env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": "", "RENSEI_HOME": str(home.path)}
    subprocess.run([*RENSEI, "policy", "save", str(base)], env=env, check=True)
    files = [write(tmp_path / f"w{i}.json", [repo(f"w{i}", f"acme/w{i}")]) for i in range(3)]
    procs = [
        subprocess.Popen(
            [*RENSEI, "policy", "save", str(f), "--expected-revision", "1", "--actor", f.stem],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in files
    ]
    outcomes = [(p.wait(120), *p.communicate()) for p in procs]
    won = [i for i, (rc, _, _) in enumerate(outcomes) if rc == 0]
    assert len(won) == 1
    for i, (rc, _, err) in enumerate(outcomes):
        if i != won[0]:
            assert rc == 1 and err.strip().splitlines() == [
                "Error: stale-revision: expected revision 1, but revision 2 is current (it won); "
                "nothing was saved: look at it, then save again against it"
            ]
    assert [m["actor"] for m in mutations(home)][1:] == [f"w{won[0]}"]
    with AuditLog.open(home) as log:
        assert log.count() == 2


def test_rollback_through_the_cli(runner: CliRunner, home: Home, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", [repo("a", "acme/a")])
    b = write(tmp_path / "b.json", [repo("b", "acme/b")])
    for f in (a, b):
        assert run(runner, home, "policy", "save", str(f)).exit_code == 0
    back = run(runner, home, "policy", "rollback", "--to", "1", "--expected-revision", "2")
    assert back.exit_code == 0, back.output
    assert "rolled back to revision 1 as revision 3" in back.stderr
    empty = run(runner, home, "policy", "rollback", "--to", "0", "--json")
    assert json.loads(empty.stdout)["policy_count"] == 0
    before = state(home)
    missing = one_error_line(run(runner, home, "policy", "rollback", "--to", "99"))
    assert missing == "Error: no-such-revision: policy revision 99 never existed; nothing was saved"
    stale = one_error_line(
        run(runner, home, "policy", "rollback", "--to", "1", "--expected-revision", "3")
    )
    assert "stale-revision" in stale and "revision 4 is current" in stale
    assert state(home) == before


def test_scope_and_credential_refusals_through_the_cli(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    base = write(tmp_path / "base.json", [repo("mine", "acme/a"), repo("theirs", "acme/b")])
    assert run(runner, home, "policy", "save", str(base)).exit_code == 0
    before = state(home)
    smuggle = write(
        tmp_path / "s.json", [repo("mine", "acme/a"), repo("theirs", "acme/b", priority=9)]
    )
    line = one_error_line(
        run(runner, home, "policy", "save", str(smuggle), "--scope-repo", "acme/a")
    )
    assert line.startswith("Error: out-of-scope: policy 'theirs' would change")
    leaky = write(
        tmp_path / "l.json",
        [repo("mine", "acme/a", description=f"use {GITHUB_TOKEN}"), repo("theirs", "acme/b")],
    )
    line = one_error_line(run(runner, home, "policy", "save", str(leaky)))
    assert line.startswith("Error: credential-shaped-value: policy 'mine'")
    assert "github-token" in line and GITHUB_TOKEN not in line and GITHUB_TOKEN[:12] not in line
    actor = one_error_line(run(runner, home, "policy", "save", str(base), "--actor", GITHUB_TOKEN))
    assert "credential-shaped-value: the actor" in actor and GITHUB_TOKEN[:12] not in actor
    bad_scope = one_error_line(
        run(runner, home, "policy", "save", str(base), "--scope-repo", "nope")
    )
    assert "not a canonical owner/name" in bad_scope
    assert state(home) == before
    scoped = write(tmp_path / "ok.json", [repo("mine", "acme/a", priority=3)])
    ok = run(runner, home, "policy", "save", str(scoped), "--scope-repo", "acme/a", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["changed"] == ["mine"]


def test_a_save_over_a_corrupt_store_through_the_cli(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    f = write(tmp_path / "a.json", [repo("a", "acme/a")])
    assert run(runner, home, "policy", "save", str(f)).exit_code == 0
    conn = home.connect(write=True)
    try:
        with conn:
            conn.execute("UPDATE policy_revisions SET body = CAST('[' AS BLOB)")
    finally:
        conn.close()
    before = state(home)
    line = one_error_line(run(runner, home, "policy", "save", str(f), "--expected-revision", "1"))
    assert "refusing to write over a corrupt store" in line
    line = one_error_line(run(runner, home, "policy", "rollback", "--to", "0"))
    assert "refusing to write over a corrupt store" in line
    assert state(home) == before


def test_policy_import_is_audited_with_the_actor_rule(
    runner: CliRunner, home: Home, tmp_path: Path
) -> None:
    from . import hydraflow_ref as ref

    src = tmp_path / "policies.json"
    src.write_text(ref.policy_store(list(ref.SAMPLE_POLICIES), revision=7))
    done = run(
        runner, home, "policy", "import", str(src), "--format", "hydraflow", "--actor", "eve"
    )
    assert done.exit_code == 0, done.output
    (record,) = mutations(home)
    assert (record["actor"], record["revision"], len(record["added"])) == ("eve", 1, 4)
    leaky = [dict(p) for p in ref.SAMPLE_POLICIES]
    leaky[1] = {**leaky[1], "match": {"principal_ids": [GITHUB_TOKEN.lower()]}}
    src.write_text(ref.policy_store(leaky, revision=8))
    before = state(home)
    line = one_error_line(run(runner, home, "policy", "import", str(src), "--format", "hydraflow"))
    assert "credential-shaped-value" in line and GITHUB_TOKEN[:12] not in line
    assert state(home) == before
