"""Plugin composition (issue 19, "the tests that find this kind"): every hook with two and three
plugins loaded together, one of them hostile: it raises, changes what it is shown (plainly, or
around the read-only guard), or answers nonsense. The promise, checked hook by hook against the
well-behaved plugins loaded alone: the same verdicts, or a denial (a ``PluginError`` naming the
hostile plugin, a failed validation, a deny), never a widening.

Real plugins where they exist (the Cedar plugin and the real Cedar engine, the sample plugin of
``tests/plugins``, the HydraFlow test seams), the real plugin manager and its collectors; the
hostile plugins are small classes below, registered like any plugin. A hostile plugin is named
``aaa-...`` so that it runs first (plugins and their contributions run in name order) and
whatever it does could reach the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import pytest

from rensei_routing.core.audit.chain import AuditRecord
from rensei_routing.core.redact import RedactionPattern
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.vocabulary import (
    ANTHROPIC_PROVENANCE,
    LiteralFamily,
    VocabularyExtension,
)
from rensei_routing.core.shadow.compare import Seam, Stage
from rensei_routing.core.snapshot.authz import (
    AuthorizationDecision,
    AuthorizationEngine,
    AuthorizationRequest,
    Authorizer,
    Decide,
    EntityRef,
)
from rensei_routing.core.snapshot.freshness import Freshness
from rensei_routing.core.snapshot.org import OrgData, compile_sections
from rensei_routing.core.snapshot.postures import PolicyVerdict
from rensei_routing.core.snapshot.validators import SnapshotValidator, run_validators
from rensei_routing.errors import PluginError
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import (
    RenseiPluginManager,
    authorizers,
    get_plugin_manager,
    notify_recorded,
    plugin_commands,
    redactor,
    register_plugin,
    safe_classify,
    seam_registry,
    snapshot_validators,
    vocabulary,
)

from .plugins import hydraflow_seams, sample

cedar_plugin = pytest.importorskip("rensei_authz_cedar")

ROOT = Path(__file__).resolve().parent.parent
CEDAR_ORG = ROOT / "plugins" / "rensei-authz-cedar" / "examples" / "org.json"
FRESH = Freshness(ruleset_rev="org@1", age_ms=1000, degraded=False)
HOSTILE = "aaa-hostile"


def _pm(*plugins: tuple[str, object]) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    for name, plugin in plugins:
        register_plugin(pm, plugin, name)
    return pm


def _json_copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


class Hook:
    """A plugin implementing one ``register_*`` hook by calling ``body(register)``."""

    def __init__(self, hook: str, body: Callable[[Any], Any]) -> None:
        if hook == "register_commands":

            def impl(cli: Any) -> Any:
                return body(cli)

        else:

            def impl(register: Any) -> Any:
                return body(register)

        setattr(self, hook, hookimpl(specname=hook)(impl))


def _raise(_register: Any) -> None:
    raise RuntimeError("the hostile plugin's hook is down")


def _returns(_register: Any) -> object:
    return ["a value"]


# == register_authorizers ========================================================================


def _cedar_sections() -> dict[str, Any]:
    org = OrgData.from_dict(json.loads(CEDAR_ORG.read_text()))
    return compile_sections(org, PolicySnapshot.from_dict({"policies": []}))


def _request(principal: str, action: str, pool: str) -> AuthorizationRequest:
    project = EntityRef.parse(principal)
    context = {"pool": pool} if project.id == "*" else {"pool": pool, "project": project.id}
    return AuthorizationRequest.build(
        project, EntityRef.action(action), EntityRef(type="Pool", id=pool), context
    )


REQUESTS = (
    _request('Project::"acme-evals"', "claim", "docker-b"),  # a Cedar forbid
    _request('Project::"acme-evals"', "claim", "local-a"),  # permitted
    _request('Project::"acme-evals"', "claim", "k8s-gpu"),  # granted to acme-evals
    _request('Project::"acme-web"', "claim", "k8s-gpu"),  # the grant check refuses
    _request('Project::"acme-evals"', "spawn", "k8s-gpu"),  # the second authorizer forbids
    _request('Project::"*"', "claim", "local-old"),  # draining: the grant check refuses
    _request('Project::"acme-web"', "claim", "local-a"),  # permitted
)


class NoGpuSpawn:
    """A well-behaved second authorizer: forbids spawning on k8s-gpu, permits the rest."""

    @staticmethod
    def prepare(sections: Mapping[str, Any]) -> Decide:
        def decide(requests: Sequence[AuthorizationRequest]) -> list[PolicyVerdict]:
            return [
                PolicyVerdict(effect=False, policy_ids=("no-gpu-spawn",))
                if (r.action.id, r.resource.id) == ("spawn", "k8s-gpu")
                else PolicyVerdict(effect=True, policy_ids=("rest",))
                for r in requests
            ]

        return decide

    @hookimpl
    def register_authorizers(self, register: Any) -> None:
        register(Authorizer(name="no-gpu-spawn", prepare=self.prepare))


def _permit_all(requests: Sequence[AuthorizationRequest]) -> list[PolicyVerdict]:
    return [PolicyVerdict(effect=True, policy_ids=("hostile",)) for _ in requests]


def _widen_sections(sections: Any) -> None:
    """Everything a hostile prepare could do to widen what the others allow, around the guard:
    drop every Cedar forbid, activate every pool, grant every profile to every project."""
    policies = sections["policyBundle"]["authorization"]["cedarPolicies"]
    for pid in [p for p, text in policies.items() if text.lstrip().startswith("forbid")]:
        dict.__delitem__(policies, pid)
    for pool in sections["poolHostInventory"]["pools"]:
        dict.__setitem__(pool, "status", "active")
    for profile in sections["capacityProfiles"]["profiles"]:
        list.append(sections["capacityProfiles"]["grants"], {"profile": profile["id"]})


def _hostile_authorizer(kind: str) -> Authorizer:
    def prepare(sections: Mapping[str, Any]) -> Decide:
        if kind == "prepare-raises":
            raise RuntimeError("hostile prepare")
        if kind == "prepare-mutates":
            sections["capacityProfiles"]["grants"].append({"profile": "gpu-heavy"})  # type: ignore[index]
        if kind == "prepare-mutates-around-the-guard":
            _widen_sections(sections)
        if kind == "prepare-returns-nonsense":
            return "not a callable"  # type: ignore[return-value]

        def decide(requests: Sequence[AuthorizationRequest]) -> Any:
            if kind == "decide-raises":
                raise RuntimeError("hostile decide")
            if kind == "decide-mutates":
                requests[0] = requests[1]  # type: ignore[index]
            if kind == "decide-mutates-around-the-guard":
                for r in requests:
                    object.__setattr__(r, "resource", EntityRef(type="Pool", id="local-a"))
                    object.__setattr__(r, "principal", EntityRef(type="Project", id="acme-web"))
                    dict.__setitem__(r.context, "pool", "local-a")
                    dict.__setitem__(r.context, "degraded", False)
            if kind == "miscounts":
                return _permit_all(requests)[:-1]
            if kind == "not-verdicts":
                return ["permit"] * len(requests)
            if kind == "bad-verdicts":
                return [PolicyVerdict(effect=True, policy_ids=["x"])] * len(requests)  # type: ignore[arg-type]
            if kind == "effect-nonsense":
                return [PolicyVerdict(effect="yes")] * len(requests)  # type: ignore[arg-type]
            return _permit_all(requests)

        return decide

    return Authorizer(name=HOSTILE, prepare=prepare)


#: Hostile authorizers that answer a permit for everything once they have done their worst:
#: the verdicts must then be exactly the others' alone.
PERMITTING = (
    "permits-everything",
    "prepare-mutates-around-the-guard",
    "decide-mutates-around-the-guard",
)
#: Hostile authorizers whose failure denies every request (fail closed).
FAILING = (
    "prepare-raises",
    "prepare-mutates",
    "prepare-returns-nonsense",
    "decide-raises",
    "decide-mutates",
    "miscounts",
    "not-verdicts",
    "bad-verdicts",
    "effect-nonsense",
)


def _decisions(pm: RenseiPluginManager, *, rounds: int = 2) -> list[AuthorizationDecision]:
    """Decide REQUESTS ``rounds`` times on one engine (the prepared state is reused): the last
    round's answers (whatever a plugin did the first time must not stick)."""
    engine, sections = AuthorizationEngine(authorizers(pm)), _cedar_sections()
    before = _json_copy(sections)
    out: list[AuthorizationDecision] = []
    for _ in range(rounds):
        out = engine.decide(
            list(REQUESTS),
            ruleset_rev="org@1",
            content_hash="c",
            sections=sections,
            freshness=FRESH,
        )
    assert sections == before, "an authorizer changed the host's snapshot sections"
    return out


def _good_plugins(count: int) -> list[tuple[str, object]]:
    return [("cedar", cedar_plugin), ("no-gpu-spawn", NoGpuSpawn())][: count - 1]


def _verdicts(
    decisions: Sequence[AuthorizationDecision],
) -> list[tuple[bool, str, tuple[str, ...]]]:
    # the hostile authorizer's own permit is among the determining ids of an allow: set aside
    return [
        (d.allowed, d.reason, tuple(i for i in d.policy_ids if i != "hostile")) for d in decisions
    ]


def _outcomes(decision: AuthorizationDecision) -> dict[str, Any]:
    return {o.name: o.result for o in decision.outcomes if o.name != HOSTILE}


@pytest.mark.parametrize("count", [2, 3], ids=["two-plugins", "three-plugins"])
@pytest.mark.parametrize("kind", PERMITTING + FAILING)
def test_authorizers_beside_a_hostile_one_decide_as_alone_or_deny(count: int, kind: str) -> None:
    good = _good_plugins(count)
    alone = _decisions(_pm(*good))
    assert [d.allowed for d in alone] == (
        [False, True, True, False, False, False, True]
        if count == 3
        else [False, True, True, False, True, False, True]
    )
    hostile = Hook("register_authorizers", lambda register: register(_hostile_authorizer(kind)))
    together = _decisions(_pm(*good, ("hostile-plugin", hostile)))
    for a, t in zip(alone, together, strict=True):
        assert not t.allowed or a.allowed, f"{kind} widened {t.request.to_dict()}"
        # the well-behaved authorizers and the grant check answer exactly as they did alone
        assert _outcomes(t) == _outcomes(a), kind
    if kind in PERMITTING:
        assert _verdicts(together) == _verdicts(alone)
    else:
        assert not any(t.allowed for t in together)
        assert {t.authorizer for t in together if t.reason == "evaluation-failed"} <= {
            HOSTILE,
            None,
        }


@pytest.mark.parametrize(
    ("plugin", "match"),
    [
        (Hook("register_authorizers", _raise), "hostile-plugin' failed in register_authorizers"),
        (Hook("register_authorizers", _returns), "it must return None"),
        (Hook("register_authorizers", lambda r: r("not an authorizer")), "registered str"),
        (
            Hook(
                "register_authorizers",
                lambda r: r(Authorizer(name="x", prepare=NoGpuSpawn.prepare, kinds="cedar")),  # type: ignore[arg-type]
            ),
            "kinds must be",
        ),
        (
            Hook(
                "register_authorizers",
                lambda r: r(Authorizer(name="cedar", prepare=NoGpuSpawn.prepare)),
            ),
            "registered by both",
        ),
    ],
    ids=["hook-raises", "hook-returns", "not-an-authorizer", "kinds-nonsense", "takes-cedars-name"],
)
def test_a_hostile_authorizer_plugin_that_cannot_register_is_refused(
    plugin: object, match: str
) -> None:
    for count in (2, 3):
        with pytest.raises(PluginError, match=match):
            authorizers(_pm(*_good_plugins(count), ("hostile-plugin", plugin)))


# == register_snapshot_validators ================================================================

BROKEN_POLICY = {"bad": "permit (principal, action, resource) when { nonsense( };"}


def _org_sections(*, broken: bool) -> dict[str, Any]:
    doc = json.loads(CEDAR_ORG.read_text())
    if broken:
        doc["authorization"]["cedarPolicies"].update(BROKEN_POLICY)
    return compile_sections(OrgData.from_dict(doc), PolicySnapshot.from_dict({"policies": []}))


def _hostile_check(kind: str) -> Callable[[Mapping[str, Any]], Any]:
    def check(sections: Mapping[str, Any]) -> Any:
        policies = sections["policyBundle"]["authorization"]["cedarPolicies"]
        if kind == "raises":
            raise RuntimeError("hostile validator")
        if kind == "mutates":
            policies.pop("bad", None)
            policies["extra"] = "forbid (principal, action, resource);"
        if kind == "mutates-around-the-guard":  # hides the broken policy from Cedar's validator
            if "bad" in policies:
                dict.__delitem__(policies, "bad")
            dict.__setitem__(sections, "posteriorSummary", None)
        if kind == "answers-a-string":
            return "ok"
        if kind == "answers-none":
            return None
        if kind == "answers-numbers":
            return [1, 2]
        return []

    return check


VALIDATOR_KINDS = (
    "passes",
    "raises",
    "mutates",
    "mutates-around-the-guard",
    "answers-a-string",
    "answers-none",
    "answers-numbers",
)


def _validate(pm: RenseiPluginManager, sections: dict[str, Any]) -> dict[str, Any]:
    before = _json_copy(sections)
    results = run_validators(snapshot_validators(pm), sections)
    assert sections == before, "a validator changed the sections the compile publishes"
    return {r.name: r for r in results}


@pytest.mark.parametrize("broken", [False, True], ids=["valid-bundle", "broken-bundle"])
@pytest.mark.parametrize("count", [2, 3], ids=["two-plugins", "three-plugins"])
@pytest.mark.parametrize("kind", VALIDATOR_KINDS)
def test_validators_beside_a_hostile_one_answer_as_alone_or_refuse(
    kind: str, count: int, broken: bool
) -> None:
    good = [("cedar", cedar_plugin), ("sample", sample)][: count - 1]
    alone = _validate(_pm(*good), _org_sections(broken=broken))
    assert all(r.ok for r in alone.values()) is not broken
    check = _hostile_check(kind)
    hostile = Hook(
        "register_snapshot_validators",
        lambda register: register(SnapshotValidator(name=HOSTILE, check=check)),
    )
    together = _validate(_pm(*good, ("hostile-plugin", hostile)), _org_sections(broken=broken))
    assert {n: r for n, r in together.items() if n != HOSTILE} == alone
    publishes = all(r.ok for r in together.values())
    assert not publishes or all(r.ok for r in alone.values())
    assert together[HOSTILE].ok is (kind == "passes")


@pytest.mark.parametrize(
    ("plugin", "match"),
    [
        (Hook("register_snapshot_validators", _raise), "failed in register_snapshot_validators"),
        (Hook("register_snapshot_validators", _returns), "it must return None"),
        (Hook("register_snapshot_validators", lambda r: r({"name": "x"})), "registered dict"),
        (
            Hook(
                "register_snapshot_validators",
                lambda r: r(SnapshotValidator(name="cedar-policies", check=lambda s: [])),
            ),
            "registered by both",
        ),
    ],
    ids=["hook-raises", "hook-returns", "not-a-validator", "takes-cedars-name"],
)
def test_a_hostile_validator_plugin_that_cannot_register_is_refused(
    plugin: object, match: str
) -> None:
    with pytest.raises(PluginError, match=match):
        snapshot_validators(_pm(("cedar", cedar_plugin), ("sample", sample), (HOSTILE, plugin)))


# == register_seams ==============================================================================

DEFAULT_STAGES = (Stage(mechanism="default", provider="claude"),)
MOVED = (
    Stage(mechanism="default", provider="claude"),
    Stage(mechanism="role-dial", provider="codex"),
)


def _hostile_classifier(kind: str) -> Callable[[Sequence[Stage]], Any]:
    def classify(stages: Sequence[Stage]) -> Any:
        if kind == "raises":
            raise RuntimeError("hostile classifier")
        if kind == "mutates":
            stages.clear()  # type: ignore[attr-defined]
        if kind == "answers-a-string":
            return "default"
        if kind == "answers-a-stage-it-was-not-given":
            return Stage(mechanism="credit-failover", provider="zai")
        return stages[-1]

    return classify


SEAM_KINDS = (
    "well-behaved",
    "raises",
    "mutates",
    "answers-a-string",
    "answers-a-stage-it-was-not-given",
)


def _classified(pm: RenseiPluginManager) -> dict[tuple[str, int], Stage]:
    registry = seam_registry(pm)
    out: dict[tuple[str, int], Stage] = {}
    for name in registry.seams:
        for i, stages in enumerate((DEFAULT_STAGES, MOVED)):
            given = list(stages)
            out[(name, i)] = safe_classify(registry, name, given)
            assert given == list(stages), f"the classifier of {name!r} changed its stages"
    return out


@pytest.mark.parametrize("count", [2, 3], ids=["two-plugins", "three-plugins"])
@pytest.mark.parametrize("kind", SEAM_KINDS)
def test_seams_beside_a_hostile_one_classify_as_alone(count: int, kind: str) -> None:
    good = [("hydraflow", hydraflow_seams), ("sample", sample)][: count - 1]
    alone = _classified(_pm(*good))
    seam = Seam(
        name="hostile-seam",
        request_face="agentic",
        stages=("default", "role-dial"),
        classifier=_hostile_classifier(kind),
    )
    hostile = Hook("register_seams", lambda register: register(seam))
    together = _classified(_pm(*good, (HOSTILE, hostile)))
    assert {k: v for k, v in together.items() if k[0] != "hostile-seam"} == alone
    mine = [together[("hostile-seam", i)] for i in (0, 1)]
    if kind == "well-behaved":
        assert [s.mechanism for s in mine] == ["default", "role-dial"]
    else:  # its own spawns are recorded as unclassified, naming it; nothing breaks
        assert {s.mechanism for s in mine} == {"unclassified"}
        assert all(HOSTILE in (s.detail or "") for s in mine)


@pytest.mark.parametrize(
    ("plugin", "match"),
    [
        (Hook("register_seams", _raise), "failed in register_seams"),
        (Hook("register_seams", _returns), "it must return None"),
        (Hook("register_seams", lambda r: r(sample.SEAM)), "registered by both"),
        (
            Hook(
                "register_seams",
                lambda r: r(Seam(name="x", request_face="nonsense", stages=("default",))),
            ),
            "not in the vocabulary",
        ),
        (
            Hook(
                "register_seams",
                lambda r: r(Seam(name="x", request_face="agentic", stages=("made-up",))),
            ),
            "not a legacy mechanism",
        ),
    ],
    ids=["hook-raises", "hook-returns", "takes-samples-seam", "face-nonsense", "stage-nonsense"],
)
def test_a_hostile_seam_plugin_that_cannot_register_is_refused(plugin: object, match: str) -> None:
    with pytest.raises(PluginError, match=match):
        seam_registry(_pm(("hydraflow", hydraflow_seams), ("sample", sample), (HOSTILE, plugin)))


# == register_vocabulary =========================================================================


def _vocab_plugin(extension: Any) -> Hook:
    return Hook("register_vocabulary", lambda register: register(extension))


def test_vocabulary_beside_a_hostile_one_is_kept_or_refused() -> None:
    good = [("sample", sample)]
    alone = vocabulary(_pm(*good))
    extra = VocabularyExtension(roles=frozenset({"hostile-role"}))
    together = vocabulary(_pm(*good, (HOSTILE, _vocab_plugin(extra))))
    assert together.literal_families == alone.literal_families
    assert together.model_aliases == alone.model_aliases
    assert set(alone.roles) <= set(together.roles)
    assert set(alone.capability_classes) == set(together.capability_classes)
    redefined = LiteralFamily(name="claude-haiku", token="hiku", provenance=ANTHROPIC_PROVENANCE)
    refusals = [
        (Hook("register_vocabulary", _raise), "failed in register_vocabulary"),
        (Hook("register_vocabulary", _returns), "it must return None"),
        (_vocab_plugin("words"), "registered str"),
        (_vocab_plugin(VocabularyExtension(literal_families=(redefined,))), "defined differently"),
        (
            _vocab_plugin(VocabularyExtension(capability_classes=frozenset({"claude-haiku"}))),
            "literal family of 'sample' and a capability class",
        ),
        (_vocab_plugin(VocabularyExtension(roles=frozenset({""}))), "non-empty names"),
        (
            _vocab_plugin(VocabularyExtension(legacy_mechanisms=frozenset({"unclassified"}))),
            "reserved",
        ),
    ]
    for plugin, match in refusals:
        with pytest.raises(PluginError, match=match):
            vocabulary(_pm(*good, (HOSTILE, plugin)))
        with pytest.raises(PluginError, match=match):
            vocabulary(_pm(*good, ("hydraflow", hydraflow_seams), (HOSTILE, plugin)))


# == register_redaction_patterns =================================================================

GLOBEX = RedactionPattern("globex-key", re.compile(r"globex_[a-z0-9]{12,}", re.ASCII), ("globex_",))
SECRETS = {
    "acme": "acme_ABCDEFGHIJKLMNOP1234",
    "globex": "globex_abcdefghijkl9876",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
}
#: Patterns that each take part of another plugin's secret (so that, applied first, they would
#: leave the rest of it in the record), or all of it under another name.
HOSTILE_PATTERNS = {
    "prefix": RedactionPattern("aaa-prefix", re.compile(r"acme_"), ("acme_",)),
    "middle": RedactionPattern("aaa-middle", re.compile(r"EFGHIJ"), ()),
    "suffix": RedactionPattern("aaa-suffix", re.compile(r"[a-l]{6}9876"), ()),
    "ghp-head": RedactionPattern("aaa-ghp", re.compile(r"ghp_A1b2"), ("ghp_",)),
    "whole": RedactionPattern("aaa-whole", re.compile(r"acme_[A-Z]+"), ("acme_",)),
}


class Globex:
    @hookimpl
    def register_redaction_patterns(self, register: Any) -> None:
        register(GLOBEX)


def _redacted(pm: RenseiPluginManager) -> str:
    payload = {"note": " ; ".join(SECRETS.values()), "id": "run-42"}
    return json.dumps(redactor(pm).redact(payload))


@pytest.mark.parametrize("count", [2, 3], ids=["two-plugins", "three-plugins"])
@pytest.mark.parametrize("kind", sorted(HOSTILE_PATTERNS))
def test_redaction_beside_a_hostile_pattern_hides_at_least_as_much(count: int, kind: str) -> None:
    good = [("sample", sample), ("globex", Globex())][: count - 1]
    alone = _redacted(_pm(*good))
    pattern = HOSTILE_PATTERNS[kind]
    hostile = Hook("register_redaction_patterns", lambda register: register(pattern))
    together = _redacted(_pm(*good, (HOSTILE, hostile)))
    hidden = [s for s in SECRETS.values() if s not in alone]
    assert hidden, alone
    for secret in hidden:  # no fragment of what was hidden alone shows beside the hostile one
        body = secret.split("_", 1)[1]
        for i in range(len(body) - 5):
            assert body[i : i + 6] not in together, (kind, body[i : i + 6], together)
    assert "run-42" in together


def test_a_hostile_redaction_plugin_that_cannot_register_is_refused() -> None:
    refusals = [
        (Hook("register_redaction_patterns", _raise), "failed in register_redaction_patterns"),
        (Hook("register_redaction_patterns", _returns), "it must return None"),
        (Hook("register_redaction_patterns", lambda r: r(r"acme_")), "registered str"),
        (
            Hook(
                "register_redaction_patterns",
                lambda r: r(RedactionPattern("aaa-marker", re.compile(r"REDACTED"))),
            ),
            "matches the marker",
        ),
    ]
    for plugin, match in refusals:
        with pytest.raises(PluginError, match=match):
            redactor(_pm(("sample", sample), ("globex", Globex()), (HOSTILE, plugin)))


# == register_commands ===========================================================================


class Hello:
    @hookimpl
    def register_commands(self, cli: click.Group) -> None:
        @cli.command(name="globex-hello")
        def hello() -> None:
            click.echo("hello from globex")


def _commands(pm: RenseiPluginManager) -> dict[str, str]:
    return {n: plugin for n, (plugin, _) in plugin_commands(pm, reserved=("explain",)).items()}


def test_commands_beside_a_hostile_plugin_are_kept_or_refused() -> None:
    for good in ([("sample", sample)], [("sample", sample), ("globex", Hello())]):
        alone = _commands(_pm(*good))

        def extra(cli: click.Group) -> None:
            cli.command(name="hostile-extra")(lambda: None)

        together = _commands(_pm(*good, (HOSTILE, Hook("register_commands", extra))))
        assert {n: p for n, p in together.items() if p != HOSTILE} == alone

        def clash(cli: click.Group) -> None:
            cli.command(name="sample")(lambda: None)

        def builtin(cli: click.Group) -> None:
            cli.command(name="explain")(lambda: None)

        for body, match in (
            (_raise, "failed in register_commands"),
            (_returns, "it must return None"),
            (clash, "registered by both"),
            (builtin, "is a built-in command"),
        ):
            with pytest.raises(PluginError, match=match):
                _commands(_pm(*good, (HOSTILE, Hook("register_commands", body))))


# == decision_recorded ===========================================================================


class HostileObserver:
    """Changes the record it is shown (around the frozen dataclass), then raises."""

    @hookimpl
    def decision_recorded(self, record: AuditRecord) -> None:
        object.__setattr__(record, "payload_bytes", b'{"forged":true}')
        object.__setattr__(record, "seq", 999)
        raise RuntimeError("hostile observer")


def _record(seq: int) -> AuditRecord:
    return AuditRecord(
        seq=seq,
        recorded_at="2026-01-01T00:00:00Z",
        prev_hash="sha256:" + "0" * 64,
        payload_hash="sha256:" + "1" * 64,
        record_hash=f"sha256:{seq:064d}",
        payload_bytes=json.dumps({"n": seq}).encode(),
    )


def test_observers_beside_a_hostile_one_see_what_they_saw_alone() -> None:
    records = [_record(0), _record(1)]
    kept = [(r.seq, r.payload_bytes) for r in records]
    one, two = sample.SampleObserver(), sample.SampleObserver()
    assert notify_recorded(_pm(("one", one), ("two", two)), records) == ()
    alone = (list(one.seen), list(two.seen))
    for observers in (
        [("one", sample.SampleObserver())],
        [("one", sample.SampleObserver()), ("two", sample.SampleObserver())],
    ):
        failures = notify_recorded(_pm(*observers, (HOSTILE, HostileObserver())), records)
        assert len(failures) == 2 and all(HOSTILE in f for f in failures)
        for (_, observer), seen in zip(observers, alone, strict=False):
            assert observer.seen == seen  # type: ignore[attr-defined]
    assert [(r.seq, r.payload_bytes) for r in records] == kept  # the caller's records untouched
