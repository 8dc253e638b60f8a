"""Plugins: the hook specification (``hookspecs``), the manager and the contributions it collects
(``manager``), what is registered (``info``), the checks a plugin author runs (``checks``), the
built-in plugins (``default``) and the pytest helpers (``testing``, also the ``rensei_routing``
pytest plugin), the installed plugins as their entry points declare them (``entrypoints``),
building a manager that imports each only when needed (``loading``), and applying an enforced
route to a spawn through the seam's own plugin (``routes``).

The hook specification is the contract with plugin authors: hooks are called with keywords,
contributions are sorted by a stable key, never by registration order. The package re-exports
the names ``rensei_routing.plugins`` held as a module before the re-layout (now ``manager``'s and
``info``'s).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .info import DEFAULT_PLUGINS, HOOK_NAMES, PluginInfo, plugin_infos
    from .manager import (
        LOAD_PLUGINS_ENV,
        UNCLASSIFIED,
        RenseiPluginManager,
        SeamRegistry,
        allowed_plugin_names,
        authorizers,
        check_pending,
        classifier_problem,
        get_plugin_manager,
        has_observers,
        notify_recorded,
        plugin_commands,
        redactor,
        register_plugin,
        safe_classify,
        seam_registry,
        snapshot_validators,
        vocabulary,
    )

#: Public name -> the module defining it, imported on first use (PEP 562): importing
#: ``rensei_routing.plugins.entrypoints`` (the CLI's start-up) imports neither pluggy nor the core.
_LAZY: dict[str, str] = {
    **{n: ".info" for n in ("DEFAULT_PLUGINS", "HOOK_NAMES", "PluginInfo", "plugin_infos")},
}


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name, ".manager" if name in __all__ else None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "DEFAULT_PLUGINS",
    "HOOK_NAMES",
    "LOAD_PLUGINS_ENV",
    "UNCLASSIFIED",
    "PluginInfo",
    "RenseiPluginManager",
    "SeamRegistry",
    "allowed_plugin_names",
    "authorizers",
    "check_pending",
    "classifier_problem",
    "get_plugin_manager",
    "has_observers",
    "notify_recorded",
    "plugin_commands",
    "plugin_infos",
    "redactor",
    "register_plugin",
    "safe_classify",
    "seam_registry",
    "snapshot_validators",
    "vocabulary",
]
