"""Issue 19 #21: the envelope's ``validators`` list is not covered by the signature, so a host
never keeps or shows it as authentic.

A snapshot file whose list was rewritten (a forged "approved-by-security" validator, the real
names removed) still verifies (the signed header and the sections are untouched, as
SEMANTICS.md defines them) and is adopted, but what the host holds carries no validator names;
``host status``, ``snapshot verify`` and the sync line never show the forged name. The control
side, reading rows its own compile wrote, still shows its list. Real homes, real files, real
Ed25519, the CLI in process.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.snapshot.envelope import parse_snapshot, verify_snapshot
from rensei_routing.host.cache import host_cache

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
FORGED = "approved-by-security"


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["--no-plugins", *args], catch_exceptions=False)


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def _forged(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A control home, the exported snapshot, and a copy with a forged validators list."""
    control = tmp_path / "control"
    _ok(_run("init", "--home", str(control), "--org", "org_a"))
    _ok(_run("org", "load", str(EXAMPLES / "org.json"), "--home", str(control)))
    _ok(_run("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(control)))
    _ok(_run("snapshot", "compile", "--home", str(control)))
    real = tmp_path / "snap.json"
    _ok(_run("snapshot", "export", str(real), "--home", str(control)))
    doc = json.loads(real.read_bytes())
    assert "policy-set-valid" in doc["validators"]
    doc["validators"] = [FORGED]
    forged = tmp_path / "forged.json"
    forged.write_bytes(canonical_bytes(doc))
    return control, real, forged


def test_a_forged_validators_list_is_neither_kept_nor_shown_by_the_host(tmp_path: Path) -> None:
    control, _, forged = _forged(tmp_path)
    host = tmp_path / "host"
    _ok(_run("init", "--home", str(host), "--org", "org_a"))
    key = control / "keys" / "host.pub"
    _ok(_run("host", "trust", str(key), "--home", str(host)))
    synced = _ok(_run("host", "sync", "--from", str(forged), "--home", str(host)))
    assert FORGED not in synced.output

    cache = host_cache(host)
    held = cache.load()
    assert held is not None and held.ruleset_rev == "org_a@1"
    assert held.validators == ()  # the unsigned list is not kept as the snapshot's
    status = _ok(_run("host", "status", "--json", "--home", str(host)))
    assert FORGED not in status.output
    assert FORGED not in _ok(_run("host", "status", "--home", str(host))).output
    checked = _ok(_run("snapshot", "verify", str(forged), "--trust", str(key), "--json"))
    assert FORGED not in checked.output

    # the library: dropped unless the caller reads its own store's rows
    lookup = signing.key_lookup([signing.load_public_key(key)])
    assert verify_snapshot(forged.read_bytes(), lookup=lookup).validators == ()
    kept = verify_snapshot(forged.read_bytes(), lookup=lookup, keep_validators=True)
    assert kept.validators == (FORGED,)
    assert kept == verify_snapshot(forged.read_bytes(), lookup=lookup)  # not its identity


def test_the_control_side_still_shows_what_its_own_compile_ran(tmp_path: Path) -> None:
    control, real, _ = _forged(tmp_path)
    shown = _ok(_run("snapshot", "show", "--home", str(control)))
    assert "policy-set-valid" in shown.output and FORGED not in shown.output
    as_json = json.loads(_ok(_run("snapshot", "show", "--json", "--home", str(control))).stdout)
    assert as_json["validators"] == parse_snapshot(real.read_bytes())["validators"]
    assert "policy-set-valid" in as_json["validators"]
    # and the served envelope still carries the field other implementations expect
    assert isinstance(parse_snapshot(real.read_bytes())["validators"], list)
