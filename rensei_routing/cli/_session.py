"""The CLI's plugins for one invocation: the manager is built once, on first need (never at
import), honouring ``--no-plugins`` and ``RENSEI_ROUTING_LOAD_PLUGINS``, and the vocabulary,
redactor and plugin commands derived from it are cached beside it on the root context."""

from __future__ import annotations

from collections.abc import Collection

import click

from ..core.redact import Redactor
from ..core.vocabulary import Vocabulary
from ..plugins import RenseiPluginManager, get_plugin_manager, plugin_commands, redactor, vocabulary

_NO_PLUGINS = "rensei_routing.no_plugins"
_SESSION = "rensei_routing.session"


class Session:
    """Lazily built plugin state of one CLI invocation (a cache, not a value)."""

    def __init__(self, *, load_entrypoints: bool) -> None:
        self.load_entrypoints = load_entrypoints
        self._pm: RenseiPluginManager | None = None
        self._vocabulary: Vocabulary | None = None
        self._redactor: Redactor | None = None
        self._commands: dict[str, tuple[str, click.Command]] | None = None

    @property
    def pm(self) -> RenseiPluginManager:
        """Raises: PluginError (a plugin cannot be loaded, or misspells a hook)."""
        if self._pm is None:
            self._pm = get_plugin_manager(load_entrypoints=self.load_entrypoints)
        return self._pm

    def vocabulary(self) -> Vocabulary:
        """Raises: PluginError."""
        if self._vocabulary is None:
            self._vocabulary = vocabulary(self.pm)
        return self._vocabulary

    def redactor(self) -> Redactor:
        """Raises: PluginError."""
        if self._redactor is None:
            self._redactor = redactor(self.pm)
        return self._redactor

    def commands(self, reserved: Collection[str]) -> dict[str, tuple[str, click.Command]]:
        """Plugin commands by name. Raises: PluginError."""
        if self._commands is None:
            self._commands = plugin_commands(self.pm, reserved=reserved)
        return self._commands


def no_plugins_option(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """Callback of the root ``--no-plugins`` flag (eager, so it precedes ``--help``)."""
    if value:
        ctx.meta[_NO_PLUGINS] = True
    return value


def session(ctx: click.Context | None = None) -> Session:
    """The current invocation's plugin session (``ctx.meta`` is shared by the whole tree)."""
    meta = (ctx or click.get_current_context()).meta
    found = meta.get(_SESSION)
    if not isinstance(found, Session):
        found = Session(load_entrypoints=not meta.get(_NO_PLUGINS, False))
        meta[_SESSION] = found
    return found
