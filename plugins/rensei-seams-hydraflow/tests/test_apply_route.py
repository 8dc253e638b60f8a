"""An enforced route applied at the four HydraFlow seams through the host's own manager
(``rensei_routing.plugins.routes.apply_route``): the agentic seams' argv gets the route's
``--model``, the one-shot seam's request mapping its ``model``; the caller's request is never
changed; a request the seam cannot rewrite is a typed refusal."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rensei_seams_hydraflow import SEAMS
from rensei_seams_hydraflow.routes import ARGV_SEAMS, MAPPING_SEAMS

from rensei_routing.core.enforce.route import ENFORCED, LEGACY_COMPATIBLE, EnforcedRoute
from rensei_routing.errors import RouteNotAppliedError, SeamRequestError, UnknownSeamError
from rensei_routing.plugins.manager import RenseiPluginManager, seam_registry
from rensei_routing.plugins.routes import apply_route

ENFORCED_MODEL = "claude-opus-4-1"


def _route(kind: str = ENFORCED, model: str | None = ENFORCED_MODEL) -> EnforcedRoute:
    return EnforcedRoute(
        kind=kind,
        provider="gateway",
        account_id="gw-main",
        model=model,
        policy_id="pol-1" if kind == ENFORCED else None,
        revision=3,
        policy_hash="ab" * 32,
        decision_id="dec-1",
        seq=7,
    )


def _apply(
    pm: RenseiPluginManager, seam: str, request: Any, route: EnforcedRoute | None = None
) -> Any:
    return apply_route(pm, seam_registry(pm), seam, route or _route(), request)


def test_the_plugin_serves_exactly_its_four_seams() -> None:
    assert set(SEAMS) == ARGV_SEAMS | MAPPING_SEAMS
    assert not ARGV_SEAMS & MAPPING_SEAMS
    assert {s for s in SEAMS if SEAMS[s].request_face == "one-shot"} == MAPPING_SEAMS


_ARGV_CASES = [
    (
        ["claude", "-p", "fix it", "--model", "sonnet"],
        ["claude", "-p", "fix it", "--model", ENFORCED_MODEL],
    ),
    (
        ["claude", "--model=sonnet", "-p", "fix it"],
        ["claude", f"--model={ENFORCED_MODEL}", "-p", "fix it"],
    ),
    (["claude", "-p", "fix it"], ["claude", "-p", "fix it", "--model", ENFORCED_MODEL]),
    (
        ["claude", "-p", "--", "--model", "x"],
        ["claude", "-p", "--model", ENFORCED_MODEL, "--", "--model", "x"],
    ),
    (
        ["claude", "--model", "a", "--verbose", "--model=b"],
        ["claude", "--model", ENFORCED_MODEL, "--verbose", f"--model={ENFORCED_MODEL}"],
    ),
    (["--model"], ["--model", "--model", ENFORCED_MODEL]),
    (("claude", "--model", "haiku"), ["claude", "--model", ENFORCED_MODEL]),
    (["claude", "--models", "x"], ["claude", "--models", "x", "--model", ENFORCED_MODEL]),
]


@pytest.mark.parametrize("seam", sorted(ARGV_SEAMS))
@pytest.mark.parametrize(
    ("argv", "expected"),
    _ARGV_CASES,
    ids=[
        "space-form",
        "equals-form",
        "absent-added",
        "operands-untouched",
        "every-occurrence",
        "argv0-is-the-program",
        "tuple",
        "a-longer-flag-is-another-flag",
    ],
)
def test_an_agentic_seam_rewrites_the_childs_model(
    rensei_pm: RenseiPluginManager, seam: str, argv: list[str], expected: list[str]
) -> None:
    before = copy.deepcopy(argv)
    got = _apply(rensei_pm, seam, argv)
    assert got == expected
    assert argv == before, "the caller's argv was changed"
    assert got is not argv


@pytest.mark.parametrize("seam", sorted(ARGV_SEAMS))
@pytest.mark.parametrize(
    "route",
    [_route(LEGACY_COMPATIBLE, "legacy-model"), _route(ENFORCED, None)],
    ids=["legacy", "no-model"],
)
@pytest.mark.parametrize(
    "argv",
    [["claude", "--model", "sonnet", "-p", "x"], ["claude", "-p", "x"]],
    ids=["set", "unset"],
)
def test_a_route_naming_no_model_to_apply_keeps_the_argv(
    rensei_pm: RenseiPluginManager, seam: str, route: EnforcedRoute, argv: list[str]
) -> None:
    assert _apply(rensei_pm, seam, argv, route) == argv


def test_the_one_shot_seam_sets_the_requests_model(rensei_pm: RenseiPluginManager) -> None:
    request = {"model": "glm-5.3", "messages": [{"role": "user", "content": "hi"}], "n": 1}
    before = copy.deepcopy(request)
    got = _apply(rensei_pm, "lightweight-agent", request)
    assert got == {**before, "model": ENFORCED_MODEL}
    assert request == before, "the caller's mapping was changed"
    assert got is not request
    got["messages"].append("more")
    assert request == before, "the answer shares the caller's nested values"


@pytest.mark.parametrize(
    "route",
    [_route(LEGACY_COMPATIBLE, "other"), _route(ENFORCED, None)],
    ids=["legacy", "no-model"],
)
def test_the_one_shot_seam_keeps_the_model_for_a_route_naming_none(
    rensei_pm: RenseiPluginManager, route: EnforcedRoute
) -> None:
    request = {"model": "glm-5.3", "prompt": "x"}
    assert _apply(rensei_pm, "lightweight-agent", request, route) == request


_BAD_ARGV = [
    ("claude --model x", "not str"),
    (b"claude", "not bytes"),
    ({"argv": ["claude"]}, "not dict"),
    (None, "not NoneType"),
    ([], "is empty"),
    (["claude", 3], r"argv\[1\] is int"),
    (["claude", "--model"], r"--model at argv\[1\] has no value"),
    (["claude", "--model", "--verbose"], r"--model at argv\[1\] has no value"),
    (["claude", "--model", "--"], r"--model at argv\[1\] has no value"),
    (["claude", "--model", ""], r"--model at argv\[1\] has no value"),
    (["claude", "--model="], r"'--model=' at argv\[1\] has no value"),
]


@pytest.mark.parametrize("seam", sorted(ARGV_SEAMS))
@pytest.mark.parametrize(
    "route", [_route(), _route(LEGACY_COMPATIBLE, "m")], ids=["enforced", "legacy"]
)
@pytest.mark.parametrize(
    ("argv", "why"),
    _BAD_ARGV,
    ids=[
        "a-string",
        "bytes",
        "a-mapping",
        "none",
        "empty",
        "not-str",
        "model-last",
        "model-then-option",
        "model-then-end",
        "model-empty",
        "equals-empty",
    ],
)
def test_an_argv_the_seam_cannot_rewrite_is_refused_and_left_as_it_was(
    rensei_pm: RenseiPluginManager, seam: str, route: EnforcedRoute, argv: object, why: str
) -> None:
    before = copy.deepcopy(argv)
    with pytest.raises(SeamRequestError, match=why):
        _apply(rensei_pm, seam, argv, route)
    assert argv == before


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"prompt": "x"}, "names no model"),
        ({"model": None}, "names no model"),
        ({"model": ""}, "names no model"),
        ({"model": 5}, "names no model"),
        ({1: "x", "model": "m"}, "keys must be str"),
        (["lightweight", "--model", "m"], "not list"),
        ("model=m", "not str"),
    ],
    ids=["no-model", "model-none", "model-empty", "model-int", "int-key", "an-argv", "a-string"],
)
@pytest.mark.parametrize(
    "route", [_route(), _route(LEGACY_COMPATIBLE, "m")], ids=["enforced", "legacy"]
)
def test_a_one_shot_request_without_a_model_is_refused_and_left_as_it_was(
    rensei_pm: RenseiPluginManager, request_: object, why: str, route: EnforcedRoute
) -> None:
    before = copy.deepcopy(request_)
    with pytest.raises(SeamRequestError, match=why):
        _apply(rensei_pm, "lightweight-agent", request_, route)
    assert request_ == before


@pytest.mark.parametrize("model", ["", "  ", "--dangerously-skip-permissions", "-x"])
@pytest.mark.parametrize("seam", sorted(SEAMS))
def test_a_route_model_that_is_no_model_name_is_refused(
    rensei_pm: RenseiPluginManager, seam: str, model: str
) -> None:
    request: object = {"model": "m"} if seam in MAPPING_SEAMS else ["claude", "-p", "x"]
    with pytest.raises(SeamRequestError, match="is not a model name"):
        _apply(rensei_pm, seam, request, _route(ENFORCED, model))


def test_the_default_seam_has_no_applier_so_an_enforced_route_there_is_refused(
    rensei_pm: RenseiPluginManager,
) -> None:
    argv = ["agent", "--model", "m"]
    with pytest.raises(RouteNotAppliedError, match=r"seam .default..*the spawn must not run"):
        _apply(rensei_pm, "default", argv)
    # a legacy-compatible route needs nothing applied: the spawn's own request comes back
    assert _apply(rensei_pm, "default", argv, _route(LEGACY_COMPATIBLE, "m")) is argv


def test_an_unknown_seam_is_refused(rensei_pm: RenseiPluginManager) -> None:
    with pytest.raises(UnknownSeamError, match="no seam named 'nightly'"):
        _apply(rensei_pm, "nightly", ["claude"])


def test_pluggys_own_firstresult_call_answers_none_for_a_foreign_seam(
    rensei_pm: RenseiPluginManager,
) -> None:
    hook = rensei_pm.hook.apply_enforced_route
    assert hook(seam="default", route=_route(), request=["x"]) is None
    got = hook(seam="streaming-agent", route=_route(), request=["claude"])
    assert got == ["claude", "--model", ENFORCED_MODEL]


_TOKENS = st.sampled_from(
    ["-p", "fix", "--verbose", "--output-format", "json", "--model", "--model=x", "m1", "--", "-"]
)


def _well_formed(argv: list[str]) -> bool:
    end = argv.index("--", 1) if "--" in argv[1:] else len(argv)
    for i in range(1, end):
        if argv[i] == "--model" and (i + 1 >= end or argv[i + 1].startswith("-")):
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(_TOKENS, min_size=0, max_size=10).map(lambda t: ["claude", *t]))
def test_the_rewritten_argv_runs_the_route_model_and_nothing_else_moves(argv: list[str]) -> None:
    from rensei_seams_hydraflow.routes import rewrite_argv

    if not _well_formed(argv):
        with pytest.raises(SeamRequestError):
            rewrite_argv("agentic-runner", argv, ENFORCED_MODEL)
        return
    got = rewrite_argv("agentic-runner", argv, ENFORCED_MODEL)
    end = got.index("--", 1) if "--" in got[1:] else len(got)
    options, operands = got[:end], got[end:]
    # every model the child can read before the operands is the route's
    values = [options[i + 1] for i in range(1, len(options) - 1) if options[i] == "--model"]
    values += [t.partition("=")[2] for t in options[1:] if t.startswith("--model=")]
    assert values and set(values) == {ENFORCED_MODEL}
    # the operands, the program and every other token are where they were
    src_end = argv.index("--", 1) if "--" in argv[1:] else len(argv)
    assert operands == argv[src_end:]
    assert got[0] == argv[0]
    # applying twice is applying once
    assert rewrite_argv("agentic-runner", got, ENFORCED_MODEL) == got
    if len(got) == len(argv) + 2:  # added, not rewritten: the rest is the original in order
        assert got[:src_end] + got[src_end + 2 :] == argv
