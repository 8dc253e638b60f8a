"""``rensei authorize`` and ``rensei host claim`` through the authorizers, from the command line,
against a real compiled, signed, synced snapshot, with a sample authorizer plugin: a deny
from either the grant check or the plugin refuses (one stderr line, exit 1), every decision is
in the audit log with its verdict, and a refusal of bad input writes nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.snapshot.authz import AuthorizationRequest, Authorizer, Decide
from rensei_routing.core.snapshot.postures import PolicyVerdict
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import RenseiPluginManager, get_plugin_manager, register_plugin
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


class NoDocker:
    """Forbids every request on pool docker-b (policy ``no-docker``), permits the rest; it
    stands in for the Cedar evaluator (it claims the ``cedar`` policy kind)."""

    @staticmethod
    def prepare(sections: Mapping[str, Any]) -> Decide:
        def decide(requests: Sequence[AuthorizationRequest]) -> list[PolicyVerdict]:
            return [
                PolicyVerdict(effect=False, policy_ids=("no-docker",))
                if r.resource.id == "docker-b"
                else PolicyVerdict(effect=True, policy_ids=("rest",))
                for r in requests
            ]

        return decide

    @hookimpl
    def register_authorizers(self, register: Any) -> None:
        register(Authorizer(name="no-docker", prepare=self.prepare, kinds=("cedar",)))


def _pm(with_plugin: bool) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    if with_plugin:
        register_plugin(pm, NoDocker(), "nodocker")
    return pm


def _run(*args: str, plugin: bool = True, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), obj=_pm(plugin), env=env, catch_exceptions=False)


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def host(tmp_path: Path) -> Path:
    control, host = tmp_path / "control", tmp_path / "host"
    org = json.loads((EXAMPLES / "org.json").read_text())
    org["authorization"] = {"cedarPolicies": {}, "defaultPermit": False}
    (tmp_path / "org.json").write_text(json.dumps(org))
    _ok(_run("init", "--home", str(control), "--org", "org_a"))
    _ok(_run("org", "load", str(tmp_path / "org.json"), "--home", str(control)))
    _ok(_run("snapshot", "compile", "--home", str(control)))
    _ok(_run("snapshot", "export", str(tmp_path / "snap.json"), "--home", str(control)))
    _ok(_run("init", "--home", str(host), "--org", "org_a"))
    _ok(_run("host", "trust", str(control / "keys" / "host.pub"), "--home", str(host)))
    _ok(_run("host", "sync", "--from", str(tmp_path / "snap.json"), "--home", str(host)))
    return host


def _records(home: Path) -> list[dict[str, Any]]:
    with AuditLog.open(Home(home)) as log:
        return [r.payload for r in log.records()]


def _one_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    # the rehearsal clock announces itself; the refusal is the one other line
    lines = [x for x in result.stderr.strip().splitlines() if "rehearsal clock" not in x]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_claim_refused_by_the_plugin_names_its_policy(host: Path) -> None:
    refused = _run("host", "claim", "--pool", "docker-b", "--project", "p", "--home", str(host))
    line = _one_line(refused)
    assert line == "Error: claim refused: not authorized: forbid by no-docker (policies: no-docker)"
    admitted = _ok(_run("host", "claim", "--pool", "local-a", "--home", str(host), "--json"))
    payload = json.loads(admitted.stdout)
    assert (payload["admitted"], payload["reason"]) == (True, "granted")
    records = _records(host)
    assert [(r["pool_id"], r["admitted"], r["reason"]) for r in records] == [
        ("docker-b", False, "forbid"),
        ("local-a", True, "granted"),
    ]
    verdict = records[0]["authorization"]
    assert (verdict["allowed"], verdict["authorizer"], verdict["policyIds"]) == (
        False,
        "no-docker",
        ["no-docker"],
    )
    assert verdict["principal"] == 'Project::"p"'
    assert records[1]["authorization"]["principal"] == 'Project::"*"'
    assert records[1]["rulesetRev"] == "org_a@1"


def test_without_the_plugin_declared_policies_deny_and_plain_orgs_are_unchanged(
    host: Path,
) -> None:
    line = _one_line(_run("host", "claim", "--pool", "local-a", "--home", str(host), plugin=False))
    assert "no-authorizer" in line
    assert _records(host)[-1]["reason"] == "no-authorizer"


def test_authorize_explains_and_records(host: Path) -> None:
    allowed = _ok(
        _run(
            "authorize",
            "--principal",
            'Project::"acme-evals"',
            "--action",
            "claim",
            "--resource",
            'Pool::"k8s-gpu"',
            "--context",
            '{"repo": "acme/evals", "role": "implementer"}',
            "--home",
            str(host),
        )
    )
    first = allowed.stdout.splitlines()[0]
    assert first.startswith(
        'allowed: Project::"acme-evals" Action::"claim" Pool::"k8s-gpu" (permit) against org_a@1'
    )
    assert "no-docker      allowed  permit  policies: rest" in allowed.stdout
    denied = _run(
        "authorize",
        "--principal",
        'Project::"x"',
        "--action",
        "spawn",
        "--resource",
        'Pool::"docker-b"',
        "--home",
        str(host),
        "--json",
    )
    assert _one_line(denied).startswith("Error: not authorized: forbid by no-docker")
    shown = json.loads(denied.stdout)
    (record,) = [r for r in _records(host) if r["record_type"] == "authorization-decision"][1:]
    assert shown == record
    assert (record["reason"], record["policyIds"], record["action"]) == (
        "forbid",
        ["no-docker"],
        'Action::"spawn"',
    )
    before = len(_records(host))
    _ok(
        _run(
            "authorize",
            "--principal",
            'Project::"x"',
            "--action",
            "claim",
            "--resource",
            'Pool::"local-a"',
            "--no-record",
            "--home",
            str(host),
        )
    )
    assert len(_records(host)) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--principal", "acme"), "--principal: 'acme' is not an entity uid"),
        (("--context", '{"degraded": false}'), "context.degraded: is filled in from the snapshot"),
        (("--context", "{nope"), "not valid JSON"),
    ],
    ids=["bad-principal", "forged-field", "bad-json"],
)
def test_bad_input_is_one_line_and_writes_nothing(
    host: Path, args: tuple[str, ...], message: str
) -> None:
    before = _records(host)
    base = {"--principal": 'Project::"p"', "--resource": 'Pool::"local-a"'}
    argv = ["authorize", "--action", "claim", "--home", str(host)]
    given = dict(zip(args[::2], args[1::2], strict=True))
    for k, v in {**base, **given}.items():
        argv += [k, v]
    assert message in _one_line(_run(*argv))
    assert _records(host) == before


def test_expired_and_missing_snapshots_deny(host: Path, tmp_path: Path) -> None:
    args = ("authorize", "--principal", 'Project::"p"', "--action", "claim")
    env = {"RENSEI_REHEARSAL_CLOCK_OFFSET_S": "7200"}
    line = _one_line(_run(*args, "--resource", 'Pool::"local-a"', "--home", str(host), env=env))
    assert "snapshot-expired" in line and "past RefuseAfter" in line
    assert _records(host)[-1]["reason"] == "snapshot-expired"
    empty = tmp_path / "empty"
    _ok(_run("init", "--home", str(empty)))
    line = _one_line(_run(*args, "--resource", 'Pool::"local-a"', "--home", str(empty)))
    assert "snapshot-unavailable" in line


def test_org_show_summarises_the_authorization_section(host: Path, tmp_path: Path) -> None:
    shown = _ok(_run("org", "show", "--home", str(tmp_path / "control"))).stdout
    assert "authorization: 0 Cedar policy(ies), schema none, default-permit off" in shown
    doc = json.loads(_ok(_run("org", "show", "--json", "--home", str(tmp_path / "control"))).stdout)
    assert doc["authorization"] == {
        "cedarPolicies": {},
        "cedarSchema": None,
        "defaultPermit": False,
        "projects": [],
    }
