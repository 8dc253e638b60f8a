"""The plugin as installed, through the real ``rensei`` console script and real processes: the
README walkthrough (a claim a Cedar ``forbid`` covers is refused naming the policy, a granted
one admitted, both in the audit log with the verdict), the validator refusing a bad bundle at
compile and as the endpoint's 503, and ``--no-plugins`` keeping it out."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

RENSEI = Path(sys.executable).with_name("rensei")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "org.json"
POLICIES = Path(__file__).resolve().parents[3] / "rensei_routing" / "examples" / "policies.json"


def _rensei(*args: str, home: Path, load: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RENSEI_ROUTING_LOAD_PLUGINS",)}
    env["RENSEI_HOME"] = str(home)
    if load is not None:
        env["RENSEI_ROUTING_LOAD_PLUGINS"] = load
    exe = str(RENSEI) if RENSEI.exists() else shutil.which("rensei")
    assert exe, "the rensei console script is not installed"
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, env=env, check=False, timeout=60
    )


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def _control(tmp_path: Path, org: Path = EXAMPLE) -> Path:
    home = tmp_path / "control"
    _ok(_rensei("init", "--org", "org_a1b2c3", home=home))
    _ok(_rensei("org", "load", str(org), home=home))
    _ok(_rensei("policy", "save", str(POLICIES), home=home))
    return home


def _audit(home: Path) -> list[dict[str, Any]]:
    tail = json.loads(_ok(_rensei("audit", "tail", "-n", "100", "--json", home=home)).stdout)
    return [r["payload"] for r in tail]


def test_plugins_list_and_check() -> None:
    done = _ok(_rensei("plugins", "list", "--json", home=Path("/nonexistent"), load="cedar"))
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["cedar"]["distribution"] == "rensei-authz-cedar"
    assert rows["cedar"]["hooks"] == ["register_authorizers", "register_snapshot_validators"]
    check = _rensei("plugins", "check", "cedar", home=Path("/nonexistent"), load="")
    assert (check.returncode, check.stdout) == (0, "ok: plugin 'cedar'\n"), check.stderr


def test_the_walkthrough(tmp_path: Path) -> None:
    control = _control(tmp_path)
    compiled = _ok(_rensei("snapshot", "compile", "--json", home=control))
    names = [v["name"] for v in json.loads(compiled.stdout)["validators"]]
    assert "cedar-policies" in names
    snap = tmp_path / "snap.json"
    _ok(_rensei("snapshot", "export", str(snap), home=control))
    host = tmp_path / "host"
    _ok(_rensei("init", home=host))
    _ok(_rensei("host", "trust", str(control / "keys" / "host.pub"), home=host))
    _ok(_rensei("host", "sync", "--from", str(snap), home=host))

    refused = _rensei("host", "claim", "--pool", "docker-b", "--project", "acme-evals", home=host)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "Error: claim refused: not authorized: forbid by cedar (policies: evals-off-docker)"
    ]
    admitted = _ok(
        _rensei("host", "claim", "--pool", "local-a", "--project", "acme-evals", home=host)
    )
    assert admitted.stdout.startswith("admitted: pool local-a (granted) against org_a1b2c3@1")
    assert "policies: granted-pools" in admitted.stdout

    explained = _ok(
        _rensei(
            "authorize",
            "--principal",
            'Project::"acme-web"',
            "--action",
            "claim",
            "--resource",
            'Pool::"local-a"',
            "--json",
            home=host,
        )
    )
    assert json.loads(explained.stdout)["policyIds"] == ["granted-pools"]

    claims = [(p["pool_id"], p["admitted"], p["reason"]) for p in _audit(host) if "pool_id" in p]
    assert claims == [("docker-b", False, "forbid"), ("local-a", True, "granted")]
    verdicts = [p["authorization"] for p in _audit(host) if "pool_id" in p]
    assert verdicts[0]["policyIds"] == ["evals-off-docker"] and verdicts[0]["authorizer"] == "cedar"
    assert verdicts[1]["reason"] == "permit"
    _ok(_rensei("audit", "verify", home=host))

    # without the plugin, declared Cedar policies cannot be evaluated: denied, never widened
    bare = _rensei(
        "host", "claim", "--pool", "local-a", "--project", "acme-evals", home=host, load=""
    )
    assert bare.returncode == 1 and "no-authorizer" in bare.stderr


def _bad_org(tmp_path: Path) -> Path:
    doc = json.loads(EXAMPLE.read_text())
    doc["authorization"]["cedarPolicies"]["typo"] = (
        'permit(principal, action, resource) when { resource.stauts == "active" };'
    )
    path = tmp_path / "bad-org.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_bundle_off_its_schema_is_never_published(tmp_path: Path) -> None:
    control = _control(tmp_path, _bad_org(tmp_path))
    done = _rensei("snapshot", "compile", home=control)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "cedar-policies: policy 'typo' does not validate against the schema" in line
    history = json.loads(_ok(_rensei("snapshot", "history", "--json", home=control)).stdout)
    assert history == []
    # the same org compiles without the plugin (nothing checks Cedar there) ...
    _ok(_rensei("snapshot", "compile", home=control, load=""))


@pytest.mark.slow
def test_the_endpoint_answers_503_naming_the_validator(tmp_path: Path) -> None:
    control = _control(tmp_path, _bad_org(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_ROUTING_LOAD_PLUGINS"}
    env["RENSEI_HOME"] = str(control)
    exe = str(RENSEI) if RENSEI.exists() else shutil.which("rensei")
    assert exe
    proc = subprocess.Popen(
        [exe, "serve", "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", proc.stderr.readline())
        assert found
        token = (control / "keys" / "serve.token").read_text().strip()
        request = urllib.request.Request(
            f"http://127.0.0.1:{found.group(1)}/api/daemon/ruleset-snapshot",
            headers={"Authorization": f"Bearer {token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=30)
        body = e.value.read().decode()
        assert e.value.code == 503 and "cedar-policies" in body and "typo" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        assert proc.stderr is not None
        proc.stderr.close()
