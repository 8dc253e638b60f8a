"""``policy validate`` reports every problem of a file, structural (not JSON, a malformed field
of any policy or of the document, a declared content_hash that is not its own) and semantic
(the validation codes of the well-formed policies), in text (one line each on stdout, the count
on stderr) and in ``--json`` alike; exit 1. (Before issue 22 it stopped at the first structural
error, and ``--json`` printed nothing for one.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.structure import read_policy_document
from rensei_routing.core.routing.validation import MAX_ISSUES_PER_POLICY
from rensei_routing.errors import MalformedError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rensei_routing" / "examples"

MIXED: dict[str, Any] = {
    "policies": [
        {
            "id": "a",
            "priority": 99999,
            "colour": "red",
            "match": {"roles": ["wizard"], "repo_ids": [3]},
            "action": {"selection": "x"},
        },
        {"id": "Bad Id"},
        {"enabled": "yes"},
        7,
        {"id": "b", "action": {"requirement_map": [{"requirement": "x"}]}},
        {"id": "c", "match": {"repo_ids": ["not-canonical"]}},
    ],
    "revision": -1,
    "extra": 1,
}
EXPECTED = [
    ("malformed-document", None, "extra: unknown field"),
    ("malformed-document", None, "revision: expected 0..9007199254740991, got -1"),
    ("malformed-policy", "a", "policies[0].colour: unknown field"),
    ("malformed-policy", "a", "policies[0].priority: expected 0..10000, got 99999"),
    ("malformed-policy", "a", "policies[0].match.repo_ids[0]: expected a string, got int"),
    ("malformed-policy", "a", "policies[0].match.roles[0]: unknown role 'wizard'"),
    ("malformed-policy", "a", "policies[0].action.selection: unknown selection 'x'"),
    ("malformed-policy", None, "policies[2].id: required field is missing"),
    ("malformed-policy", None, "policies[2].enabled: expected true or false"),
    ("malformed-policy", None, "policies[3]: expected an object, got int"),
    ("malformed-policy", "b", "policies[4].action.requirement_map[0].model: required field"),
    ("invalid-policy-id", "Bad Id", "id must match"),
    ("non-canonical-repo-id", "c", "repo id 'not-canonical' is not canonical"),
]


def _matches(found: list[tuple[str, str | None, str]]) -> None:
    assert len(found) == len(EXPECTED), found
    for got, want in zip(found, EXPECTED, strict=True):
        assert got[:2] == want[:2] and got[2].startswith(want[2]), got


def test_every_problem_in_text_and_json(tmp_path: Path, runner: CliRunner) -> None:
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(MIXED))
    text = runner.invoke(cli, ["policy", "validate", str(path)])
    assert text.exit_code == 1
    rows = [line.split("\t") for line in text.stdout.splitlines()]
    _matches([(c, None if p == "-" else p, d) for c, p, d in rows])
    assert text.stderr == f"Error: {len(EXPECTED)} validation issue(s) in {path}\n"
    as_json = runner.invoke(cli, ["policy", "validate", str(path), "--json"])
    assert as_json.exit_code == 1
    doc = json.loads(as_json.stdout)
    assert doc["valid"] is False and doc["policy_count"] == 6 and doc["content_hash"] is None
    _matches([(i["code"], i["policy_id"], i["detail"]) for i in doc["issues"]])
    assert doc["issues_omitted"] == 0


@pytest.mark.parametrize(
    ("content", "code", "needle"),
    [
        ("{not json", "not-json", "not valid JSON"),
        ('[{"id": "a", "colour": "red"}]', "malformed-policy", "policies[0].colour"),
        ('{"policies": "nope"}', "malformed-document", "policies: expected an array"),
        ('"a string"', "malformed-document", "expected an object, got str"),
        ('{"policies": [{"id": "a"}], "content_hash": "sha256:00"}', "content-hash-mismatch", ""),
    ],
    ids=["not-json", "malformed-policy", "not-an-array", "not-an-object", "hash-mismatch"],
)
def test_one_structural_problem_prints_json(
    tmp_path: Path, runner: CliRunner, content: str, code: str, needle: str
) -> None:
    path = tmp_path / "one.json"
    path.write_text(content)
    result = runner.invoke(cli, ["policy", "validate", str(path), "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["valid"] is False and [i["code"] for i in doc["issues"]] == [code]
    assert needle in doc["issues"][0]["detail"]
    assert result.stderr == f"Error: 1 validation issue(s) in {path}\n"


def test_an_unreadable_file_is_json_too(tmp_path: Path, runner: CliRunner) -> None:
    missing = tmp_path / "nope.json"
    result = runner.invoke(cli, ["policy", "validate", str(missing), "--json"])
    assert result.exit_code == 1
    issues = json.loads(result.stdout)["issues"]
    assert [i["code"] for i in issues] == ["unreadable"] and "cannot read" in issues[0]["detail"]
    text = runner.invoke(cli, ["policy", "validate", str(missing)])
    assert text.exit_code == 1 and text.stdout == "" and "cannot read" in text.stderr


def test_a_policy_with_many_malformed_fields_lists_at_most_the_cap(
    tmp_path: Path, runner: CliRunner
) -> None:
    path = tmp_path / "wide.json"
    path.write_text(json.dumps([{"id": "w", **{f"f{i:03}": i for i in range(200)}}]))
    result = runner.invoke(cli, ["policy", "validate", str(path), "--json"])
    issues = json.loads(result.stdout)["issues"]
    assert len(issues) == MAX_ISSUES_PER_POLICY
    assert all(i["code"] == "malformed-policy" and i["policy_id"] == "w" for i in issues)


def test_a_valid_file_is_still_valid(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["policy", "validate", str(EXAMPLES / "policies.json"), "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["valid"] is True and doc["issues"] == [] and doc["policy_count"] == 7
    expected = PolicySnapshot.from_dict(json.loads((EXAMPLES / "policies.json").read_text()))
    assert doc["content_hash"] == expected.content_hash


@pytest.mark.parametrize(
    "doc",
    [
        json.loads((EXAMPLES / "policies.json").read_text()),
        MIXED,
        {"policies": [{"id": "a", "match": {"roles": [1]}}], "x": 1},
        [{"id": "a"}, {"id": "b", "action": {"account_pool": ["x", "x"]}}],
        {"revision": 3},
        None,
    ],
)
def test_the_readers_first_error_is_among_the_problems(doc: Any) -> None:
    read = read_policy_document(doc)
    try:
        snapshot = PolicySnapshot.from_dict(doc)
    except MalformedError as e:
        assert read.snapshot is None and str(e) in [i.detail for i in read.issues]
    else:
        assert read.issues == () and read.snapshot == snapshot


def test_the_docs_say_so() -> None:
    text = " ".join((ROOT / "docs" / "commands.md").read_text().split())
    assert "structural and semantic" in text and "malformed-policy" in text
