"""Cedar policies are never skipped because another authorizer is loaded.

Every policy kind a snapshot's authorization section carries must be claimed by a loaded
authorizer; the Cedar section is claimed by the authorizer named ``cedar`` (the plugin as it
is). With the Cedar plugin absent, an allow-everything authorizer beside the grant check does
not admit a claim a Cedar ``forbid`` refuses: the deny names the unclaimed section, and the
stored claim record says so. With Cedar loaded, Cedar's forbid denies. And an org with no
authorization section is refused while Cedar is loaded (document 000: a missing section is an
explicit deny), unless it declares the default-permit fallback.

Real components: a compiled, signed, exported snapshot synced into a host home, the CLI in
process with the plugin manager as its context object, the audit log read back from SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import rensei_authz_cedar
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.snapshot.authz import AuthorizationRequest, Authorizer, Decide
from rensei_routing.core.snapshot.org import OrgData
from rensei_routing.core.snapshot.postures import PolicyVerdict
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import RenseiPluginManager, get_plugin_manager, register_plugin
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "org.json"


class AllowAll:
    """An authorizer plugin that permits every request (it claims no policy kind)."""

    @staticmethod
    def prepare(sections: Mapping[str, Any]) -> Decide:
        def decide(requests: Sequence[AuthorizationRequest]) -> list[PolicyVerdict]:
            return [PolicyVerdict(effect=True, policy_ids=("allow-all",)) for _ in requests]

        return decide

    @hookimpl
    def register_authorizers(self, register: Any) -> None:
        register(Authorizer(name="allow-all", prepare=self.prepare))


def _pm(*, cedar: bool, allow_all: bool) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    if cedar:
        register_plugin(pm, rensei_authz_cedar, "cedar")
    if allow_all:
        register_plugin(pm, AllowAll(), "allow-all")
    return pm


def _run(*args: str, cedar: bool, allow_all: bool = False) -> Result:
    pm = _pm(cedar=cedar, allow_all=allow_all)
    return CliRunner().invoke(cli, list(args), obj=pm, catch_exceptions=False)


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def _host(tmp_path: Path, org: dict[str, Any]) -> Path:
    """A host home holding the signed snapshot of ``org`` (compiled with Cedar loaded)."""
    control, host = tmp_path / "control", tmp_path / "host"
    (tmp_path / "org.json").write_text(json.dumps(org))
    snap = tmp_path / "snap.json"
    for args in (
        ("init", "--home", str(control), "--org", "org_a"),
        ("org", "load", str(tmp_path / "org.json"), "--home", str(control)),
        ("snapshot", "compile", "--home", str(control)),
        ("snapshot", "export", str(snap), "--home", str(control)),
        ("init", "--home", str(host), "--org", "org_a"),
        ("host", "trust", str(control / "keys" / "host.pub"), "--home", str(host)),
        ("host", "sync", "--from", str(snap), "--home", str(host)),
    ):
        _ok(_run(*args, cedar=True))
    return host


def _records(home: Path) -> list[dict[str, Any]]:
    with AuditLog.open(Home(home)) as log:
        return [r.payload for r in log.records()]


def _claim(host: Path, pool: str, project: str, **plugins: bool) -> Result:
    args = ("host", "claim", "--pool", pool, "--project", project, "--home", str(host), "--json")
    return _run(*args, cedar=plugins["cedar"], allow_all=plugins.get("allow_all", False))


@pytest.fixture
def cedar_host(tmp_path: Path) -> Path:
    return _host(tmp_path, json.loads(EXAMPLE.read_text()))


def test_a_cedar_forbid_is_not_skipped_beside_another_authorizer(cedar_host: Path) -> None:
    # the grant check admits docker-b for acme-evals; only the Cedar forbid refuses it
    refused = _claim(cedar_host, "docker-b", "acme-evals", cedar=False, allow_all=True)
    assert refused.exit_code == 1, refused.output
    (record,) = _records(cedar_host)
    assert (record["admitted"], record["reason"]) == (False, "no-authorizer")
    assert "policyBundle.authorization" in record["detail"] and "cedar" in record["detail"]
    verdict = record["authorization"]
    assert (verdict["allowed"], verdict["authorizer"]) == (False, "authorization")
    by_name = {a["name"]: a for a in verdict["authorizers"]}
    assert by_name["allow-all"]["allowed"] is True  # the other authorizer did allow
    assert by_name["authorization"]["reason"] == "no-authorizer"
    assert "allow-all" in by_name["authorization"]["detail"]  # names what was loaded

    # with Cedar loaded beside it, Cedar's own forbid denies
    forbidden = _claim(cedar_host, "docker-b", "acme-evals", cedar=True, allow_all=True)
    assert forbidden.exit_code == 1, forbidden.output
    record = _records(cedar_host)[-1]
    assert (record["admitted"], record["reason"]) == (False, "forbid")
    assert (record["authorization"]["authorizer"], record["authorization"]["policyIds"]) == (
        "cedar",
        ["evals-off-docker"],
    )
    # and a claim Cedar permits is admitted with both loaded
    admitted = _ok(_claim(cedar_host, "local-a", "acme-evals", cedar=True, allow_all=True))
    assert json.loads(admitted.stdout)["admitted"] is True
    # every claim without Cedar is refused, even one Cedar would have permitted
    assert _claim(cedar_host, "local-a", "acme-evals", cedar=False, allow_all=True).exit_code == 1
    assert _records(cedar_host)[-1]["reason"] == "no-authorizer"
    assert len(_records(cedar_host)) == 4


def _plain_org(**authorization: Any) -> dict[str, Any]:
    org = json.loads(EXAMPLE.read_text())
    del org["authorization"]
    if authorization:
        org["authorization"] = authorization
    return org


def test_no_authorization_section_is_refused_while_cedar_is_loaded(tmp_path: Path) -> None:
    host = _host(tmp_path, _plain_org())
    refused = _claim(host, "local-a", "acme-web", cedar=True)
    assert refused.exit_code == 1, refused.output
    (record,) = _records(host)
    assert (record["admitted"], record["authorization"]["authorizer"]) == (False, "cedar")
    assert "no authorization section" in record["detail"]
    # without any authorizer the grant check alone decides (nothing authored, nothing to skip)
    _ok(_claim(host, "local-a", "acme-web", cedar=False))
    assert _records(host)[-1]["admitted"] is True


def test_the_declared_default_permit_admits_with_zero_policies(tmp_path: Path) -> None:
    host = _host(tmp_path, _plain_org(defaultPermit=True, projects=["acme-web"]))
    admitted = _ok(_claim(host, "local-a", "acme-web", cedar=True))
    payload = json.loads(admitted.stdout)
    assert payload["admitted"] is True
    (record,) = _records(host)
    assert record["authorization"]["reason"] == "default-permit"
    # the grant check still refuses what is not granted; the fallback never widens it
    assert _claim(host, "k8s-gpu", "acme-web", cedar=True).exit_code == 1
    # and the section is Cedar's: without a Cedar evaluator it denies, naming it
    assert _claim(host, "local-a", "acme-web", cedar=False, allow_all=True).exit_code == 1
    assert _records(host)[-1]["reason"] == "no-authorizer"


def test_the_docs_say_a_missing_section_denies_and_how_to_declare_the_fallback() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "authorization.md").read_text()
    assert "decides exactly as before, plugin or not" not in text  # the old, wrong promise
    bullet = text.split("**No authorization section, Cedar installed: every claim is refused**")
    assert len(bullet) == 2, "docs/authorization.md must say a missing section denies"
    snippet = bullet[1].split("```json", 1)[1].split("```", 1)[0].strip()
    declared = json.loads("{" + snippet + "}")
    assert declared == {"authorization": {"defaultPermit": True}}
    org = _plain_org(**declared["authorization"])
    assert OrgData.from_dict(org).authorization == {
        "cedarPolicies": {},
        "cedarSchema": None,
        "defaultPermit": True,
        "projects": [],
    }
