"""Building the plugin manager: the built-in plugins, the installed ones read from their entry
points (:mod:`.entrypoints`) and imported at once or lazily, when a hook they may implement is
first called (:meth:`RenseiPluginManager.load_pending`). Whatever a plugin does wrong while it
loads is a :class:`~rensei_routing.errors.PluginError` naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection

import pluggy

from ..errors import PluginError
from . import hookspecs
from .entrypoints import (
    HOOKS_GROUP,
    LOAD_PLUGINS_ENV,
    InstalledPlugin,
    allowed_plugin_names,
    installed_plugins,
    may_implement,
)
from .info import DEFAULT_PLUGINS

__all__ = [
    "LOAD_PLUGINS_ENV",
    "RenseiPluginManager",
    "allowed_plugin_names",
    "check_pending",
    "get_plugin_manager",
    "one_line",
    "register_plugin",
]


class RenseiPluginManager(pluggy.PluginManager):
    """A pluggy manager that also remembers which distribution each installed plugin came from,
    and holds the installed plugins not imported yet (a lazy manager imports each when a hook it
    may implement is first called: :meth:`load_pending`)."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        #: plugin name -> (distribution name, version), for plugins loaded from entry points.
        self.distributions: dict[str, tuple[str, str]] = {}
        #: plugin name -> its entry point, for installed plugins not imported yet.
        self.pending: dict[str, InstalledPlugin] = {}
        self._broken: PluginError | None = None

    def load_pending(self, hook: str | None = None) -> None:
        """Import and register, in name order, every pending plugin that may implement
        ``hook`` (``None``: every pending plugin). A failure is kept: every later call raises
        it again, as a manager that failed to build would.

        Raises:
            PluginError: naming the plugin that cannot be imported or registered, implements
                a hook that does not exist, or implements other hooks than it declares.
        """
        if self._broken is not None:
            raise self._broken
        due = [p for n, p in sorted(self.pending.items()) if hook is None or may_implement(p, hook)]
        try:
            for plugin in due:
                _load_one(self, plugin)
                del self.pending[plugin.name]
            if due:
                check_pending(self)
                for plugin in due:
                    _check_declared(self, plugin)
        except PluginError as e:
            self._broken = e
            raise


def one_line(error: Exception) -> str:
    """pluggy's multi-line messages as one line (the CLI prints one line per error)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def register_plugin(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    """Register ``plugin`` under ``name`` (call :func:`check_pending` when done registering).

    Raises:
        PluginError: a hook implementation has the wrong arguments, or the name or the plugin
            object is already registered.
    """
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {name!r}: {one_line(e)}") from e
    except ValueError as e:
        raise PluginError(f"plugin {name!r} cannot be registered: {one_line(e)}") from e


def check_pending(pm: pluggy.PluginManager) -> None:
    """Raises: PluginError naming the plugin that implements a hook that does not exist."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        name = pm.get_name(e.plugin) or repr(e.plugin)
        raise PluginError(f"plugin {name!r}: {one_line(e)}") from e


def _where(plugin: InstalledPlugin) -> str:
    return f" ({plugin.distribution} {plugin.version})" if plugin.distribution else ""


def _load_one(pm: RenseiPluginManager, plugin: InstalledPlugin) -> None:
    """Import the object ``plugin`` names (``module[:attr]``) and register it."""
    module, _, attr = plugin.value.split("[", 1)[0].partition(":")
    try:
        found: object = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            found = getattr(found, part)
    except Exception as e:  # an installed plugin that cannot even be imported
        raise PluginError(
            f"plugin {plugin.name!r}{_where(plugin)} failed to load: {type(e).__name__}: "
            f"{one_line(e)} (skip it with --no-plugins or {LOAD_PLUGINS_ENV})"
        ) from e
    register_plugin(pm, found, plugin.name)


def _check_declared(pm: pluggy.PluginManager, plugin: InstalledPlugin) -> None:
    """Raises: PluginError when the hooks ``plugin`` implements are not those it declares."""
    if plugin.hooks is None:
        return
    obj = pm.get_plugin(plugin.name)
    actual = {c.name for c in pm.get_hookcallers(obj) or []} if obj is not None else set()
    if actual != plugin.hooks:
        raise PluginError(
            f"plugin {plugin.name!r}{_where(plugin)} implements "
            f"{', '.join(sorted(actual)) or 'no hook'} but declares "
            f"{', '.join(sorted(plugin.hooks)) or 'none'} (entry point group {HOOKS_GROUP})"
        )


def _load_entrypoints(
    pm: RenseiPluginManager, names: Collection[str] | None, *, lazy: bool
) -> None:
    for plugin in installed_plugins():
        if names is not None and plugin.name not in names:
            continue
        if pm.has_plugin(plugin.name) or plugin.name in pm.pending:
            other = " ".join(pm.distributions.get(plugin.name, ("a built-in plugin",)))
            raise PluginError(f"plugin {plugin.name!r}{_where(plugin)}: {other} has the same name")
        pm.pending[plugin.name] = plugin
        if plugin.distribution is not None:
            pm.distributions[plugin.name] = (plugin.distribution, plugin.version or "")
    if not lazy:
        pm.load_pending()


def get_plugin_manager(
    *, load_entrypoints: bool = True, names: Collection[str] | None = None, lazy: bool = False
) -> RenseiPluginManager:
    """A manager holding the built-in plugins and, unless ``load_entrypoints`` is false, the
    installed ones: those in ``names`` if given, else those ``RENSEI_ROUTING_LOAD_PLUGINS``
    allows (unset = all, empty = none). A name that matches no installed plugin loads nothing.
    With ``lazy``, installed plugins are only read from their entry points here, and each is
    imported when a hook it may implement is first called (the CLI's way; errors then).

    Raises:
        PluginError: naming the plugin that cannot be imported or registered, or implements a
            hook that does not exist (a misspelled name).
    """
    pm = RenseiPluginManager()
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        register_plugin(pm, importlib.import_module(name), name)
    if load_entrypoints:
        _load_entrypoints(pm, allowed_plugin_names() if names is None else names, lazy=lazy)
    check_pending(pm)
    return pm
