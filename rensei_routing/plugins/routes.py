"""Applying an enforced route to a spawn: asks the plugin that registered the spawn's seam
(hook ``apply_enforced_route``) to rewrite the seam's request, and refuses, typed, an enforced
route nobody applies. Adapter over :mod:`.manager`; no I/O, never spawns anything.

Only the seam's own plugin is asked, so no other plugin can rewrite a spawn it does not own
(plugins compose: docs/plugins.md), and it is shown its own deep copy of the request, so the
caller's request is never changed, whatever the plugin does.
"""

from __future__ import annotations

import copy
from typing import Any

import pluggy

from ..core.enforce.route import ENFORCED, EnforcedRoute
from ..errors import (
    InputError,
    PluginError,
    RenseiRoutingError,
    RouteNotAppliedError,
    SeamRequestError,
)
from .loading import one_line
from .manager import SeamRegistry, _implementations

__all__ = ["HOOK", "apply_route"]

#: The hook this module calls.
HOOK = "apply_enforced_route"


def apply_route(
    pm: pluggy.PluginManager,
    registry: SeamRegistry,
    seam: str,
    route: EnforcedRoute,
    request: Any,
) -> Any:
    """``request`` as the plugin that registered ``seam`` rewrites it for ``route``.

    A ``legacy-compatible`` route needs nothing applied: when the seam's plugin does not
    implement the hook, or answers ``None``, the caller's own ``request`` comes back. An
    ``enforced`` route must be applied by the seam's plugin.

    Raises:
        UnknownSeamError: no seam of that name is registered.
        InputError: ``route`` is not an :class:`EnforcedRoute`.
        SeamRequestError: the plugin refused the request's shape (raised by the plugin), or
            the request cannot be copied.
        RouteNotAppliedError: an enforced route at a seam whose plugin does not implement the
            hook or answers ``None`` (the spawn must not run).
        PluginError: the plugin raised anything that is not a rensei-routing error.
    """
    registry.get(seam)
    if not isinstance(route, EnforcedRoute):
        raise InputError(f"an enforced route is an EnforcedRoute, not {type(route).__name__}")
    owner = registry.owners.get(seam, "?")
    impl = next((i for name, i in _implementations(pm, HOOK) if name == owner), None)
    if impl is None:
        return _nothing_applied(request, route, seam, f"plugin {owner!r} implements no {HOOK}")
    try:
        shown = copy.deepcopy(request)
    except Exception as e:  # a request of objects that cannot be copied is not a request
        raise SeamRequestError(
            f"the request at seam {seam!r} cannot be copied: {type(e).__name__}: {one_line(e)}"
        ) from e
    kwargs = {"seam": seam, "route": route, "request": shown}
    try:
        answer = impl.function(*[kwargs[a] for a in impl.argnames])
    except RenseiRoutingError:
        raise
    except Exception as e:
        raise PluginError(
            f"plugin {owner!r} failed in {HOOK} at seam {seam!r}: {type(e).__name__}: {one_line(e)}"
        ) from e
    if answer is None:
        return _nothing_applied(request, route, seam, f"plugin {owner!r} answered None")
    return answer


def _nothing_applied(request: Any, route: EnforcedRoute, seam: str, why: str) -> Any:
    if route.kind != ENFORCED:
        return request
    raise RouteNotAppliedError(
        f"no plugin applies the enforced route at seam {seam!r} ({why}); the spawn must not run"
    )
