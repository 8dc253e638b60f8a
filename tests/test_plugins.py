"""The plugin manager and every hook at the library level: contributions collected in a stable
order, clashes naming both plugins, misbehaviour naming the plugin (STYLE.md §4)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from rensei_routing.core.audit.chain import AuditRecord
from rensei_routing.core.redact import DEFAULT_PATTERNS, marker
from rensei_routing.core.routing.vocabulary import (
    DEFAULT_VOCABULARY,
    Provenance,
    VocabularyExtension,
)
from rensei_routing.core.shadow.compare import Stage
from rensei_routing.core.snapshot.validators import (
    SnapshotValidator,
    ValidatorResult,
    run_validators,
)
from rensei_routing.errors import ClassifierError, PluginError
from rensei_routing.plugins.checks import (
    check_classifier_total,
    check_plugin_manager,
    stage_sequences,
)
from rensei_routing.plugins.info import plugin_infos
from rensei_routing.plugins.manager import (
    UNCLASSIFIED,
    RenseiPluginManager,
    check_pending,
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
from rensei_routing.plugins.testing import plugin_manager_for

from .plugins import broken, sample


def _pm(*plugins: tuple[str, object]) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    for name, plugin in plugins:
        register_plugin(pm, plugin, name)
    check_pending(pm)
    return pm


def _record(seq: int) -> AuditRecord:
    return AuditRecord(
        seq=seq,
        recorded_at="2026-01-01T00:00:00Z",
        prev_hash="sha256:" + "0" * 64,
        payload_hash="sha256:" + "1" * 64,
        record_hash=f"sha256:{seq:064d}",
        payload_bytes=b"{}",
    )


# -- the manager --------------------------------------------------------------------------------


def test_the_builtins_alone_give_the_shipped_defaults() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    assert vocabulary(pm) == DEFAULT_VOCABULARY
    assert redactor(pm).patterns == DEFAULT_PATTERNS
    assert list(seam_registry(pm).seams) == ["default"]
    assert snapshot_validators(pm) == ()
    assert [i.name for i in plugin_infos(pm)] == [
        "rensei_routing.plugins.default.seams",
        "rensei_routing.plugins.default.vocabulary",
    ]
    assert all(i.builtin and i.distribution == "rensei-routing" for i in plugin_infos(pm))


def test_a_misspelled_hook_fails_loudly_with_the_plugins_name() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    register_plugin(pm, broken.MisspelledHook(), "typo-plugin")
    with pytest.raises(PluginError, match=r"plugin 'typo-plugin'.*register_seam"):
        check_pending(pm)


def test_a_hook_with_a_misnamed_argument_is_refused_naming_the_plugin() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    with pytest.raises(PluginError, match=r"plugin 'argname-plugin'.*registrar") as caught:
        register_plugin(pm, broken.MisnamedArgument(), "argname-plugin")
    assert "\n" not in str(caught.value)  # one line for the CLI


def test_a_plugin_registered_twice_is_a_typed_error() -> None:
    with pytest.raises(PluginError, match="plugin 'again'"):
        _pm(("sample", sample), ("again", sample))


@pytest.mark.parametrize("order", [("a-rival", "b-sample"), ("b-sample", "a-rival")])
def test_registration_order_never_decides(order: tuple[str, str]) -> None:
    plugins = {"a-rival": broken.RivalSeam(), "b-sample": sample}
    pm = _pm(*[(n, plugins[n]) for n in order])
    with pytest.raises(PluginError) as caught:
        seam_registry(pm)
    # the same message whichever plugin registered first: plugins are called in name order
    assert str(caught.value) == "seam 'sample-batch' is registered by both 'a-rival' and 'b-sample'"


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (
            broken.RegistersADict(),
            r"plugin 'bad' registered dict through register_seams, not a Seam",
        ),
        (broken.ReturnsAList(), r"plugin 'bad': register_seams returned list; it must return None"),
        (broken.Raises(), r"plugin 'bad' failed in register_seams: OSError: config file missing"),
        (broken.UnknownFace(), r"plugin 'bad': seam 'odd': request face 'telepathic'"),
        (
            broken.DirectHttpAsAString(),
            r"plugin 'bad': seam 'stringly': direct_http_providers must be a frozenset",
        ),
    ],
    ids=["wrong-type", "returns-a-value", "raises", "unknown-face", "stringly-providers"],
)
def test_a_misbehaving_hook_is_a_typed_error_naming_the_plugin(
    plugin: object, message: str
) -> None:
    with pytest.raises(PluginError, match=message):
        seam_registry(_pm(("bad", plugin)))


# -- register_seams -----------------------------------------------------------------------------


def test_hook_register_seams() -> None:
    registry = seam_registry(_pm(("sample", sample)))
    assert list(registry.seams) == ["default", "sample-batch"]
    assert registry.owners["sample-batch"] == "sample"
    seam = registry.get("sample-batch")
    # the sample's own mechanism comes from its vocabulary contribution
    assert seam.stages == ("default", "nightly-window", "credit-failover")
    assert seam.transport("zai") == "direct-http"
    stages = [
        Stage(mechanism="default", provider="claude"),
        Stage(mechanism="nightly-window", provider="zai"),
    ]
    assert safe_classify(registry, "sample-batch", stages) is stages[1]


def test_a_seam_whose_stage_is_no_mechanism_is_refused() -> None:
    # without the sample's vocabulary, 'nightly-window' is no legacy mechanism
    class SeamOnly:
        @sample.hookimpl
        def register_seams(self, register: Any) -> None:
            register(sample.SEAM)

    with pytest.raises(PluginError, match="stage 'nightly-window' is not a legacy mechanism"):
        seam_registry(_pm(("seam-only", SeamOnly())))


def test_a_raising_classifier_yields_an_unclassified_stage_naming_the_plugin() -> None:
    registry = seam_registry(_pm(("fragile-plugin", broken.RaisingClassifier())))
    got = safe_classify(registry, "fragile", [Stage(mechanism="default", provider="zai")])
    assert got == Stage(
        mechanism=UNCLASSIFIED,
        provider="zai",
        detail="ZeroDivisionError in plugin 'fragile-plugin': classifier bug",
    )


# -- register_vocabulary ------------------------------------------------------------------------


def test_hook_register_vocabulary() -> None:
    vocab = vocabulary(_pm(("sample", sample)))
    assert vocab.roles == DEFAULT_VOCABULARY.roles | {"auditor"}
    assert set(vocab.literal_families) == {"claude-opus", "claude-sonnet", "claude-haiku"}
    assert vocab.satisfied_by("literal_family", "claude-haiku", "claude-haiku-4-5")
    assert not vocab.satisfied_by("literal_family", "claude-haiku", "glm-haiku-1")
    assert "long-context" in vocab.capability_classes
    assert "acme-cloud" in vocab.provider_bindings and "vendor" in vocab.repo_classes
    assert "nightly-window" in vocab.legacy_mechanisms
    assert vocabulary(_pm()) == DEFAULT_VOCABULARY  # nothing leaked into the default


def test_the_same_words_from_two_plugins_are_fine() -> None:
    again = broken.Vocab(DEFAULT_VOCABULARY.as_extension())
    assert vocabulary(_pm(("again", again))) == DEFAULT_VOCABULARY


@pytest.mark.parametrize(
    ("extension", "message"),
    [
        (
            VocabularyExtension(literal_families=(broken.OPUS_AS_HAIKU,)),
            "literal family 'claude-opus' is defined differently by "
            "'rensei_routing.plugins.default.vocabulary' and 'zz-other'",
        ),
        (
            VocabularyExtension(capability_classes=frozenset({"claude-sonnet"})),
            "'claude-sonnet' is a literal family of 'rensei_routing.plugins.default.vocabulary' "
            "and a capability class of 'zz-other'",
        ),
        (
            VocabularyExtension(legacy_mechanisms=frozenset({"unclassified"})),
            "plugin 'zz-other': 'unclassified' is reserved",
        ),
        (
            VocabularyExtension(roles=frozenset({""})),
            "plugin 'zz-other': vocabulary roles must be a set of non-empty names",
        ),
        (
            # "opus" is a Claude CLI alias (Anthropic lane); a plugin cannot make it foreign
            VocabularyExtension(
                model_aliases=(
                    (
                        "OPUS",
                        Provenance(
                            name="zai", pattern="^glm", provider_bindings=frozenset({"zai-harness"})
                        ),
                    ),
                )
            ),
            "model alias 'OPUS' is defined differently by "
            "'rensei_routing.plugins.default.vocabulary' and 'zz-other'",
        ),
    ],
    ids=["family-redefined", "family-and-capability", "reserved", "empty-word", "alias"],
)
def test_a_word_with_another_meaning_is_an_error_naming_both(
    extension: VocabularyExtension, message: str
) -> None:
    with pytest.raises(PluginError, match=re.escape(message)):
        vocabulary(_pm(("zz-other", broken.Vocab(extension))))


def test_a_provenance_redefined_is_an_error_naming_both() -> None:
    from rensei_routing.core.routing.vocabulary import LiteralFamily, Provenance

    loose = Provenance(name="anthropic", pattern=r"^claude", provider_bindings=frozenset({"x"}))
    ext = VocabularyExtension(
        literal_families=(LiteralFamily(name="claude-mini", token="mini", provenance=loose),)
    )
    with pytest.raises(PluginError, match="provenance 'anthropic' is defined differently by"):
        vocabulary(_pm(("zz-other", broken.Vocab(ext))))


# -- register_redaction_patterns ----------------------------------------------------------------


def test_hook_register_redaction_patterns() -> None:
    red = redactor(_pm(("sample", sample)))
    assert red.patterns[: len(DEFAULT_PATTERNS)] == DEFAULT_PATTERNS  # built-ins first, always
    assert red.patterns[-1] is sample.ACME_TOKEN
    doc = {"principal_id": "bot acme_ABCDEFGHIJKLMNOPQRST", "n": 1}
    assert red.redact(doc) == {"principal_id": "bot [REDACTED:acme-token]", "n": 1}
    assert redactor(_pm()).redact(doc) == doc


def test_an_identical_pattern_from_two_plugins_is_kept_once() -> None:
    assert (
        redactor(_pm(("a", sample), ("b", _PatternOnly()))).patterns.count(sample.ACME_TOKEN) == 1
    )


def test_a_pattern_that_matches_a_marker_is_refused() -> None:
    from rensei_routing.core.redact import RedactionPattern

    greedy = RedactionPattern("greedy", re.compile(r"REDACTED"))

    class Greedy:
        @sample.hookimpl
        def register_redaction_patterns(self, register: Any) -> None:
            register(greedy)

    with pytest.raises(PluginError, match=r"plugin 'greedy-plugin'.*matches the marker"):
        redactor(_pm(("greedy-plugin", Greedy())))
    assert not any(p.regex.search(marker("x")) for p in DEFAULT_PATTERNS)


class _PatternOnly:
    @sample.hookimpl
    def register_redaction_patterns(self, register: Any) -> None:
        register(sample.ACME_TOKEN)


# -- register_snapshot_validators / run_validators ----------------------------------------------


def test_hook_register_snapshot_validators() -> None:
    (v,) = snapshot_validators(_pm(("sample", sample)))
    assert (v.name, v.plugin) == ("sample-has-policy-bundle", "sample")
    assert run_validators([v], {"policyBundle": {"policies": []}}) == (
        ValidatorResult(name=v.name, plugin="sample"),
    )
    (failed,) = run_validators([v], {"policyBundle": None})
    assert not failed and failed.problems == ("policyBundle is absent",)


def _check(answer: Any) -> Any:
    def check(sections: Mapping[str, Any]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    return check


@pytest.mark.parametrize(
    ("answer", "problems", "error"),
    [
        ([], (), None),
        (("a", "b"), ("a", "b"), None),
        (KeyError("policyBundle"), (), "KeyError: 'policyBundle'"),
        (None, (), "WrongReturnType: returned NoneType, not a list of strings"),
        ("problem", (), "WrongReturnType: returned str, not a list of strings"),
        ([1], (), "WrongReturnType: returned list, not a list of strings"),
    ],
    ids=["valid", "problems", "raises", "none", "bare-string", "not-strings"],
)
def test_run_validators_a_raising_or_wrong_validator_fails(
    answer: Any, problems: tuple[str, ...], error: str | None
) -> None:
    ok = SnapshotValidator(name="a-ok", check=_check([]), plugin="p")
    under_test = SnapshotValidator(name="b", check=_check(answer), plugin="p")
    results = run_validators([ok, under_test], {"policyBundle": None})
    assert results[0].ok  # one validator's failure never touches another's verdict
    assert results[1] == ValidatorResult(name="b", plugin="p", problems=problems, error=error)
    assert bool(results[1]) == (not problems and error is None)


def test_validators_see_a_read_only_mapping() -> None:
    def meddle(sections: Mapping[str, Any]) -> list[str]:
        sections["policyBundle"] = "x"  # type: ignore[index]
        return []

    sections: dict[str, Any] = {"policyBundle": None}
    (result,) = run_validators([SnapshotValidator(name="m", check=meddle)], sections)
    assert result.error is not None and result.error.startswith("TypeError")
    assert sections == {"policyBundle": None}


def test_two_validators_of_one_name_name_both_plugins() -> None:
    class Again:
        @sample.hookimpl
        def register_snapshot_validators(self, register: Any) -> None:
            register(SnapshotValidator(name="sample-has-policy-bundle", check=_check([])))

    with pytest.raises(PluginError, match="registered by both 'a-sample' and 'b-again'"):
        snapshot_validators(_pm(("a-sample", sample), ("b-again", Again())))


# -- register_commands --------------------------------------------------------------------------


def test_hook_register_commands() -> None:
    commands = plugin_commands(_pm(("sample", sample)), reserved={"init"})
    assert list(commands) == ["sample"]
    assert commands["sample"][0] == "sample"
    with pytest.raises(PluginError, match="plugin 'shadowing': command 'init' is a built-in"):
        plugin_commands(_pm(("shadowing", broken.ShadowsABuiltinCommand())), reserved={"init"})


# -- decision_recorded --------------------------------------------------------------------------


def test_hook_decision_recorded() -> None:
    first, second = sample.SampleObserver(), sample.SampleObserver()
    pm = _pm(("b-observer", second), ("a-observer", first))
    assert notify_recorded(pm, [_record(0), _record(1)]) == ()
    assert [s for s, _ in first.seen] == [0, 1] == [s for s, _ in second.seen]


def test_a_raising_observer_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    failing, after = sample.SampleObserver(fail=True), sample.SampleObserver()
    pm = _pm(("a-failing", failing), ("b-after", after))
    failures = notify_recorded(pm, [_record(3)])
    assert failures == (
        "plugin 'a-failing' failed observing audit record 3: RuntimeError: observer is down",
    )
    assert [r.getMessage() for r in caplog.records] == list(failures)
    assert after.seen == [(3, f"sha256:{3:064d}")]  # the next observer still heard it


# -- the checks plugin authors and `rensei plugins check` run -----------------------------------


def test_stage_sequences_are_ordered_deterministic_and_cover_every_stage() -> None:
    seam = sample.SEAM
    first = list(stage_sequences(seam, count=50, seed=3))
    assert first == list(stage_sequences(seam, count=50, seed=3)) and len(first) == 50
    for stages in first:
        positions = [seam.stages.index(s.mechanism) for s in stages]
        assert positions == sorted(set(positions)) and positions
    assert {s.mechanism for st in first for s in st} == set(seam.stages)


def test_check_classifier_total_names_the_plugin_and_the_failing_input() -> None:
    registry = seam_registry(_pm(("fragile-plugin", broken.RaisingClassifier())))
    with pytest.raises(
        ClassifierError, match=r"plugin 'fragile-plugin': seam 'fragile'.*\[default:"
    ):
        check_classifier_total(registry.get("fragile"), plugin="fragile-plugin")
    assert check_classifier_total(sample.SEAM, count=300) == 300


def test_check_plugin_manager_reports_one_line_per_problem() -> None:
    assert check_plugin_manager(plugin_manager_for(sample, "sample"), "sample") == ()
    pm = _pm(
        ("fragile-plugin", broken.RaisingClassifier()),
        ("shadowing", broken.ShadowsABuiltinCommand()),
    )
    problems = check_plugin_manager(pm, "fragile-plugin", reserved_commands={"init"})
    assert len(problems) == 2
    assert problems[0].startswith("commands: plugin 'shadowing'")
    assert problems[1].startswith("seam fragile: plugin 'fragile-plugin': seam 'fragile'")
