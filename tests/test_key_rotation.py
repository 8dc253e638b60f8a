"""Key rotation of the control side, end to end, as docs/operations.md documents it (issue 19
#8): a new control home (a new key) for the same org starts after the old home's latest revision
(``rensei init --start-after REV``), so a host that held revision 3 signed by the old key adopts
revision 4 signed by the new one once it trusts the new key, and keeps working after the old key
is removed. Without ``--start-after`` the new home's revision 1 is refused as a rollback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
ORG = "acme"


def _run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def _ok(runner: CliRunner, *args: str) -> Result:
    done = _run(runner, *args)
    assert done.exit_code == 0, (args, done.output)
    return done


def _control(runner: CliRunner, home: Path, *init: str) -> None:
    _ok(runner, "init", "--org", ORG, *init, "--home", str(home))
    _ok(runner, "org", "load", str(EXAMPLES / "org.json"), "--home", str(home))
    _ok(runner, "policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home))


def _export(runner: CliRunner, home: Path, out: Path) -> Path:
    _ok(runner, "snapshot", "export", str(out), "--home", str(home))
    return out


def _held(runner: CliRunner, host: Path) -> dict[str, object]:
    doc = json.loads(_ok(runner, "host", "status", "--json", "--home", str(host)).stdout)
    snapshot = doc["snapshot"]
    assert isinstance(snapshot, dict)
    return snapshot


@pytest.fixture
def held_rev3(tmp_path: Path, runner: CliRunner) -> tuple[Path, Path]:
    """The old control home at revision 3 and a host holding acme@3 signed by its key."""
    old, host = tmp_path / "old", tmp_path / "host"
    _control(runner, old)
    _ok(runner, "init", "--home", str(host))  # a host is a home too (claims are recorded)
    for _ in range(3):
        _ok(runner, "snapshot", "compile", "--home", str(old))
    _ok(runner, "host", "trust", str(old / "keys" / "host.pub"), "--home", str(host))
    rev3 = _export(runner, old, tmp_path / "rev3.json")
    _ok(runner, "host", "sync", "--from", str(rev3), "--home", str(host))
    assert _held(runner, host)["rulesetRev"] == f"{ORG}@3"
    return old, host


def test_a_new_key_takes_over_above_the_held_revision(
    held_rev3: tuple[Path, Path], tmp_path: Path, runner: CliRunner
) -> None:
    old, host = held_rev3
    new = tmp_path / "new"
    _control(runner, new, "--start-after", "3")  # the old home's latest revision
    compiled = json.loads(_ok(runner, "snapshot", "compile", "--json", "--home", str(new)).stdout)
    assert compiled["rulesetRev"] == f"{ORG}@4"
    rev4 = _export(runner, new, tmp_path / "rev4.json")
    # 1. trust the new key on the host (beside the old one)
    _ok(runner, "host", "trust", str(new / "keys" / "host.pub"), "--home", str(host))
    # 2. the host adopts the new home's first snapshot: newer than the one it held
    _ok(runner, "host", "sync", "--from", str(rev4), "--home", str(host))
    held = _held(runner, host)
    assert held["rulesetRev"] == f"{ORG}@4"
    # 3. remove the old key from the host: it keeps the new home's snapshots and claims work
    old_id = json.loads(_ok(runner, "init", "--json", "--home", str(old)).stdout)["key_id"]
    (host / "host" / "trusted" / f"{old_id}.pub").unlink()
    _ok(runner, "snapshot", "compile", "--home", str(new))
    rev5 = _export(runner, new, tmp_path / "rev5.json")
    _ok(runner, "host", "sync", "--from", str(rev5), "--home", str(host))
    assert _held(runner, host)["rulesetRev"] == f"{ORG}@5"
    claim = _run(runner, "host", "claim", "--pool", "local-a", "--home", str(host))
    assert claim.exit_code == 0, claim.output
    new_id = json.loads(_ok(runner, "init", "--json", "--home", str(new)).stdout)["key_id"]
    assert [p.name for p in (host / "host" / "trusted").iterdir()] == [f"{new_id}.pub"]


def test_without_start_after_the_new_home_is_refused_as_a_rollback(
    held_rev3: tuple[Path, Path], tmp_path: Path, runner: CliRunner
) -> None:
    _, host = held_rev3
    new = tmp_path / "new"
    _control(runner, new)
    _ok(runner, "snapshot", "compile", "--home", str(new))
    rev1 = _export(runner, new, tmp_path / "rev1.json")
    _ok(runner, "host", "trust", str(new / "keys" / "host.pub"), "--home", str(host))
    before = (host / "host" / "snapshot.json").read_bytes()
    refused = _run(runner, "host", "sync", "--from", str(rev1), "--home", str(host))
    assert refused.exit_code != 0 and "refusing acme@1: older than the" in refused.stderr
    assert (host / "host" / "snapshot.json").read_bytes() == before


def test_start_after_applies_before_the_first_compile(tmp_path: Path, runner: CliRunner) -> None:
    home = tmp_path / "c"
    _control(runner, home)
    _ok(runner, "snapshot", "compile", "--home", str(home))
    _ok(runner, "init", "--start-after", "1", "--home", str(home))  # already there: nothing to do
    late = _run(runner, "init", "--start-after", "7", "--home", str(home))
    assert late.exit_code == 1 and "before its first compile" in late.stderr
    assert late.stderr.count("\n") == 1
    compiled = json.loads(_ok(runner, "snapshot", "compile", "--json", "--home", str(home)).stdout)
    assert compiled["rulesetRev"] == f"{ORG}@2"  # the refused option changed nothing
