"""``rensei org ...``, ``rensei snapshot ...`` and ``rensei host ...`` from the command line:
every refusal is one stderr line, a non-zero exit, and no row or file written."""

from __future__ import annotations

import json
import re
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.snapshot.validators import SnapshotValidator
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import get_plugin_manager
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def _fails_cleanly(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _rows(home: Path, table: str) -> int:
    with closing(Home(home).connect()) as conn:
        value = conn.execute(f"SELECT count(*) FROM {table}").get
    assert isinstance(value, int)
    return value


@pytest.fixture
def home(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "c"
    assert _run(runner, "init", "--home", str(path), "--org", "org_a1b2c3").exit_code == 0
    assert (
        _run(
            runner, "policy", "save", str(EXAMPLES / "policies.json"), "--home", str(path)
        ).exit_code
        == 0
    )
    assert (
        _run(runner, "org", "load", str(EXAMPLES / "org.json"), "--home", str(path)).exit_code == 0
    )
    return path


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"poolHostInventory": {"pools": [{"id": "p"}]}}, "poolHostInventory.pools[0].status"),
        (
            {"capacityProfiles": {"profiles": [{"id": "bad id", "pools": []}]}},
            "capacityProfiles.profiles[0].id",
        ),
        (
            {
                "poolHostInventory": {
                    "pools": [{"id": "p", "status": "active"}, {"id": "p", "status": "active"}]
                }
            },
            "poolHostInventory.pools[1]",
        ),
        (
            {"posteriorSummary": {"arms": [{"arm": "a", "alpha": 0, "beta": 1}]}},
            "posteriorSummary.arms[0].alpha",
        ),
        ({"extra": {}}, "extra"),
    ],
)
def test_org_load_refuses_malformed_data_naming_the_field(
    home: Path, runner: CliRunner, tmp_path: Path, doc: object, field: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    line = _fails_cleanly(_run(runner, "org", "load", str(bad), "--home", str(home)))
    assert field in line
    assert _rows(home, "org_data") == 1


def test_compile_show_history_export_verify(home: Path, runner: CliRunner, tmp_path: Path) -> None:
    out = _run(runner, "snapshot", "compile", "--home", str(home), "--json")
    assert out.exit_code == 0
    compiled = json.loads(out.stdout)
    assert compiled["rulesetRev"] == "org_a1b2c3@1"
    assert compiled["validators"][0]["name"] == "policy-set-valid"
    again = json.loads(_run(runner, "snapshot", "compile", "--home", str(home), "--json").stdout)
    # two compiles over the same data: same content, next revision
    assert again["contentHash"] == compiled["contentHash"] and again["rulesetRev"].endswith("@2")
    history = json.loads(_run(runner, "snapshot", "history", "--home", str(home), "--json").stdout)
    assert [h["revision"] for h in history] == [1, 2]
    shown = json.loads(
        _run(runner, "snapshot", "show", "--rev", "1", "--home", str(home), "--json").stdout
    )
    assert shown["rulesetRev"] == "org_a1b2c3@1"
    target = tmp_path / "snap.json"
    assert _run(runner, "snapshot", "export", str(target), "--home", str(home)).exit_code == 0
    ok = _run(
        runner,
        "snapshot",
        "verify",
        str(target),
        "--trust",
        str(home / "keys" / "host.pub"),
        "--json",
    )
    assert ok.exit_code == 0 and json.loads(ok.stdout)["rulesetRev"] == "org_a1b2c3@2"
    # tampered copy: refused, saying why
    doc = json.loads(target.read_text())
    doc["sections"]["poolHostInventory"]["pools"][0]["status"] = "active"
    doc["sections"]["poolHostInventory"]["pools"].append({"id": "evil", "status": "active"})
    target.write_text(json.dumps(doc))
    line = _fails_cleanly(
        _run(runner, "snapshot", "verify", str(target), "--trust", str(home / "keys" / "host.pub"))
    )
    assert "content-hash" in line


def test_verify_with_the_wrong_key_says_unknown_key(
    home: Path, runner: CliRunner, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    assert _run(runner, "init", "--home", str(other)).exit_code == 0
    assert _run(runner, "snapshot", "compile", "--home", str(home)).exit_code == 0
    target = tmp_path / "s.json"
    assert _run(runner, "snapshot", "export", str(target), "--home", str(home)).exit_code == 0
    line = _fails_cleanly(
        _run(runner, "snapshot", "verify", str(target), "--trust", str(other / "keys" / "host.pub"))
    )
    assert "unknown-key" in line


def test_failing_validator_publishes_nothing(home: Path, runner: CliRunner, tmp_path: Path) -> None:
    dangling = tmp_path / "org.json"
    dangling.write_text(
        json.dumps(
            {
                "capacityProfiles": {
                    "profiles": [{"id": "g", "pools": ["nowhere"]}],
                    "grants": [{"profile": "ghost"}],
                },
            }
        )
    )
    assert _run(runner, "org", "load", str(dangling), "--home", str(home)).exit_code == 0
    line = _fails_cleanly(_run(runner, "snapshot", "compile", "--home", str(home)))
    assert "grants-name-profiles" in line and "profile-pools-exist" in line
    assert _rows(home, "ruleset_snapshots") == 0


def test_export_refuses_the_home_itself(home: Path, runner: CliRunner) -> None:
    assert _run(runner, "snapshot", "compile", "--home", str(home)).exit_code == 0
    before = (home / "rensei.db").read_bytes()
    for target in (home / "rensei.db", home / "keys" / "host.key", home / "rensei.db-wal"):
        line = _fails_cleanly(_run(runner, "snapshot", "export", str(target), "--home", str(home)))
        assert "part of the home" in line
    assert (home / "rensei.db").read_bytes() == before


def test_show_and_export_without_a_snapshot(home: Path, runner: CliRunner, tmp_path: Path) -> None:
    assert "no snapshot has been compiled" in _fails_cleanly(
        _run(runner, "snapshot", "show", "--home", str(home))
    )
    assert not (tmp_path / "x.json").exists()
    _fails_cleanly(
        _run(runner, "snapshot", "export", str(tmp_path / "x.json"), "--home", str(home))
    )
    assert not (tmp_path / "x.json").exists()


def test_host_commands_refuse_cleanly(runner: CliRunner, tmp_path: Path) -> None:
    host = tmp_path / "h"
    assert "no snapshot source configured" in _fails_cleanly(
        _run(runner, "host", "run", "--home", str(host))
    )
    usage = _run(runner, "host", "sync", "--home", str(host))
    assert usage.exit_code == 2 and "exactly one of --from FILE or --endpoint" in usage.stderr
    missing = tmp_path / "missing.json"
    line = _fails_cleanly(_run(runner, "host", "sync", "--from", str(missing), "--home", str(host)))
    assert "cannot read" in line
    assert not host.exists()  # a failed first sync leaves no host state (issue 29, new user 8)
    # once the host has a cache (a trusted key), a failed sync is recorded for `host status`
    from rensei_routing import signing

    good_key = tmp_path / "good.pub"
    good_key.write_text(signing.generate().public_key.to_text() + "\n")
    assert _run(runner, "host", "trust", str(good_key), "--home", str(host)).exit_code == 0
    _fails_cleanly(_run(runner, "host", "sync", "--from", str(missing), "--home", str(host)))
    status = _run(runner, "host", "status", "--home", str(host), "--json")
    last = json.loads(status.stdout)["lastFetch"]
    assert last["ok"] is False
    # the status line: absent when no source is configured
    bare = _run(runner, "host", "status", "--home", str(tmp_path / "none"))
    assert bare.exit_code == 0 and "Ruleset snapshot" not in bare.stdout
    bad_key = tmp_path / "k.pub"
    bad_key.write_text("ed25519:nope\n")
    assert "not 32" in _fails_cleanly(
        _run(runner, "host", "trust", str(bad_key), "--home", str(host))
    )


class _Validators:
    """A plugin with one validator that finds a problem and one that raises."""

    @staticmethod
    @hookimpl
    def register_snapshot_validators(register: Any) -> None:
        def no_draining(sections: Any) -> list[str]:
            pools = sections["poolHostInventory"]["pools"]
            return [f"pool {p['id']} is draining" for p in pools if p["status"] == "draining"]

        def explodes(sections: Any) -> list[str]:
            raise RuntimeError("validator bug")

        register(SnapshotValidator(name="no-draining-pools", check=no_draining))
        register(SnapshotValidator(name="exploding", check=explodes))


def test_plugin_validators_gate_the_compile(home: Path) -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(_Validators(), name="acme-validators")
    result = CliRunner().invoke(
        cli, ["snapshot", "compile", "--home", str(home)], obj=pm, catch_exceptions=False
    )
    line = _fails_cleanly(result)
    # both plugin validators fail: one found a problem, one raised (a raise is a failure)
    assert "no-draining-pools: pool local-old is draining" in line
    assert "exploding: RuntimeError: validator bug" in line
    assert _rows(home, "ruleset_snapshots") == 0
    # without the plugin the same data compiles
    assert _run(CliRunner(), "snapshot", "compile", "--home", str(home)).exit_code == 0


def test_events_print_a_header_then_one_line_per_record(home: Path, runner: CliRunner) -> None:
    assert _run(runner, "snapshot", "compile", "--home", str(home)).exit_code == 0
    out = _run(runner, "snapshot", "events", "--home", str(home))
    assert out.exit_code == 0, out.output
    header, *rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert header == ["seq", "at", "kind", "revision", "content_hash"]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("1", "policy.save", "1"),
        ("2", "org.load", "1"),
        ("3", "snapshot.compile", "1"),
    ]
    assert all(
        len(r) == len(header) and re.fullmatch(r"(sha256:)?[0-9a-f]{64}", r[4]) for r in rows
    )
    later = _run(runner, "snapshot", "events", "--after", "3", "--home", str(home))
    assert later.stdout.splitlines() == ["\t".join(header)]  # nothing after: the header alone
    as_json = json.loads(_run(runner, "snapshot", "events", "--json", "--home", str(home)).stdout)
    assert [e["seq"] for e in as_json] == [1, 2, 3]  # no header in JSON


@pytest.mark.parametrize(
    ("scope", "meaning"),
    [
        ("header", "(scope header: each snapshot must carry headerSignature (its header, revision"),
        ("hash-only", "(scope hash-only: a signature over the content hash alone is accepted)"),
    ],
)
def test_host_trust_says_what_its_scope_means(
    home: Path, runner: CliRunner, tmp_path: Path, scope: str, meaning: str
) -> None:
    host = tmp_path / f"h-{scope}"
    for argv in (
        ["host", "trust", str(home / "keys/host.pub"), "--scope", scope],
        ["host", "trust", "--from-home", str(home), "--scope", scope],
    ):
        done = _run(runner, *argv, "--home", str(host))
        assert done.exit_code == 0, done.output
        (line,) = done.stderr.splitlines()
        assert line.startswith("trusted key ") and meaning in line, line
        assert f"({scope})" not in line  # the bare word said nothing
