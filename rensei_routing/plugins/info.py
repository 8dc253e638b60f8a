"""What is registered: which plugins are built in (:data:`DEFAULT_PLUGINS`), each plugin's name,
the distribution it came from and the hooks it implements (:func:`plugin_infos`, what ``rensei
plugins list`` and the doctor show), and every hook name of the specification. Reads a manager
(importing its pending installed plugins, so every one is shown); must not build one nor call a
hook (that is :mod:`.manager`'s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pluggy

from . import hookspecs

__all__ = ["DEFAULT_PLUGINS", "HOOK_NAMES", "PluginInfo", "plugin_infos"]

#: Built-in plugins, registered like any installed one: they contribute the shipped defaults.
DEFAULT_PLUGINS: Final[tuple[str, ...]] = (
    "rensei_routing.plugins.default.seams",
    "rensei_routing.plugins.default.vocabulary",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginInfo:
    """One registered plugin: its name, where it came from, and the hooks it implements."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "builtin": self.builtin,
        }


def _own_version() -> str | None:
    import importlib.metadata  # only to list plugins: a command that merely uses them skips it

    try:
        return importlib.metadata.version("rensei-routing")
    except importlib.metadata.PackageNotFoundError:
        return None


def plugin_infos(pm: pluggy.PluginManager) -> tuple[PluginInfo, ...]:
    """Every registered plugin, sorted by name; a lazy manager's pending plugins are imported
    first. Raises: PluginError (a pending plugin fails to load)."""
    load_pending = getattr(pm, "load_pending", None)
    if callable(load_pending):
        load_pending()
    dists: Mapping[str, tuple[str, str]] = getattr(pm, "distributions", {})
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda np: np[0]):
        if plugin is None:
            continue
        builtin = name in DEFAULT_PLUGINS
        dist, version = (
            ("rensei-routing", _own_version()) if builtin else dists.get(name, (None, None))
        )
        callers = pm.get_hookcallers(plugin) or []
        out.append(
            PluginInfo(
                name=name,
                distribution=dist,
                version=version,
                hooks=tuple(sorted(c.name for c in callers)),
                builtin=builtin,
            )
        )
    return tuple(out)


#: Every hook name of :mod:`.hookspecs` (the docs meta-test checks each).
HOOK_NAMES: Final[tuple[str, ...]] = tuple(
    sorted(n for n, f in vars(hookspecs).items() if hasattr(f, "rensei_routing_spec"))
)
