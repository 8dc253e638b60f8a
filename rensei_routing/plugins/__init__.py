"""Plugins: the hook specification (``hookspecs``), the manager and the contributions it collects
(``manager``), what is registered (``info``), the checks a plugin author runs (``checks``), the
built-in plugins (``default``) and the pytest helpers (``testing``, also the ``rensei_routing``
pytest plugin).

The hook specification is the contract with plugin authors: hooks are called with keywords,
contributions are sorted by a stable key, never by registration order. The package re-exports
the names ``rensei_routing.plugins`` held as a module before the re-layout (now ``manager``'s and
``info``'s).
"""

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
