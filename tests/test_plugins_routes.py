"""Hook ``apply_enforced_route`` at the library level (``plugins.routes.apply_route``): only the
seam's own plugin is asked, it is shown its own copy of the request, an enforced route nobody
applies is refused typed, and a plugin that raises is a PluginError naming it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rensei_routing import hookimpl
from rensei_routing.core.enforce.route import ENFORCED, LEGACY_COMPATIBLE, EnforcedRoute
from rensei_routing.core.shadow.compare import Seam
from rensei_routing.errors import (
    InputError,
    PluginError,
    RouteNotAppliedError,
    SeamRequestError,
    UnknownSeamError,
)
from rensei_routing.plugins.manager import (
    RenseiPluginManager,
    check_pending,
    get_plugin_manager,
    register_plugin,
    seam_registry,
)
from rensei_routing.plugins.routes import apply_route


def _route(kind: str = ENFORCED, model: str | None = "opus") -> EnforcedRoute:
    return EnforcedRoute(
        kind=kind,
        provider="gateway",
        account_id=None,
        model=model,
        policy_id="p" if kind == ENFORCED else None,
        revision=1,
        policy_hash="00" * 32,
        decision_id="d",
        seq=0,
    )


class SeamPlugin:
    """Registers one seam and applies a route to its request mapping, changing its own copy
    in place (allowed: it is the plugin's copy)."""

    def __init__(self, seam: str) -> None:
        self.seam = seam
        self.asked: list[str] = []

    @hookimpl
    def register_seams(self, register: Any) -> None:
        register(Seam(name=self.seam, request_face="agentic", stages=("default",)))

    @hookimpl
    def apply_enforced_route(self, seam: str, route: EnforcedRoute, request: Any) -> Any:
        self.asked.append(seam)
        if seam != self.seam:
            return None
        if not isinstance(request, dict):
            raise SeamRequestError(f"seam {seam!r} takes a mapping")
        request["model"] = route.model
        request["nested"]["touched"] = True
        return request


class Meddler:
    """Answers for every seam, its own or not: must never be asked for another's."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def apply_enforced_route(self, seam: str, request: Any) -> Any:
        self.asked.append(seam)
        return {"model": "hijacked"}


class Raising:
    @hookimpl
    def register_seams(self, register: Any) -> None:
        register(Seam(name="fragile", request_face="agentic", stages=("default",)))

    @hookimpl
    def apply_enforced_route(self, seam: str, route: EnforcedRoute, request: Any) -> Any:
        raise ZeroDivisionError("applier bug")


class SeamOnly:
    @hookimpl
    def register_seams(self, register: Any) -> None:
        register(Seam(name="bare", request_face="agentic", stages=("default",)))


def _pm(*plugins: tuple[str, object]) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    for name, plugin in plugins:
        register_plugin(pm, plugin, name)
    check_pending(pm)
    return pm


def _request() -> dict[str, Any]:
    return {"model": "sonnet", "nested": {"touched": False}}


def test_hook_apply_enforced_route() -> None:
    acme = SeamPlugin("acme-run")
    # 'aaa-meddler' sorts first: pluggy's firstresult (LIFO) or name order would ask it first
    meddler = Meddler()
    pm = _pm(("acme", acme), ("aaa-meddler", meddler))
    request = _request()
    got = apply_route(pm, seam_registry(pm), "acme-run", _route(), request)
    assert got == {"model": "opus", "nested": {"touched": True}}
    assert request == _request(), "the plugin changed the caller's request"
    assert acme.asked == ["acme-run"]
    assert meddler.asked == [], "a plugin was asked to rewrite a seam it does not own"


def test_a_legacy_compatible_route_is_still_applied_by_the_seams_plugin() -> None:
    acme = SeamPlugin("acme-run")
    pm = _pm(("acme", acme))
    got = apply_route(
        pm, seam_registry(pm), "acme-run", _route(LEGACY_COMPATIBLE, "sonnet"), _request()
    )
    assert got["model"] == "sonnet"
    assert acme.asked == ["acme-run"]


def test_an_enforced_route_at_a_seam_whose_plugin_applies_none_is_refused() -> None:
    pm = _pm(("bare-plugin", SeamOnly()), ("aaa-meddler", Meddler()))
    request = ["agent", "--model", "m"]
    with pytest.raises(RouteNotAppliedError, match=r"seam 'bare'.*'bare-plugin' implements no"):
        apply_route(pm, seam_registry(pm), "bare", _route(), request)
    assert request == ["agent", "--model", "m"]
    # nothing to apply for a legacy-compatible route: the caller's own request comes back
    legacy = _route(LEGACY_COMPATIBLE, "m")
    assert apply_route(pm, seam_registry(pm), "bare", legacy, request) is request


def test_an_owner_answering_none_for_its_own_seam_is_refused_for_an_enforced_route() -> None:
    class Shy(SeamPlugin):
        @hookimpl
        def apply_enforced_route(self, seam: str, route: EnforcedRoute, request: Any) -> Any:
            return None

    pm = _pm(("shy", Shy("shy-run")))
    with pytest.raises(RouteNotAppliedError, match="'shy' answered None"):
        apply_route(pm, seam_registry(pm), "shy-run", _route(), _request())
    request = _request()
    assert (
        apply_route(pm, seam_registry(pm), "shy-run", _route(LEGACY_COMPATIBLE), request) is request
    )


def test_a_plugin_that_raises_is_a_plugin_error_naming_it() -> None:
    pm = _pm(("fragile-plugin", Raising()))
    with pytest.raises(
        PluginError,
        match="'fragile-plugin' failed in apply_enforced_route at seam 'fragile': "
        "ZeroDivisionError: applier bug",
    ):
        apply_route(pm, seam_registry(pm), "fragile", _route(), _request())


def test_a_plugin_refusing_the_requests_shape_raises_its_typed_error() -> None:
    pm = _pm(("acme", SeamPlugin("acme-run")))
    with pytest.raises(SeamRequestError, match="takes a mapping"):
        apply_route(pm, seam_registry(pm), "acme-run", _route(), ["argv"])


def test_a_request_that_cannot_be_copied_is_refused() -> None:
    pm = _pm(("acme", SeamPlugin("acme-run")))
    with pytest.raises(SeamRequestError, match="cannot be copied"):
        apply_route(pm, seam_registry(pm), "acme-run", _route(), {"lock": threading.Lock()})


def test_an_unknown_seam_and_a_non_route_are_refused() -> None:
    pm = _pm(("acme", SeamPlugin("acme-run")))
    registry = seam_registry(pm)
    with pytest.raises(UnknownSeamError):
        apply_route(pm, registry, "nope", _route(), _request())
    with pytest.raises(InputError, match="not dict"):
        apply_route(pm, registry, "acme-run", _route().to_dict(), _request())  # type: ignore[arg-type]
