"""One rule for the two streams (issue 22, edge 9; docs/commands.md, "Stdout is for results"):
results on stdout, progress, notes, warnings and the confirmation of a change on stderr. Every
command that confirms a change prints nothing on stdout in text form and its confirmation on
stderr; with ``--json`` (where it has one) stdout is one JSON document and the confirmation is
not printed. Commands that show something print it on stdout."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.cli._root import load_all_builtins

from . import hydraflow_ref as ref

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _ok(*args: str) -> Result:
    done = _run(*args)
    assert done.exit_code == 0, (args, done.output)
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with policies, org data, a compiled and exported snapshot, a synced host cache,
    a claim's receipt and a backup; each test works on its own copy."""
    root = tmp_path_factory.mktemp("streams")
    home = str(root / "home")
    _ok("init", "--home", home)
    _ok("policy", "save", str(EXAMPLES / "policies.json"), "--home", home)
    _ok("org", "load", str(EXAMPLES / "org.json"), "--home", home)
    _ok("snapshot", "compile", "--home", home)
    _ok("snapshot", "export", str(root / "snapshot.json"), "--home", home)
    _ok("host", "trust", str(Path(home, "keys", "host.pub")), "--home", home)
    _ok("host", "sync", "--from", str(root / "snapshot.json"), "--home", home)
    receipt = str(root / "receipt.json")
    _ok("host", "claim", "--pool", "local-a", "--receipt", receipt, "--home", home)
    started = json.loads(
        _ok("host", "session", "start", "--receipt", receipt, "--home", home, "--json").stdout
    )
    (root / "session-id").write_text(started["sessionId"])
    fresh = str(root / "receipt-2.json")
    _ok("host", "claim", "--pool", "local-a", "--receipt", fresh, "--home", home)
    _ok("backup", str(root / "backup"), "--home", home)
    (root / "hydraflow-policies.json").write_text(ref.policy_store(ref.SAMPLE_POLICIES))
    ref.write_chain(root / "chain.jsonl", ref.chain_lines([{"n": i} for i in range(3)]))
    return root


#: name -> (argv given the copy's root, a word of the confirmation). ``{home}`` is the home.
Case = Callable[[Path], list[str]]
CONFIRMATIONS: dict[str, tuple[Case, str]] = {
    "init": (lambda r: ["init", "--home", str(r / "new-home")], "initialised"),
    "policy save": (lambda r: ["policy", "save", str(EXAMPLES / "policies.json")], "saved"),
    "policy import": (
        lambda r: ["policy", "import", str(r / "hydraflow-policies.json"), "--format", "hydraflow"],
        "saved revision",
    ),
    "policy rollback": (lambda r: ["policy", "rollback", "--to", "1"], "rolled back"),
    "org load": (lambda r: ["org", "load", str(EXAMPLES / "org.json")], "org data"),
    "snapshot compile": (lambda r: ["snapshot", "compile"], "compiled"),
    "snapshot export": (lambda r: ["snapshot", "export", str(r / "again.json")], "exported"),
    "audit import": (
        lambda r: ["audit", "import", str(r / "chain.jsonl"), "--format", "hydraflow"],
        "imported",
    ),
    "audit checkpoint": (lambda r: ["audit", "checkpoint", "-o", str(r / "cp.txt")], "written"),
    "backup": (lambda r: ["backup", str(r / "backup-2")], "backed up"),
    "restore": (
        lambda r: ["restore", str(r / "backup"), "--home", str(r / "restored")],
        "restored",
    ),
    "host trust": (lambda r: ["host", "trust", str(r / "home" / "keys" / "host.pub")], "trusted"),
    "host sync": (lambda r: ["host", "sync", "--from", str(r / "snapshot.json")], "unchanged"),
    "host session end": (
        lambda r: ["host", "session", "end", "SESSION_ID"],
        "ended",
    ),
    "shadow disable": (lambda r: ["shadow", "disable"], "shadow recording: off"),
    "shadow enable": (lambda r: ["shadow", "enable"], "shadow recording: on"),
}


def _command(argv: list[str]) -> click.Command:
    load_all_builtins()
    command: click.Command = cli
    for word in argv:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
    return command


def _copy(built: Path, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(built, root, symlinks=True)
    return root


def _with_home(root: Path, argv: list[str]) -> list[str]:
    """``argv`` on the copy's home, ``SESSION_ID`` replaced by the session the fixture started."""
    argv = [(root / "session-id").read_text() if a == "SESSION_ID" else a for a in argv]
    return argv if "--home" in argv else [*argv, "--home", str(root / "home")]


@pytest.mark.parametrize("name", sorted(CONFIRMATIONS))
def test_a_confirmation_goes_to_stderr_and_stdout_stays_empty(
    name: str, built: Path, tmp_path: Path
) -> None:
    root = _copy(built, tmp_path)
    argv, word = CONFIRMATIONS[name]
    done = _run(*_with_home(root, argv(root)))
    assert done.exit_code == 0, done.output
    assert done.stdout == ""
    assert word in done.stderr and done.stderr.endswith("\n")


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, (argv, _) in CONFIRMATIONS.items()
        if any(
            "--json" in p.opts
            for p in _command(argv(Path("/x"))).params
            if isinstance(p, click.Option)
        )
    ),
)
def test_with_json_stdout_is_one_document_and_nothing_is_confirmed(
    name: str, built: Path, tmp_path: Path
) -> None:
    root = _copy(built, tmp_path)
    argv, word = CONFIRMATIONS[name]
    done = _run(*_with_home(root, [*argv(root), "--json"]))
    assert done.exit_code == 0, done.output
    json.loads(done.stdout)
    assert word not in done.stderr


def test_session_start_prints_its_id_on_stdout_and_confirms_on_stderr(
    built: Path, tmp_path: Path
) -> None:
    # the session id is the result (issue 29, new user 9: it was on stderr alone), so
    # `id=$(rensei host session start ...)` works; the confirmation stays on stderr
    root = _copy(built, tmp_path)
    argv = ["host", "session", "start", "--receipt", str(root / "receipt-2.json")]
    done = _run(*_with_home(root, argv))
    assert done.exit_code == 0, done.output
    session_id = done.stdout.strip()
    assert done.stdout == session_id + "\n" and session_id.startswith("sess_")
    assert f"{session_id} started under" in done.stderr
    listed = _run(*_with_home(root, ["host", "session", "list", "--json"])).stdout
    assert session_id in {s["sessionId"] for s in json.loads(listed)}
    other = _copy(built, tmp_path / "json")  # --json: one document, no confirmation
    argv = ["host", "session", "start", "--receipt", str(other / "receipt-2.json"), "--json"]
    done = _run(*_with_home(other, argv))
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["sessionId"].startswith("sess_")
    assert "started under" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["policy", "show"],
        ["policy", "history"],
        ["org", "show"],
        ["snapshot", "show"],
        ["host", "status"],
        ["audit", "verify"],
        ["shadow", "status"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_result_goes_to_stdout(argv: list[str], built: Path, tmp_path: Path) -> None:
    root = _copy(built, tmp_path)
    done = _run(*_with_home(root, argv))
    assert done.exit_code == 0, done.output
    assert done.stdout.strip()
