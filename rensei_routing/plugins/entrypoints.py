"""The installed plugins as their distributions' metadata declares them, read without importing
any plugin, pluggy or the core (what makes plugin loading lazy and ``rensei --help`` fast).

An installed plugin is an entry point of group ``rensei_routing`` (``NAME = module[:attr]``). It
may also declare the hooks it implements, one entry point per hook in group
``rensei_routing.hooks``, named ``NAME.HOOK`` and pointing at the implementation::

    [rensei_routing]
    cedar = rensei_authz_cedar
    [rensei_routing.hooks]
    cedar.register_authorizers = rensei_authz_cedar:register_authorizers

The manager imports a plugin that declares its hooks only when one of them is called; a plugin
that declares none is imported as soon as any hook is called (as before). A declaration that is
not what the plugin implements is a ``PluginError`` when it is imported (see ``manager``).

Entry points are read from the ``*.dist-info`` and ``*.egg-info`` directories of ``sys.path``
(first distribution of a name wins, as :mod:`importlib.metadata` does), which is what pip and
setuptools install; when a path entry is an archive or a finder supplies its own distributions,
:mod:`importlib.metadata` itself is asked. Imports only the standard library.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BUILTIN_HOOKS",
    "GROUP",
    "HOOKS_GROUP",
    "LOAD_PLUGINS_ENV",
    "InstalledPlugin",
    "allowed_plugin_names",
    "installed_plugins",
    "may_implement",
]

#: The entry point group of installed plugins (the pluggy project name).
GROUP: Final = "rensei_routing"
#: The entry point group where a plugin declares the hooks it implements.
HOOKS_GROUP: Final = "rensei_routing.hooks"

#: Comma list of installed plugin (entry point) names to load; empty = none; unset = all.
LOAD_PLUGINS_ENV: Final = "RENSEI_ROUTING_LOAD_PLUGINS"

#: The hooks each built-in plugin implements (a test keeps this equal to the modules).
BUILTIN_HOOKS: Final[dict[str, frozenset[str]]] = {
    "rensei_routing.plugins.default.seams": frozenset({"register_seams"}),
    "rensei_routing.plugins.default.vocabulary": frozenset({"register_vocabulary"}),
}

_NORMALIZE: Final = re.compile(r"[-_.]+")


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """One entry point of group ``rensei_routing``: the plugin's name, the object it names
    (``module[:attr]``), its distribution, and the hooks it declares (``None``: undeclared, so
    it may implement any hook)."""

    name: str
    value: str
    distribution: str | None
    version: str | None
    hooks: frozenset[str] | None


def allowed_plugin_names() -> frozenset[str] | None:
    """The installed plugins ``RENSEI_ROUTING_LOAD_PLUGINS`` allows (``None``: unset, all)."""
    allowed = os.environ.get(LOAD_PLUGINS_ENV)
    if allowed is None:
        return None
    return frozenset(filter(None, (n.strip() for n in allowed.split(","))))


def may_implement(plugin: InstalledPlugin, hook: str) -> bool:
    """Whether ``plugin`` has to be imported before ``hook`` is called."""
    return plugin.hooks is None or hook in plugin.hooks


def _parse_ini(text: str, groups: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """The ``name = value`` lines of the wanted sections of an ``entry_points.txt``."""
    wanted = set(groups)
    out: dict[str, list[tuple[str, str]]] = {}
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        if section in wanted and "=" in line:
            name, _, value = line.partition("=")
            out.setdefault(section, []).append((name.strip(), value.strip()))
    return out


def _headers(path: str) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` of a METADATA / PKG-INFO file (its header block)."""
    name = version = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key == "Name" and name is None:
                    name = value.strip()
                elif key == "Version" and version is None:
                    version = value.strip()
    except OSError:
        pass
    return name, version


def _needs_importlib_metadata() -> bool:
    """A path entry that is an archive, or a finder with distributions of its own."""
    for finder in sys.meta_path:
        if finder is not importlib.machinery.PathFinder and hasattr(finder, "find_distributions"):
            return True
    return any(os.path.isfile(p) for p in sys.path if p)


def _distributions() -> list[tuple[str | None, str | None, str]]:
    """``(name, version, entry_points.txt text)`` of every distribution with entry points,
    first of each normalized name on ``sys.path``."""
    seen: set[str] = set()
    out: list[tuple[str | None, str | None, str]] = []
    for entry in sys.path:
        where = entry or "."
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for child in names:
            if child.endswith(".dist-info"):
                meta = "METADATA"
            elif child.endswith(".egg-info"):
                meta = "PKG-INFO"
            else:
                continue
            key = _NORMALIZE.sub("_", child.partition("-")[0].rsplit(".", 1)[0]).lower()
            if key in seen:
                continue
            seen.add(key)
            base = os.path.join(where, child)
            try:
                with open(os.path.join(base, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            if f"[{GROUP}]" not in text:
                continue
            name, version = _headers(os.path.join(base, meta))
            out.append((name, version, text))
    return out


def _via_importlib_metadata() -> list[tuple[str | None, str | None, str]]:
    import importlib.metadata

    out: list[tuple[str | None, str | None, str]] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        key = _NORMALIZE.sub("_", name or "").lower()
        if key in seen:
            continue
        seen.add(key)
        text = dist.read_text("entry_points.txt")
        if text and f"[{GROUP}]" in text:
            out.append((name, dist.version, text))
    return out


def installed_plugins() -> tuple[InstalledPlugin, ...]:
    """Every installed plugin entry point, sorted by name (a name installed twice appears
    twice: the manager refuses it), with the hooks its distribution declares."""
    dists = _via_importlib_metadata() if _needs_importlib_metadata() else _distributions()
    found: list[InstalledPlugin] = []
    for dist, version, text in dists:
        groups = _parse_ini(text, (GROUP, HOOKS_GROUP))
        declared: dict[str, set[str]] = {}
        for entry, _ in groups.get(HOOKS_GROUP, ()):
            plugin, dot, hook = entry.rpartition(".")
            if dot:
                declared.setdefault(plugin, set()).add(hook)
        for name, value in groups.get(GROUP, ()):
            hooks = declared.get(name)
            found.append(
                InstalledPlugin(
                    name, value, dist, version, None if hooks is None else frozenset(hooks)
                )
            )
    return tuple(sorted(found, key=lambda p: p.name))
