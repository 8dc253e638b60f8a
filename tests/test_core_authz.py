"""Authorization (core.authz, the fail-closed posture of core.postures, the org's authorization
section, the ``register_authorizers`` hook) with sample, non-Cedar authorizers: every failure
of an authorizer denies and names why; a deny from any authorizer is a deny; the declared
default-permit is the only allow without a determining policy; prepared once per snapshot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.snapshot.authz import (
    AuthorizationEngine,
    AuthorizationRequest,
    Authorizer,
    Decide,
    EntityRef,
)
from rensei_routing.core.snapshot.freshness import Freshness
from rensei_routing.core.snapshot.org import (
    OrgData,
    authorization_of,
    compile_sections,
    policy_document,
)
from rensei_routing.core.snapshot.postures import PolicyVerdict, authorize
from rensei_routing.errors import MalformedError, PluginError
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import authorizers, get_plugin_manager, register_plugin

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
FRESH = Freshness(ruleset_rev="org@1", age_ms=1000, degraded=False)


def _org(authorization: Any = None) -> dict[str, Any]:
    doc = json.loads((EXAMPLES / "org.json").read_text())
    if authorization is not None:
        doc["authorization"] = authorization
    return doc


def _sections(authorization: Any = None) -> dict[str, Any]:
    org = OrgData.from_dict(_org(authorization))
    return compile_sections(org, PolicySnapshot.from_dict({"policies": []}))


def _claim(pool: str = "local-a", project: str = "acme-evals") -> AuthorizationRequest:
    return AuthorizationRequest.build(
        EntityRef(type="Project", id=project),
        EntityRef.action("claim"),
        EntityRef(type="Pool", id=pool),
        {"pool": pool, "project": project},
    )


class Sample:
    """An authorizer answering ``verdict`` (or raising it), counting its prepares; it evaluates
    the ``cedar`` policy kind unless given other ``kinds``."""

    def __init__(
        self,
        name: str,
        verdict: Any,
        *,
        prepare_error: Exception | None = None,
        kinds: tuple[str, ...] | None = ("cedar",),
    ):
        self.verdict, self.prepare_error, self.prepared, self.seen = verdict, prepare_error, 0, []
        self.authorizer = Authorizer(name=name, prepare=self.prepare, plugin="sample", kinds=kinds)

    def prepare(self, sections: Mapping[str, Any]) -> Decide:
        self.prepared += 1
        if self.prepare_error is not None:
            raise self.prepare_error

        def decide(requests: Sequence[AuthorizationRequest]) -> Sequence[PolicyVerdict]:
            self.seen.extend(requests)
            if isinstance(self.verdict, Exception):
                raise self.verdict
            if callable(self.verdict):
                return self.verdict(requests)  # type: ignore[no-any-return]
            return [self.verdict] * len(requests)

        return decide


def _decide(
    samples: Sequence[Sample], sections: Mapping[str, Any], request: AuthorizationRequest
) -> Any:
    engine = AuthorizationEngine([s.authorizer for s in samples])
    (decision,) = engine.decide(
        [request], ruleset_rev="org@1", content_hash="h1", sections=sections, freshness=FRESH
    )
    return decision


DECLARED = {"cedarPolicies": {}, "defaultPermit": False}
PERMIT = PolicyVerdict(effect=True, policy_ids=("allow-all",))


# -- the posture ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "reason", "detail"),
    [
        (Sample("s", PERMIT), "permit", ""),
        (Sample("s", PolicyVerdict(effect=False, policy_ids=("no",))), "forbid", ""),
        (Sample("s", PolicyVerdict(effect=None)), "no-policy", ""),
        (
            Sample("s", RuntimeError("engine down")),
            "evaluation-failed",
            "RuntimeError: engine down",
        ),
        (
            Sample("s", PERMIT, prepare_error=ValueError("policy 'p' does not parse")),
            "evaluation-failed",
            "ValueError: policy 'p' does not parse",
        ),
        (
            Sample("s", PolicyVerdict(effect=True, policy_ids=("a",), errors=("attr missing",))),
            "evaluation-failed",
            "attr missing",
        ),
        (Sample("s", lambda requests: []), "evaluation-failed", "one verdict per request"),
        (Sample("s", "yes"), "evaluation-failed", "not a verdict"),
    ],
    ids=[
        "permit",
        "forbid",
        "no-policy",
        "decide-raises",
        "prepare-raises",
        "error-beats-permit",
        "miscounted",
        "not-a-verdict",
    ],
)
def test_every_failure_is_a_deny_naming_why(sample: Sample, reason: str, detail: str) -> None:
    decision = _decide([sample], _sections(DECLARED), _claim())
    assert decision.reason == reason
    assert decision.allowed is (reason == "permit")
    assert detail in decision.detail
    if not decision.allowed:
        assert decision.authorizer == "s"


def test_a_deny_from_either_is_a_deny_and_forbid_beats_permit() -> None:
    permit = Sample("a-permits", PERMIT)
    forbid = Sample("b-forbids", PolicyVerdict(effect=False, policy_ids=("no-docker",)))
    decision = _decide([permit, forbid], _sections(DECLARED), _claim())
    assert (decision.allowed, decision.reason, decision.authorizer) == (
        False,
        "forbid",
        "b-forbids",
    )
    assert decision.policy_ids == ("no-docker",)
    assert [o.result.allowed for o in decision.outcomes] == [True, True, False]
    # the grant check refusing denies whatever the plugins say
    refused = _decide([permit], _sections(DECLARED), _claim(pool="k8s-gpu", project="acme-web"))
    assert (refused.allowed, refused.reason, refused.authorizer) == (
        False,
        "pool-not-granted",
        "grant-check",
    )


def test_default_permit_only_when_declared_and_never_over_a_forbid_or_failure() -> None:
    nothing = Sample("s", PolicyVerdict(effect=None))
    declared = {**DECLARED, "defaultPermit": True}
    allowed = _decide([nothing], _sections(declared), _claim())
    assert (allowed.allowed, allowed.reason) == (True, "default-permit")
    assert allowed.to_dict()["reason"] == "default-permit"
    assert allowed.outcomes[1].result.reason == "default-permit"
    assert not _decide([nothing], _sections(DECLARED), _claim()).allowed
    for verdict in (PolicyVerdict(effect=False), PolicyVerdict(effect=None, errors=("x",))):
        assert not _decide([Sample("s", verdict)], _sections(declared), _claim()).allowed
    assert not _decide([Sample("s", KeyError("k"))], _sections(declared), _claim()).allowed


def test_no_pool_is_a_deny_not_an_allow() -> None:
    request = AuthorizationRequest.build(
        EntityRef(type="Project", id="acme-evals"),
        EntityRef.action("spawn"),
        EntityRef(type="Repo", id="acme/widgets"),
    )
    decision = _decide([Sample("s", PERMIT)], _sections(DECLARED), request)
    assert (decision.allowed, decision.reason) == (False, "no-pool")


def test_declared_policies_without_an_authorizer_deny() -> None:
    decision = _decide([], _sections(DECLARED), _claim())
    assert (decision.allowed, decision.reason, decision.authorizer) == (
        False,
        "no-authorizer",
        "authorization",
    )
    # an org with no authorization section decides by the grant check alone, as before
    plain = _decide([], _sections(), _claim())
    assert (plain.allowed, plain.reason, [o.name for o in plain.outcomes]) == (
        True,
        "permit",
        ["grant-check"],
    )


def test_prepared_once_per_snapshot_revision_and_reused() -> None:
    sample = Sample("s", PERMIT)
    engine = AuthorizationEngine([sample.authorizer])
    sections = _sections(DECLARED)
    for _ in range(3):
        engine.decide(
            [_claim(), _claim()],
            ruleset_rev="org@1",
            content_hash="h1",
            sections=sections,
            freshness=FRESH,
        )
    assert sample.prepared == 1
    engine.decide(
        [_claim()], ruleset_rev="org@2", content_hash="h2", sections=sections, freshness=FRESH
    )
    assert sample.prepared == 2
    # the authorizer sees the snapshot fields in the context
    assert sample.seen[0].context == {
        "pool": "local-a",
        "project": "acme-evals",
        "rulesetRev": "org@1",
        "snapshotAgeMs": 1000,
        "degraded": False,
    }


def test_the_record_carries_ids_errors_and_snapshot_fields() -> None:
    sample = Sample("s", PolicyVerdict(effect=False, policy_ids=("f1", "f2"), errors=("e1",)))
    record = _decide([sample], _sections(DECLARED), _claim()).to_dict()
    assert record["decision_class"] == "authorization"
    assert (record["policyIds"], record["errors"]) == (["f1", "f2"], ["e1"])
    assert (record["rulesetRev"], record["snapshotAgeMs"], record["degraded"]) == (
        "org@1",
        1000,
        False,
    )
    assert record["principal"] == 'Project::"acme-evals"'
    assert [a["name"] for a in record["authorizers"]] == ["grant-check", "s"]


def test_authorize_reads_policy_verdicts() -> None:
    assert authorize(lambda: PolicyVerdict(effect=True, policy_ids=("p",))).policy_ids == ("p",)
    bad = authorize(lambda: PolicyVerdict(effect=True, policy_ids=["p"]))  # type: ignore[arg-type]
    assert (bad.allowed, bad.reason) == (False, "evaluation-failed")


# -- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Project::"acme"', EntityRef(type="Project", id="acme")),
        ('Rensei::Pool::"a b"', EntityRef(type="Rensei::Pool", id="a b")),
        ('Pool::"\\u00e9"', EntityRef(type="Pool", id="\u00e9")),
    ],
)
def test_entity_refs_parse(text: str, expected: EntityRef) -> None:
    assert EntityRef.parse(text) == expected
    assert EntityRef.parse(str(expected)) == expected


@pytest.mark.parametrize("text", ["acme", "Project::acme", 'Project::""', '1x::"a"', 'P::"a'])
def test_bad_entity_refs_are_refused(text: str) -> None:
    with pytest.raises(MalformedError):
        EntityRef.parse(text)


def test_actions_may_be_bare_names() -> None:
    assert EntityRef.action("claim") == EntityRef(type="Action", id="claim")
    assert EntityRef.action('Action::"spawn"') == EntityRef(type="Action", id="spawn")


@pytest.mark.parametrize(
    "context",
    [{"rulesetRev": "x"}, {"degraded": True}, {"pool": 3}, {"project": ""}, [1]],
    ids=["rev", "degraded", "pool-not-string", "empty-project", "not-object"],
)
def test_a_context_may_not_forge_snapshot_fields(context: Any) -> None:
    with pytest.raises(MalformedError):
        AuthorizationRequest.build(
            EntityRef(type="P", id="a"),
            EntityRef.action("claim"),
            EntityRef(type="R", id="b"),
            context,
        )


# -- the org's authorization section -------------------------------------------------------------


def test_the_section_travels_in_the_policy_bundle_and_nothing_changes_without_it() -> None:
    section = {
        "cedarPolicies": {
            "b": "forbid(principal, action, resource);",
            "a": "permit(principal, action, resource);",
        },
        "cedarSchema": {"": {"entityTypes": {}, "actions": {}}},
        "defaultPermit": True,
        "projects": ["z", "y"],
    }
    sections = _sections(section)
    assert set(sections) == {
        "policyBundle",
        "capacityProfiles",
        "poolHostInventory",
        "executionCellMatrix",
        "posteriorSummary",
    }
    found = authorization_of(sections)
    assert found is not None and list(found["cedarPolicies"]) == ["a", "b"]
    assert found["projects"] == ["y", "z"] and found["defaultPermit"] is True
    assert PolicySnapshot.from_dict(policy_document(sections["policyBundle"])).policies == ()
    plain = _sections()
    assert "authorization" not in plain["policyBundle"] and authorization_of(plain) is None
    org = OrgData.from_dict(_org(section))
    assert OrgData.from_dict(json.loads(canonical_bytes(org.to_dict()))) == org


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ({"cedarPolicies": []}, "authorization.cedarPolicies"),
        ({"cedarPolicies": {"bad id!": "x"}}, "authorization.cedarPolicies"),
        ({"cedarPolicies": {"p": ""}}, "authorization.cedarPolicies.p"),
        ({"cedarPolicies": {"p": 3}}, "authorization.cedarPolicies.p"),
        ({"cedarSchema": 3}, "authorization.cedarSchema"),
        ({"defaultPermit": "yes"}, "authorization.defaultPermit"),
        ({"projects": ["a", "a"]}, "authorization.projects"),
        ({"engine": "opa"}, "authorization.engine"),
    ],
)
def test_a_malformed_section_is_refused_naming_the_field(section: Any, path: str) -> None:
    with pytest.raises(MalformedError) as e:
        OrgData.from_dict(_org(section))
    assert e.value.path == path


# -- the hook ------------------------------------------------------------------------------------


class _Plugin:
    def __init__(self, *authorizers: Any) -> None:
        self.values = authorizers

    @hookimpl
    def register_authorizers(self, register: Any) -> None:
        for value in self.values:
            register(value)


def _pm(*plugins: tuple[str, object]) -> Any:
    pm = get_plugin_manager(load_entrypoints=False)
    for name, plugin in plugins:
        register_plugin(pm, plugin, name)
    return pm


def test_hook_register_authorizers() -> None:
    b, a = Sample("b", PERMIT).authorizer, Sample("a", PERMIT).authorizer
    found = authorizers(_pm(("sample", _Plugin(b, a))))
    assert [(x.name, x.plugin) for x in found] == [("a", "sample"), ("b", "sample")]
    assert authorizers(_pm()) == ()
    with pytest.raises(PluginError, match="registered by both 'one' and 'two'"):
        authorizers(_pm(("one", _Plugin(a)), ("two", _Plugin(a))))
    with pytest.raises(PluginError, match="plugin 'wrong' registered str"):
        authorizers(_pm(("wrong", _Plugin("not an authorizer"))))
    with pytest.raises(PluginError, match="callable prepare"):
        authorizers(_pm(("bad", _Plugin(Authorizer(name="x", prepare=None)))))  # type: ignore[arg-type]


# -- every policy kind is claimed (issue 19 #1) --------------------------------------------------


def test_a_policy_kind_no_loaded_authorizer_claims_denies_whatever_else_is_loaded() -> None:
    permit_all = Sample("permit-all", PERMIT, kinds=None)  # claims its own name only
    decision = _decide([permit_all], _sections(DECLARED), _claim())
    assert (decision.allowed, decision.reason, decision.authorizer) == (
        False,
        "no-authorizer",
        "authorization",
    )
    assert "policyBundle.authorization" in decision.detail and "cedar" in decision.detail
    assert decision.detail in decision.errors
    assert [o.name for o in decision.outcomes] == ["grant-check", "authorization", "permit-all"]
    # an authorizer named cedar claims the cedar kind by default (the plugin as it is)
    cedar = Sample("cedar", PERMIT, kinds=None)
    assert _decide([permit_all, cedar], _sections(DECLARED), _claim()).allowed
    # no section: nothing to claim, the grant check and the authorizers decide
    assert _decide([permit_all], _sections(), _claim()).allowed


def test_policy_kinds_of_a_section() -> None:
    from rensei_routing.core.snapshot.org import policy_kinds_of

    assert policy_kinds_of(_sections()) == ()
    assert policy_kinds_of(_sections(DECLARED)) == ("cedar",)
    assert policy_kinds_of(_sections({"defaultPermit": True})) == ("cedar",)
    # a section from a newer compiler carrying another policy language: that kind too
    sections = _sections(DECLARED)
    sections["policyBundle"]["authorization"]["regoPolicies"] = {"p": "deny"}
    assert policy_kinds_of(sections) == ("cedar", "rego")
    rego_unclaimed = _decide([Sample("cedar", PERMIT)], sections, _claim())
    assert (rego_unclaimed.allowed, rego_unclaimed.reason) == (False, "no-authorizer")
    assert "rego policies" in rego_unclaimed.detail


def test_authorizer_kinds_are_checked_at_collection() -> None:
    def named(kinds: Any) -> Authorizer:
        return Authorizer(name="k", prepare=Sample("k", PERMIT).prepare, kinds=kinds)

    found = authorizers(_pm(("ok", _Plugin(named(("cedar", "rego"))))))
    assert found[0].evaluates == ("cedar", "rego")
    assert authorizers(_pm(("dflt", _Plugin(named(None)))))[0].evaluates == ("k",)
    for bad in ("cedar", (), ("",), (3,), ["cedar"]):
        with pytest.raises(PluginError, match="kinds must be"):
            authorizers(_pm(("bad", _Plugin(named(bad)))))
