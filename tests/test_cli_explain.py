"""``rensei policy validate``, ``rensei explain`` and ``rensei explain-batch`` on files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
POLICIES = str(EXAMPLES / "policies.json")


def _run(runner: CliRunner, *args: str, input: str | None = None):
    return runner.invoke(cli, list(args), input=input, catch_exceptions=False)


def test_validate_accepts_the_shipped_example(runner: CliRunner) -> None:
    result = _run(runner, "policy", "validate", POLICIES)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("valid: 7 policies, sha256:")


def test_validate_lists_every_issue_and_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            [
                {"id": "Bad Id"},
                {"id": "x", "match": {"repo_ids": ["not-canonical"]}},
                {
                    "id": "y",
                    "action": {
                        "requirement_map": [
                            {"requirement": "claude-opus", "model": "glm-5.3"},
                        ]
                    },
                },
            ]
        )
    )
    result = _run(runner, "policy", "validate", str(bad), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["valid"] is False
    codes = sorted(i["code"] for i in doc["issues"])
    assert codes == [
        "equal-precedence-conflict",
        "invalid-policy-id",
        "literal-family-mapped-to-foreign-model",
        "non-canonical-repo-id",
    ]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ('[{"id": "a", "priority": 99999}]', "policies[0].priority"),
        ('[{"id": "a", "match": {"roles": ["wizard"]}}]', "policies[0].match.roles[0]"),
        ('[{"id": "a", "colour": "red"}]', "policies[0].colour: unknown field"),
        ('{"policies": "nope"}', "policies: expected an array"),
    ],
    ids=["not-json", "out-of-range", "outside-vocabulary", "unknown-field", "wrong-type"],
)
def test_malformed_policy_files_fail_with_one_clear_line(
    runner: CliRunner, tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    result = runner.invoke(cli, ["policy", "validate", str(path)])
    assert result.exit_code == 1
    assert needle in result.stdout  # listed as a problem (issue 22 #8), in both forms
    assert "Traceback" not in result.output + result.stderr
    assert result.stderr == f"Error: 1 validation issue(s) in {path}\n"
    as_json = runner.invoke(cli, ["policy", "validate", str(path), "--json"])
    assert as_json.exit_code == 1
    assert [needle in i["detail"] for i in json.loads(as_json.stdout)["issues"]] == [True]
    saved = runner.invoke(cli, ["policy", "save", str(path), "--home", str(tmp_path / "h")])
    assert saved.exit_code == 1 and needle in saved.stderr  # save: still the one line


def test_missing_file_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["policy", "validate", str(tmp_path / "nope.json")])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_explain_prints_a_readable_explanation(runner: CliRunner) -> None:
    result = _run(runner, "explain", str(EXAMPLES / "context.json"), "--policies", POLICIES)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("selected: matched-policy")
    assert "acme-widgets-implementer (rung 3: repo + role, priority 50)" in out
    assert "account anthropic-backup, binding anthropic, model claude-opus-4-1" in out
    assert "~ global-default" in out and "outranked" in out
    assert "x zai-main: not-in-pool" in out


def test_explain_json_is_the_full_decision(runner: CliRunner) -> None:
    result = _run(
        runner, "explain", str(EXAMPLES / "context.json"), "--policies", POLICIES, "--json"
    )
    doc = json.loads(result.stdout)
    assert doc["policy_id"] == "acme-widgets-implementer"
    assert doc["precedence_level"] == 3 and doc["precedence_priority"] == 50
    assert doc["decision_id"].startswith("sha256:")
    assert len(doc["explanation"]["considered"]) == 7


def test_explain_takes_inline_json_and_stdin(runner: CliRunner) -> None:
    ctx = json.dumps(
        {"repo": "me/notes", "repo_class": "personal", "legacy_route": {"provider_binding": "zai"}}
    )
    inline = _run(runner, "explain", ctx, "--policies", POLICIES, "--json")
    stdin = _run(runner, "explain", "-", "--policies", POLICIES, "--json", input=ctx)
    assert json.loads(inline.stdout) == json.loads(stdin.stdout)
    # global-default matches; with no accounts offered, nothing is eligible.
    assert json.loads(inline.stdout)["reason"] == "no-eligible-account"


def test_explain_a_corrupt_policy_file_holds(runner: CliRunner, tmp_path: Path) -> None:
    doc = json.loads(Path(POLICIES).read_text())
    doc["content_hash"] = "sha256:" + "0" * 64
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(doc))
    result = _run(
        runner, "explain", str(EXAMPLES / "context.json"), "--policies", str(path), "--json"
    )
    decision = json.loads(result.stdout)
    assert (decision["outcome"], decision["reason"], decision["snapshot_state"]) == (
        "held",
        "snapshot-unavailable",
        "corrupt",
    )


def test_explain_batch_prints_one_decision_per_line(runner: CliRunner) -> None:
    result = _run(runner, "explain-batch", str(EXAMPLES / "contexts.jsonl"), "--policies", POLICIES)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    decisions = [json.loads(line) for line in lines]
    assert {d["snapshot_hash"] for d in decisions} == {decisions[0]["snapshot_hash"]}
    assert [d["reason"] for d in decisions][:3] == [
        "matched-policy",
        "matched-policy",
        "matched-policy",
    ]


def test_explain_batch_refuses_a_bad_line_before_printing_anything(
    runner: CliRunner, tmp_path: Path
) -> None:
    lines = (EXAMPLES / "contexts.jsonl").read_text().splitlines()
    lines.insert(2, '{"repo": "a/b", "request_face": "telepathic"}')
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(lines))
    result = runner.invoke(cli, ["explain-batch", str(path), "--policies", POLICIES])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"{path}:3: request_face" in result.stderr


def test_usage_errors_exit_2(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["explain"]).exit_code == 2
    assert runner.invoke(cli, ["explain", "x", "--trace", "loud"]).exit_code == 2


def test_help_and_version(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["-h"]).exit_code == 0
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and "rensei" in version.output


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('[{"id": "a", "priority": ' + "9" * 5000 + "}]", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('[{"id": "a", "id": "b"}]', "duplicate key 'id'"),
        ('"just a string"', "expected an object, got str"),
    ],
    ids=["huge-integer", "deep-nesting", "duplicate-key", "wrong-top-level"],
)
def test_hostile_json_is_one_line_everywhere(
    runner: CliRunner, tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "hostile.json"
    path.write_text(content)
    line = tmp_path / "hostile.jsonl"
    line.write_text(content + "\n")
    for args, stdin in (
        (["policy", "validate", str(path)], None),
        (["policy", "validate", "-"], content),
    ):  # validate lists the problem on stdout, says how many on stderr
        result = runner.invoke(cli, args, input=stdin)
        assert result.exit_code == 1, (args, result.output)
        assert needle in result.stdout and len(result.stdout.splitlines()) == 1
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    for args, stdin in (
        (["explain", str(path), "--policies", POLICIES], None),
        (["explain", "-", "--policies", POLICIES], content),
        (["explain", "{}", "--policies", str(path)], None),
        (["explain-batch", str(line), "--policies", POLICIES], None),
    ):
        result = runner.invoke(cli, args, input=stdin)
        assert result.exit_code == 1, (args, result.output)
        assert result.stdout == ""
        assert "Traceback" not in result.stderr
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert needle in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_with_a_wrong_declared_hash_is_neither_valid_nor_saved(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"policies": [{"id": "a"}], "content_hash": "sha256:00"}))
    result = runner.invoke(cli, ["policy", "validate", str(path)])
    assert result.exit_code == 1 and "does not match its policies" in result.stdout
    assert result.stdout.startswith("content-hash-mismatch\t")
    home = ["--home", str(tmp_path / "h")]
    assert runner.invoke(cli, ["init", *home]).exit_code == 0
    saved = runner.invoke(cli, ["policy", "save", str(path), *home])
    assert saved.exit_code == 1 and "does not match" in saved.stderr
    shown = runner.invoke(cli, ["policy", "show", "--json", *home])
    assert json.loads(shown.stdout)["state"] == "absent"


def test_explain_warns_about_an_invalid_policy_file(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "dupes.json"
    path.write_text(json.dumps([{"id": "a"}, {"id": "a"}]))
    result = runner.invoke(cli, ["explain", "{}", "--policies", str(path), "--json"])
    assert result.exit_code == 0
    assert "1 validation issue(s)" in result.stderr
    json.loads(result.stdout)  # stdout stays data


def test_record_appends_every_decision_to_a_verifying_chain(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = ["--home", str(tmp_path / "h")]
    runner.invoke(cli, ["init", *home])
    runner.invoke(cli, ["policy", "save", POLICIES, *home])
    batch = runner.invoke(
        cli, ["explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record", *home]
    )
    single = runner.invoke(cli, ["explain", str(EXAMPLES / "context.json"), "--record", *home])
    assert batch.exit_code == single.exit_code == 0
    tail = runner.invoke(cli, ["audit", "tail", "-n", "10", "--json", *home])
    records = json.loads(tail.stdout)
    assert len(records) == 8  # the policy save's mutation record, then 6 + 1 decisions
    assert records[0]["payload"]["record_type"] == "policy-mutation"
    decision_ids = [json.loads(line)["decision_id"] for line in batch.stdout.splitlines()]
    assert [r["payload"]["decision_id"] for r in records[1:7]] == decision_ids
    assert runner.invoke(cli, ["audit", "verify", *home]).exit_code == 0
    # A bad batch records nothing.
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"repo": "a/b"}\n{"request_face": "telepathic"}\n')
    refused = runner.invoke(cli, ["explain-batch", str(bad), "--record", *home])
    assert refused.exit_code == 1
    again = runner.invoke(cli, ["audit", "tail", "-n", "20", "--json", *home])
    assert len(json.loads(again.stdout)) == 8


def _commands(group, prefix=()):
    import click

    from rensei_routing.cli._root import load_all_builtins

    load_all_builtins()  # built-in commands load lazily

    for name, command in sorted(group.commands.items()):
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


@pytest.mark.parametrize(
    "path", [p for p, _ in _commands(cli)], ids=[" ".join(p) for p, _ in _commands(cli)]
)
def test_every_command_has_help(runner: CliRunner, path: tuple[str, ...]) -> None:
    result = runner.invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    assert "Usage: " in result.output
    command = dict(_commands(cli))[path]
    assert command.help and command.help.strip(), f"rensei {' '.join(path)} has no help text"


def test_record_on_an_uninitialised_home_refuses_before_resolving(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = ["--home", str(tmp_path / "nowhere")]
    for args in (
        ["explain", str(EXAMPLES / "context.json"), "--record", *home],
        ["explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record", *home],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert "rensei init" in result.stderr and "no store" not in result.stderr


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_the_snapshot_leaves_the_collector_as_it_was(
    runner: CliRunner, tmp_path: Path, enabled: bool
) -> None:
    # The CLI pauses CPython's collector while it reads a revision (an edge may; the library
    # never does) and must leave it as it found it, also when the load fails.
    import gc

    from rensei_routing.cli._store import collector_paused

    home = str(tmp_path / "h")
    assert _run(runner, "init", "--home", home).exit_code == 0
    assert _run(runner, "policy", "save", POLICIES, "--home", home).exit_code == 0
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collector_paused():
            raise RuntimeError("a failed load")
        assert gc.isenabled() is enabled
        out = _run(runner, "explain", str(EXAMPLES / "context.json"), "--home", home)
        assert out.exit_code == 0 and out.stdout.startswith("selected: matched-policy")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
