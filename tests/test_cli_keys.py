"""``rensei keys show`` (where a home's public key and serve token are, never their secrets) and
``rensei host trust --from-home DIR`` (a control home's key, under the key id its snapshots
carry), which let a command line find a home's files without naming them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_keys_show_prints_paths_and_the_public_key_only(tmp_path: Path, runner: CliRunner) -> None:
    home = tmp_path / "some home"
    _ok(runner, "--home", str(home), "init", "--org", "acme")
    doc = json.loads(_ok(runner, "--home", str(home), "keys", "show", "--json"))
    assert doc["home"] == str(home.resolve()) and doc["org"] == "acme"
    assert doc["publicKeyFile"] == str((home / "keys" / "host.pub").resolve())
    assert doc["serveTokenFile"] == str((home / "keys" / "serve.token").resolve())
    assert doc["publicKey"] == (home / "keys" / "host.pub").read_text().strip()
    assert doc["serveTokenPresent"] is True and doc["snapshotKeyId"] == doc["keyId"]
    text = _ok(runner, "--home", str(home), "keys", "show")
    secret = (home / "keys" / "serve.token").read_text().strip()
    private = (home / "keys" / "host.key").read_bytes()
    for out in (text, json.dumps(doc)):
        assert secret not in out and private.decode("latin-1").strip() not in out
    for which, expected in (
        ("home", home),
        ("public", home / "keys" / "host.pub"),
        ("token", home / "keys" / "serve.token"),
    ):
        shown = _ok(runner, "--home", str(home), "keys", "show", "--path", which)
        assert shown == f"{expected.resolve()}\n"


def test_keys_show_on_no_home_is_one_line(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--home", str(tmp_path / "none"), "keys", "show"])
    assert result.exit_code == 1 and "rensei init" in result.stderr
    assert not (tmp_path / "none").exists()


def test_trust_from_home_uses_the_key_id_its_snapshots_carry(
    tmp_path: Path, runner: CliRunner
) -> None:
    ctl = tmp_path / "control"
    _ok(runner, "--home", str(ctl), "init", "--org", "acme", "--key-id", "platform:key-7")
    _ok(runner, "--home", str(ctl), "org", "load", str(EXAMPLES / "org.json"))
    _ok(runner, "--home", str(ctl), "policy", "save", str(EXAMPLES / "policies.json"))
    _ok(runner, "--home", str(ctl), "snapshot", "compile")
    exported = tmp_path / "snap.json"
    _ok(runner, "--home", str(ctl), "snapshot", "export", str(exported))
    host = tmp_path / "host"
    trusted = runner.invoke(cli, ["--home", str(host), "host", "trust", "--from-home", str(ctl)])
    assert trusted.exit_code == 0 and "platform:key-7" in trusted.stderr
    assert [p.name for p in (host / "host" / "trusted").iterdir()] == ["platform:key-7.trust.json"]
    synced = runner.invoke(cli, ["--home", str(host), "host", "sync", "--from", str(exported)])
    assert synced.exit_code == 0, synced.output  # the key file alone would not verify it
    other = tmp_path / "other"
    by_file = runner.invoke(
        cli, ["--home", str(other), "host", "trust", str(ctl / "keys" / "host.pub")]
    )
    assert by_file.exit_code == 0
    refused = runner.invoke(cli, ["--home", str(other), "host", "sync", "--from", str(exported)])
    assert refused.exit_code == 1


def test_trust_from_home_refuses_what_is_not_a_control_home(
    tmp_path: Path, runner: CliRunner
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    host = tmp_path / "host"
    result = runner.invoke(cli, ["--home", str(host), "host", "trust", "--from-home", str(empty)])
    assert result.exit_code == 1 and "rensei init" in result.stderr
    assert not (host / "host" / "trusted").exists()
    both = runner.invoke(
        cli, ["--home", str(host), "host", "trust", "k.pub", "--from-home", str(empty)]
    )
    assert both.exit_code == 1 and "exactly one of" in both.stderr
