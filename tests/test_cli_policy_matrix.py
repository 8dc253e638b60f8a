"""``rensei policy matrix`` and the blast radius ``policy save`` prints (issue 30, part 2),
through the CLI against a real home (SQLite, WAL): the matrix of a revision, the diff against
a revision or a candidate FILE, and every refusal one ``Error:`` line, exit 1, nothing written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.routing.matrix import UNMANAGED

EXAMPLE = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples" / "policies.json"

GLOBAL: dict[str, Any] = {
    "id": "global",
    "priority": 0,
    "match": {},
    "action": {
        "account_pool": ["primary"],
        "requirement_map": [
            {"requirement": {"kind": "capability", "value": "balanced"}, "model": "claude-x"}
        ],
    },
}
REVIEWERS: dict[str, Any] = {
    "id": "reviewers-zai",
    "priority": 10,
    "match": {"roles": ["reviewer"], "request_faces": ["agentic"]},
    "action": {"provider_lock": "zai-harness"},
}


def _run(runner: CliRunner, home: Path, *args: str) -> Any:
    return runner.invoke(cli, ["--home", str(home), *args], catch_exceptions=False)


def _write(tmp_path: Path, name: str, policies: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"policies": policies}), "utf-8")
    return path


def _digest(home: Path) -> dict[str, str]:
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "home"
    assert _run(runner, path, "init").exit_code == 0
    return path


def test_the_matrix_of_the_current_revision(runner: CliRunner, home: Path) -> None:
    empty = _run(runner, home, "policy", "matrix", "--json")
    assert empty.exit_code == 0, empty.output
    doc = json.loads(empty.stdout)
    assert doc["revision"] == 0 and {c["outcome"] for c in doc["cells"]} == {UNMANAGED}
    assert _run(runner, home, "policy", "save", str(EXAMPLE)).exit_code == 0
    result = _run(runner, home, "policy", "matrix", "--repo", "Acme/Widgets", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["revision"] == 1
    assert doc["axes"]["repos"] == ["acme/widgets"]
    assert doc["axes"]["request_faces"] == ["agentic", "one-shot"]
    assert len(doc["cells"]) == 4 * 7 * 2 * 3  # classes x roles x faces x requirements
    cell = next(
        c
        for c in doc["cells"]
        if c["role"] == "implementer"
        and c["repo_class"] == "client"
        and c["request_face"] == "agentic"
        and c["model_requirement"] == {"kind": "capability", "value": "high-reasoning"}
    )
    assert cell == {
        "repo": "acme/widgets",
        "repo_class": "client",
        "role": "implementer",
        "request_face": "agentic",
        "model_requirement": {"kind": "capability", "value": "high-reasoning"},
        "outcome": "selected",
        "reason": "matched-policy",
        "provider_binding": "anthropic",
        "account_id": "anthropic-backup",
        "effective_model": "claude-opus-4-1",
        "policy_id": "acme-widgets-implementer",
        "rung": 3,
    }
    text = _run(runner, home, "policy", "matrix", "--role", "reviewer", "--face", "agentic")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith("repo\trepo_class\trole\tface\trequirement\toutcome")
    assert any("\thydraflow-reviewers-on-zai\t5" in line for line in lines)
    assert lines[-1].startswith("revision 1: 12 cells (")


def test_against_a_revision_and_against_a_candidate_file(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    assert (
        _run(runner, home, "policy", "save", str(_write(tmp_path, "a.json", [GLOBAL]))).exit_code
        == 0
    )
    candidate = _write(tmp_path, "b.json", [GLOBAL, REVIEWERS])
    before = _digest(home)
    by_file = _run(runner, home, "policy", "matrix", "--against", str(candidate), "--json")
    assert by_file.exit_code == 0, by_file.output
    radius = json.loads(by_file.stdout)["blast_radius"]
    assert (radius["before_revision"], radius["after_revision"]) == (1, 0)
    assert radius["moved"] == 4 and radius["become_held"] == 4 and radius["cells"] == 56
    change = radius["changes"][0]
    assert change["role"] == "reviewer" and change["request_face"] == "agentic"
    assert change["before"]["policy_id"] == "global" and change["before"]["outcome"] == "selected"
    assert change["after"] == {
        "outcome": "held",
        "reason": "capability-unmapped",
        "provider_binding": None,
        "account_id": None,
        "effective_model": None,
        "policy_id": "reviewers-zai",
        "rung": 7,
    }
    assert change["becomes"] == "held"
    assert _digest(home) == before  # a diff against a FILE saves nothing
    assert _run(runner, home, "policy", "save", str(candidate)).exit_code == 0
    by_rev = _run(runner, home, "policy", "matrix", "--against", "1")
    assert by_rev.exit_code == 0, by_rev.output
    lines = by_rev.stdout.splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("- client reviewer agentic capability:balanced: selected ")
    assert "-> held capability-unmapped" in lines[0]
    assert lines[-1] == (
        "blast radius rev 1 -> rev 2: 4 of 56 cells move (4 become held, 0 become rejected, "
        "0 become unmanaged)"
    )
    same = _run(runner, home, "policy", "matrix", "--rev", "2", "--against", "2", "--json")
    assert json.loads(same.stdout)["blast_radius"]["moved"] == 0


def test_save_prints_its_blast_radius(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    first = runner.invoke(
        cli, ["--home", str(home), "policy", "save", str(_write(tmp_path, "a.json", [GLOBAL]))]
    )
    assert first.exit_code == 0
    assert first.stderr.splitlines()[-1] == (
        "blast radius rev 0 -> rev 1: 56 of 56 cells move (0 become held, 0 become rejected, "
        "0 become unmanaged)"
    )
    second = _run(
        runner,
        home,
        "policy",
        "save",
        str(_write(tmp_path, "b.json", [GLOBAL, REVIEWERS])),
        "--json",
    )
    assert second.exit_code == 0
    doc = json.loads(second.stdout)
    assert doc["revision"] == 2
    radius = doc["blast_radius"]
    assert radius["summary"].startswith("blast radius rev 1 -> rev 2: 4 of 56 cells move")
    assert radius["moved"] == 4 and len(radius["changes"]) == 4
    # a repository a policy names gets its own cells in the save's blast radius
    scoped = {**REVIEWERS, "id": "acme-only", "match": {"repo_ids": ["acme/widgets"]}}
    third = _run(
        runner,
        home,
        "policy",
        "save",
        str(_write(tmp_path, "c.json", [GLOBAL, REVIEWERS, scoped])),
        "--json",
    )
    radius = json.loads(third.stdout)["blast_radius"]
    assert radius["cells"] == 2 * 56
    assert {c["repo"] for c in radius["changes"]} == {"acme/widgets"}


def _corrupt(home: Path, revision: int) -> None:
    conn = apsw.Connection(str(home / "rensei.db"))
    try:
        conn.execute(
            "UPDATE policy_revisions SET body = CAST('{not json' AS BLOB) WHERE revision = ?",
            (revision,),
        )
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rev", "9"), "Error: no policy revision 9"),
        (("--against", "9"), "Error: no policy revision 9"),
        (("--repo", "not a repo"), "Error: repository 'not a repo' is not a canonical"),
        (("--role", "pilot"), "Error: unknown role 'pilot'"),
        (("--face", "sideways"), "Error: unknown request face 'sideways'"),
        (("--requirement", "hgh-reasoning"), "Error: unknown requirement 'hgh-reasoning'"),
        (("--repo-class", "enterprise"), "Error: unknown repo class 'enterprise'"),
        (
            tuple(a for i in range(100) for a in ("--requirement", f"concrete_model:m{i}")),
            "Error: the matrix would hold 5600 cells, more than the bound of 5000",
        ),
        (("--rev", "1"), "Error: revision 1 is corrupt"),
        ((), "Error: the current revision is corrupt"),
        (("--rev", "2", "--against", "1"), "Error: revision 1 is corrupt"),
    ],
    ids=[
        "rev-never-existed",
        "against-never-existed",
        "bad-repo",
        "unknown-role",
        "unknown-face",
        "unknown-requirement",
        "unknown-class",
        "too-many-cells",
        "corrupt-rev",
        "corrupt-current",
        "corrupt-against",
    ],
)
def test_bad_input_is_one_line_exit_1_nothing_written(
    runner: CliRunner, home: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    assert (
        _run(runner, home, "policy", "save", str(_write(tmp_path, "a.json", [GLOBAL]))).exit_code
        == 0
    )
    if "corrupt" in message:
        if "current" in message:
            _corrupt(home, 1)
        else:
            assert _run(runner, home, "policy", "save", str(EXAMPLE)).exit_code == 0
            _corrupt(home, 1)
    before = _digest(home)
    result = runner.invoke(cli, ["--home", str(home), "policy", "matrix", *args])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert "Traceback" not in result.output
    assert _digest(home) == before


def test_a_bad_candidate_file_is_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    twice = _write(tmp_path, "twice.json", [GLOBAL, GLOBAL])
    result = runner.invoke(cli, ["--home", str(home), "policy", "matrix", "--against", str(twice)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {twice}: 1 validation issue(s), first: ")
    missing = runner.invoke(
        cli, ["--home", str(home), "policy", "matrix", "--against", str(tmp_path / "nope.json")]
    )
    assert missing.exit_code == 1 and len(missing.stderr.splitlines()) == 1


def test_save_over_a_corrupt_revision_says_the_radius_was_not_computed(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    assert (
        _run(runner, home, "policy", "save", str(_write(tmp_path, "a.json", [GLOBAL]))).exit_code
        == 0
    )
    _corrupt(home, 1)
    result = runner.invoke(
        cli, ["--home", str(home), "policy", "save", "--over-corrupt", str(EXAMPLE), "--json"]
    )
    assert result.exit_code == 0, result.output
    radius = json.loads(result.stdout)["blast_radius"]
    assert radius["not_computed"].startswith("revision 1 is corrupt")


def test_a_store_that_is_not_a_database_is_refused(runner: CliRunner, home: Path) -> None:
    db = home / "rensei.db"
    for extra in ("rensei.db-wal", "rensei.db-shm"):
        (home / extra).unlink(missing_ok=True)
    db.write_bytes(b"not a database " * 100)
    before = _digest(home)
    result = runner.invoke(cli, ["--home", str(home), "policy", "matrix"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: cannot open database {db}: file is not a database"
    ]
    assert _digest(home) == before


def test_the_python_api_over_a_real_store(tmp_path: Path) -> None:
    from rensei_routing.core.routing.policy import PolicySnapshot
    from rensei_routing.errors import CorruptSnapshotError, NotFoundError
    from rensei_routing.ops.matrix import MatrixRequest, blast_radius, compare, matrix_of
    from rensei_routing.store.home import Home
    from rensei_routing.store.policies import PolicyStore

    home = Home(tmp_path / "api")
    home.init()
    conn = home.connect(write=True)
    try:
        store = PolicyStore(conn)
        for policies in ([GLOBAL], [GLOBAL, REVIEWERS]):
            snapshot = PolicySnapshot.from_dict({"policies": policies})
            store.save(snapshot.policies, saved_at="2026-01-01T00:00:00.000000Z")
        current = matrix_of(store.load, None, MatrixRequest(roles=("reviewer",)))
        assert current.revision == 2 and current.counts()["held"] == 4
        radius = blast_radius(store.load, 1, 2)
        assert radius.summary().startswith("blast radius rev 1 -> rev 2: 4 of 56 cells move")
        first, none = store.load(1).snapshot, PolicySnapshot.empty()
        matrix, against_empty = compare(none, first, MatrixRequest(repo="acme/widgets"))
        assert len(against_empty.changes) == matrix.axes.size == 56
        with pytest.raises(NotFoundError):
            matrix_of(store.load, 3, MatrixRequest())
        with pytest.raises(NotFoundError):
            blast_radius(store.load, 2, 3)
        conn.execute("UPDATE policy_revisions SET body = CAST('[]' AS BLOB) WHERE revision = 1")
        with pytest.raises(CorruptSnapshotError, match="revision 1 is corrupt"):
            blast_radius(store.load, 1, 2)
    finally:
        conn.close()
