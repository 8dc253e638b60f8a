"""The plugin manager: built-in plugins, installed entry points, and the collected contributions.

Adapter: loads setuptools entry points (group ``rensei_routing``) only when asked; library
modules never load plugins at import. Contributions are collected through ``register``
callbacks, sorted by name, and a name claimed by two plugins is a typed error naming both.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import pluggy

from . import hookspecs
from .core.shadow import Seam, Stage
from .errors import InputError, PluginError, UnknownSeamError

__all__ = [
    "DEFAULT_PLUGINS",
    "UNCLASSIFIED",
    "SeamRegistry",
    "get_plugin_manager",
    "safe_classify",
    "seam_registry",
]

#: The mechanism of a spawn whose seam classifier raised or answered nonsense.
UNCLASSIFIED: Final = "unclassified"
_MAX_DETAIL: Final = 1024

#: Built-in plugins, registered like any installed one.
DEFAULT_PLUGINS: Final[tuple[str, ...]] = ("rensei_routing.default_plugins.seams",)

#: Comma list of installed plugin (entry point) names to load; empty = none; unset = all.
LOAD_PLUGINS_ENV: Final = "RENSEI_ROUTING_LOAD_PLUGINS"


def get_plugin_manager(*, load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A manager holding the built-in plugins and, unless ``load_entrypoints`` is false, the
    installed ones (restricted by ``RENSEI_ROUTING_LOAD_PLUGINS``).

    Raises:
        PluginError: a plugin implements a hook that does not exist (a misspelled name).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    if load_entrypoints:
        allowed = os.environ.get(LOAD_PLUGINS_ENV)
        if allowed is None:
            pm.load_setuptools_entrypoints(hookspecs.PROJECT)
        else:
            for name in filter(None, (n.strip() for n in allowed.split(","))):
                pm.load_setuptools_entrypoints(hookspecs.PROJECT, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {e.plugin!r}: {e}") from e
    return pm


@dataclass(frozen=True, slots=True)
class SeamRegistry:
    """Every registered seam by name, with the plugin that registered it."""

    seams: Mapping[str, Seam]
    owners: Mapping[str, str]

    def get(self, name: str) -> Seam:
        """Raises: UnknownSeamError."""
        try:
            return self.seams[name]
        except KeyError:
            known = ", ".join(sorted(self.seams)) or "none"
            raise UnknownSeamError(f"no seam named {name!r} (registered: {known})") from None


def seam_registry(pm: pluggy.PluginManager) -> SeamRegistry:
    """Collect ``register_seams`` from every plugin, sorted by seam name.

    Raises:
        PluginError: two plugins register one seam name, or a plugin registers a non-Seam.
    """
    seams: dict[str, Seam] = {}
    owners: dict[str, str] = {}
    for impl in pm.hook.register_seams.get_hookimpls():
        plugin = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(seam: Seam, plugin: str = plugin) -> None:
            if not isinstance(seam, Seam):
                raise PluginError(f"plugin {plugin!r} registered {type(seam).__name__}, not a Seam")
            if seam.name in seams:
                raise PluginError(
                    f"seam {seam.name!r} is registered by both {owners[seam.name]!r} and {plugin!r}"
                )
            seams[seam.name] = seam
            owners[seam.name] = plugin

        impl.function(register=register)
    ordered = sorted(seams)
    return SeamRegistry(
        MappingProxyType({n: seams[n] for n in ordered}),
        MappingProxyType({n: owners[n] for n in ordered}),
    )


def safe_classify(registry: SeamRegistry, seam_name: str, stages: Sequence[Stage]) -> Stage:
    """The stage that decided a spawn's route, by the seam's own classifier; never lets a plugin
    break the spawn.

    A classifier that raises (any ``Exception``), returns something other than a
    :class:`Stage`, or returns a stage whose mechanism is not among the stages it was given,
    yields ``Stage(mechanism="unclassified", provider=<the last stage's provider>,
    detail="<what went wrong> in plugin '<owner>': ...")``, so the shadow record says so.

    Raises:
        UnknownSeamError: no seam of that name is registered (the caller's mistake).
        InputError: ``stages`` is empty (a legacy route names at least one stage).
    """
    seam = registry.get(seam_name)
    if not stages:
        raise InputError("a legacy route must name at least one stage")
    owner = registry.owners.get(seam_name, "?")
    try:
        result: object = seam.classifier(stages)
    except Exception as e:  # a plugin must never break a spawn
        problem = f"{type(e).__name__} in plugin {owner!r}: {e}"
    else:
        if not isinstance(result, Stage):
            problem = (
                f"WrongReturnType in plugin {owner!r}: classifier of seam {seam_name!r} "
                f"returned {type(result).__name__}, not a Stage"
            )
        elif result.mechanism not in {s.mechanism for s in stages}:
            problem = (
                f"WrongReturnValue in plugin {owner!r}: classifier of seam {seam_name!r} "
                f"named mechanism {result.mechanism!r}, which is not among the stages applied"
            )
        else:
            return result
    return Stage(mechanism=UNCLASSIFIED, provider=stages[-1].provider, detail=problem[:_MAX_DETAIL])
