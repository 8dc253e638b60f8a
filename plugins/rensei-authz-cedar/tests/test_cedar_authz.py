"""The Cedar authorizer through the core's engine, on snapshot sections compiled from the
example org: the real Cedar engine (cedarpy), real policies, real entities. Each failure case
of the fail-closed posture is one test: a deny that names why, never an allow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cedarpy
import pytest
from rensei_authz_cedar.engine import bundle_problems, entities_of, read_bundle

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.snapshot.authz import (
    AuthorizationDecision,
    AuthorizationEngine,
    AuthorizationRequest,
    EntityRef,
)
from rensei_routing.core.snapshot.freshness import Freshness
from rensei_routing.core.snapshot.org import OrgData, compile_sections
from rensei_routing.plugins.manager import RenseiPluginManager, authorizers, snapshot_validators
from rensei_routing.plugins.testing import assert_plugin_ok

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "org.json"
FRESH = Freshness(ruleset_rev="org@1", age_ms=2000, degraded=False)


def _doc(**authorization: Any) -> dict[str, Any]:
    doc = json.loads(EXAMPLE.read_text())
    doc["authorization"].update(authorization)
    return doc


def _sections(doc: dict[str, Any]) -> dict[str, Any]:
    org = OrgData.from_dict(doc)
    return compile_sections(org, PolicySnapshot.from_dict({"policies": []}))


def _request(
    principal: str = 'Project::"acme-evals"',
    resource: str = 'Pool::"local-a"',
    action: str = "claim",
    **context: Any,
) -> AuthorizationRequest:
    return AuthorizationRequest.build(
        EntityRef.parse(principal), EntityRef.action(action), EntityRef.parse(resource), context
    )


def _decide(
    pm: RenseiPluginManager,
    sections: dict[str, Any],
    *requests: AuthorizationRequest,
    freshness: Freshness = FRESH,
) -> list[AuthorizationDecision]:
    engine = AuthorizationEngine(authorizers(pm))
    return engine.decide(
        list(requests) or [_request()],
        ruleset_rev="org@1",
        content_hash="c1",
        sections=sections,
        freshness=freshness,
    )


def _cedar(decision: AuthorizationDecision) -> Any:
    (outcome,) = [o for o in decision.outcomes if o.name == "cedar"]
    return outcome.result


def test_passes_the_host_checks(rensei_pm: RenseiPluginManager) -> None:
    assert_plugin_ok(rensei_pm, "cedar")
    assert [a.name for a in authorizers(rensei_pm)] == ["cedar"]


def test_a_permit_admits_naming_the_policy(rensei_pm: RenseiPluginManager) -> None:
    (d,) = _decide(rensei_pm, _sections(_doc()))
    assert (d.allowed, d.reason, d.policy_ids) == (True, "permit", ("granted-pools",))


def test_a_forbid_beats_a_permit(rensei_pm: RenseiPluginManager) -> None:
    # granted-pools permits acme-evals on docker-b; evals-off-docker forbids it
    (d,) = _decide(rensei_pm, _sections(_doc()), _request(resource='Pool::"docker-b"'))
    assert (d.allowed, d.reason, d.authorizer, d.policy_ids) == (
        False,
        "forbid",
        "cedar",
        ("evals-off-docker",),
    )
    assert d.outcomes[0].result.allowed  # the grant check alone would have admitted it


def test_the_context_reaches_the_policies(rensei_pm: RenseiPluginManager) -> None:
    degraded = Freshness(ruleset_rev="org@1", age_ms=400_000, degraded=True)
    gpu = _request(resource='Pool::"k8s-gpu"')
    (fresh,) = _decide(rensei_pm, _sections(_doc()), gpu)
    (stale,) = _decide(rensei_pm, _sections(_doc()), gpu, freshness=degraded)
    assert fresh.allowed
    assert (stale.allowed, stale.policy_ids) == (False, ("no-gpu-while-degraded",))


def test_a_claim_naming_no_project_is_still_cedars_to_refuse(
    rensei_pm: RenseiPluginManager,
) -> None:
    """The built-in grant check follows the daemon for a claim naming no project (the pool
    rules alone: k8s-gpu is in the inventory, active and named by gpu-heavy), and Cedar still
    decides it: Project::"*" is in no profile naming k8s-gpu, so no policy permits it."""
    anyone = _request(principal='Project::"*"', resource='Pool::"k8s-gpu"', pool="k8s-gpu")
    (d,) = _decide(rensei_pm, _sections(_doc()), anyone)
    grant = d.outcomes[0].result
    assert (grant.allowed, grant.reason) == (True, "granted")
    assert (d.allowed, d.reason, d.authorizer) == (False, "no-policy", "cedar")
    # where Cedar permits (a profile granted to every project), both allow
    (ok,) = _decide(
        rensei_pm,
        _sections(_doc()),
        _request(principal='Project::"*"', resource='Pool::"local-a"', pool="local-a"),
    )
    assert (ok.allowed, ok.policy_ids) == (True, ("granted-pools",))


# -- the failure cases: each a deny that names why -----------------------------------------------


def test_missing_section(rensei_pm: RenseiPluginManager) -> None:
    doc = _doc()
    del doc["authorization"]
    (d,) = _decide(rensei_pm, _sections(doc))
    assert (d.allowed, d.reason, d.authorizer) == (False, "evaluation-failed", "cedar")
    assert "no authorization section" in d.detail


def test_missing_policy_bundle_section(rensei_pm: RenseiPluginManager) -> None:
    sections = _sections(_doc())
    sections["policyBundle"] = None
    (d,) = _decide(rensei_pm, sections)
    assert (d.allowed, d.reason) == (False, "evaluation-failed")
    assert "no authorization section" in d.detail


def test_unparseable_policy(rensei_pm: RenseiPluginManager) -> None:
    sections = _sections(_doc())  # compiled without the validator: the host still refuses it
    sections["policyBundle"]["authorization"]["cedarPolicies"]["broken"] = "permit(principal,"
    (d,) = _decide(rensei_pm, sections)
    assert (d.allowed, d.reason) == (False, "evaluation-failed")
    assert "CedarBundleError: policy 'broken' does not parse" in d.detail


def test_policy_off_its_schema(rensei_pm: RenseiPluginManager) -> None:
    sections = _sections(_doc())
    policies = sections["policyBundle"]["authorization"]["cedarPolicies"]
    policies["typo"] = 'permit(principal, action, resource) when { resource.stauts == "x" };'
    (d,) = _decide(rensei_pm, sections)
    assert not d.allowed and "policy 'typo' does not validate against the schema" in d.detail


def test_entity_the_snapshot_lacks(rensei_pm: RenseiPluginManager) -> None:
    unknown_pool = _request(resource='Pool::"ghost"', pool="local-a")
    unknown_project = _request(principal='Project::"nobody"')
    d1, d2 = _decide(rensei_pm, _sections(_doc()), unknown_pool, unknown_project)
    assert (d1.allowed, d1.reason) == (False, "evaluation-failed")
    assert d1.errors[-1] == 'entity Pool::"ghost" is not in the snapshot'
    assert (d2.allowed, d2.authorizer) == (False, "cedar")
    assert 'entity Project::"nobody" is not in the snapshot' in d2.detail


def test_evaluation_error_denies_even_beside_a_permit(rensei_pm: RenseiPluginManager) -> None:
    doc = _doc(cedarSchema=None)  # no schema, so a policy may name an attribute pools lack
    doc["authorization"]["cedarPolicies"]["needs-tier"] = (
        'forbid(principal, action, resource) when { resource.tier == "gold" };'
    )
    (d,) = _decide(rensei_pm, _sections(doc))
    cedar = _cedar(d)
    assert (d.allowed, d.reason, cedar.policy_ids) == (
        False,
        "evaluation-failed",
        ("granted-pools",),
    )
    assert "needs-tier" in d.detail and "tier" in d.detail


def test_the_engine_raising(rensei_pm: RenseiPluginManager) -> None:
    # a library caller's context the engine cannot take (bytes): cedarpy raises TypeError
    request = AuthorizationRequest(
        principal=EntityRef(type="Project", id="acme-evals"),
        action=EntityRef(type="Action", id="claim"),
        resource=EntityRef(type="Pool", id="local-a"),
        context={"pool": "local-a", "blob": b"\x00"},
    )
    good = _request()
    d1, d2 = _decide(rensei_pm, _sections(_doc()), request, good)
    for d in (d1, d2):  # the whole batch went to the engine together: both deny
        assert (d.allowed, d.reason, d.authorizer) == (False, "evaluation-failed", "cedar")
        assert d.detail.startswith("TypeError")


def test_a_request_cedar_cannot_build(rensei_pm: RenseiPluginManager) -> None:
    # a float is not a Cedar value: the engine answers NoDecision with an error
    (d,) = _decide(rensei_pm, _sections(_doc()), _request(weight=1.5))
    assert (d.allowed, d.reason) == (False, "evaluation-failed")
    assert "failed to build request" in d.detail


def test_zero_policies_deny_unless_default_permit(rensei_pm: RenseiPluginManager) -> None:
    (d,) = _decide(rensei_pm, _sections(_doc(cedarPolicies={})))
    assert (d.allowed, d.reason, d.authorizer) == (False, "no-policy", "cedar")
    (p,) = _decide(rensei_pm, _sections(_doc(cedarPolicies={}, defaultPermit=True)))
    assert (p.allowed, p.reason) == (True, "default-permit")
    assert p.to_dict()["reason"] == "default-permit"
    # the fallback never overrides a forbid
    forbid = {"f": 'forbid(principal, action, resource == Pool::"local-a");'}
    (f,) = _decide(rensei_pm, _sections(_doc(cedarPolicies=forbid, defaultPermit=True)))
    assert (f.allowed, f.reason, f.policy_ids) == (False, "forbid", ("f",))


# -- entities and the validator ------------------------------------------------------------------


def test_entities_come_from_the_snapshot() -> None:
    doc = _doc()
    entities = {(e["uid"]["type"], e["uid"]["id"]): e for e in entities_of(_sections(doc))}
    assert set(entities) >= {
        ("Pool", "local-a"),
        ("Host", "gpu-node-1"),
        ("Profile", "gpu-heavy"),
        ("Project", "acme-evals"),
        ("Project", "*"),
    }
    assert ("Project", "acme-web") not in entities  # only declared projects join, below
    gpu = entities[("Pool", "k8s-gpu")]
    assert gpu["parents"] == [{"type": "Profile", "id": "gpu-heavy"}]
    assert gpu["attrs"]["status"] == "active" and gpu["attrs"]["kind"] == "kubernetes"
    evals = entities[("Project", "acme-evals")]
    assert {p["id"] for p in evals["parents"]} == {"general", "gpu-heavy"}
    assert {p["id"] for p in entities[("Project", "*")]["parents"]} == {"general"}
    read = read_bundle(_sections(doc))
    assert read.projects == ("acme-web",) and read.policy_count == 4
    # the example schema accepts the entities the snapshot gives
    cedarpy.Entities.from_json_str(json.dumps(entities_of(_sections(doc))), read.schema)


@pytest.mark.parametrize(
    ("policies", "schema", "problem"),
    [
        ({"p": "permit(principal,"}, None, "policy 'p' does not parse"),
        (
            {"p": "permit(principal, action, resource); forbid(principal, action, resource);"},
            None,
            "policy 'p' holds 2 policies",
        ),
        (
            {"p": "permit(principal == ?principal, action, resource);"},
            None,
            "policy 'p' is a template",
        ),
        (
            {"p": "permit(principal, action, resource) when { resource.nope };"},
            "keep",
            "policy 'p' does not validate against the schema",
        ),
        ({}, "entity Broken = {", "cedarSchema does not parse"),
    ],
    ids=["parse", "two-in-one", "template", "schema", "bad-schema"],
)
def test_the_validator_names_the_policy_and_the_error(
    rensei_pm: RenseiPluginManager, policies: dict[str, str], schema: Any, problem: str
) -> None:
    doc = _doc(cedarPolicies=policies)
    if schema != "keep":
        doc["authorization"]["cedarSchema"] = schema
    problems = bundle_problems(_sections(doc))
    assert problems and problem in problems[0]
    (validator,) = snapshot_validators(rensei_pm)
    assert (validator.name, validator.plugin) == ("cedar-policies", "cedar")
    assert bundle_problems(_sections(_doc())) == []
    no_section = _doc()
    del no_section["authorization"]
    assert bundle_problems(_sections(no_section)) == []


def test_cedar_schema_as_json(rensei_pm: RenseiPluginManager) -> None:
    as_json = json.loads(_schema_json())
    (d,) = _decide(rensei_pm, _sections(_doc(cedarSchema=as_json)))
    assert d.allowed
    typo = {"t": 'permit(principal, action, resource) when { resource.stauts == "x" };'}
    problems = bundle_problems(_sections(_doc(cedarSchema=as_json, cedarPolicies=typo)))
    assert problems and "policy 't' does not validate against the schema" in problems[0]


def _schema_json() -> str:
    # the JSON form of the example schema, written by hand (cedarpy renders only Cedar syntax)
    ref = {"type": "Entity", "name": "Profile"}
    return json.dumps(
        {
            "": {
                "entityTypes": {
                    "Profile": {
                        "shape": {
                            "type": "Record",
                            "attributes": {"grantedToAll": {"type": "Boolean"}},
                        }
                    },
                    "Pool": {
                        "memberOfTypes": ["Profile"],
                        "shape": {
                            "type": "Record",
                            "attributes": {
                                "status": {"type": "String"},
                                "kind": {"type": "String", "required": False},
                                "profiles": {"type": "Set", "element": ref},
                            },
                        },
                    },
                    "Host": {
                        "memberOfTypes": ["Pool"],
                        "shape": {
                            "type": "Record",
                            "attributes": {
                                "pool": {"type": "Entity", "name": "Pool"},
                                "status": {"type": "String", "required": False},
                            },
                        },
                    },
                    "Project": {
                        "memberOfTypes": ["Profile"],
                        "shape": {
                            "type": "Record",
                            "attributes": {"profiles": {"type": "Set", "element": ref}},
                        },
                    },
                },
                "actions": {
                    name: {
                        "appliesTo": {
                            "principalTypes": ["Project"],
                            "resourceTypes": ["Pool"],
                            "context": {
                                "type": "Record",
                                "attributes": {
                                    "degraded": {"type": "Boolean"},
                                    "snapshotAgeMs": {"type": "Long"},
                                    "rulesetRev": {"type": "String"},
                                    "pool": {"type": "String", "required": False},
                                    "project": {"type": "String", "required": False},
                                    "repo": {"type": "String", "required": False},
                                    "role": {"type": "String", "required": False},
                                },
                            },
                        }
                    }
                    for name in ("claim", "spawn")
                },
            }
        }
    )


def test_the_benchmark_runs_and_agrees_with_bare_cedar() -> None:
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_cedar.py"
    spec = importlib.util.spec_from_file_location("bench_cedar", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--json"]) == 0


def test_loading_the_plugin_does_not_import_cedarpy() -> None:
    # Every `rensei` command loads its plugins; cedarpy is imported on the first Cedar question.
    import subprocess
    import sys

    code = (
        "import sys, rensei_authz_cedar as p; "
        "assert 'cedarpy' not in sys.modules, 'imported at load'; "
        "p.bundle_problems({}); "
        "assert 'cedarpy' in sys.modules, 'not imported when asked'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
