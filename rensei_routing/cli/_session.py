"""The CLI's plugins for one invocation: the manager is built once, on first need (never at
import), honouring ``--no-plugins`` and ``RENSEI_ROUTING_LOAD_PLUGINS``, and the vocabulary,
redactor and plugin commands derived from it are cached beside it on the root context."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the plugin machinery is imported on first need, not at start-up
    import pluggy

    from ..core.redact import Redactor
    from ..core.routing.vocabulary import Vocabulary
    from ..core.snapshot.authz import AuthorizationEngine
    from ..plugins.manager import SeamRegistry

_NO_PLUGINS = "rensei_routing.no_plugins"
_SESSION = "rensei_routing.session"


class Session:
    """Lazily built plugin state of one CLI invocation (a cache, not a value)."""

    def __init__(self, *, load_entrypoints: bool, pm: pluggy.PluginManager | None = None) -> None:
        self.load_entrypoints = load_entrypoints
        self._pm: pluggy.PluginManager | None = pm
        self._vocabulary: Vocabulary | None = None
        self._redactor: Redactor | None = None
        self._commands: dict[str, tuple[str, click.Command]] | None = None
        self._seams: SeamRegistry | None = None
        self._authorization: AuthorizationEngine | None = None

    @property
    def pm(self) -> pluggy.PluginManager:
        """Raises: PluginError (a plugin cannot be loaded, or misspells a hook)."""
        if self._pm is None:
            from ..plugins.manager import get_plugin_manager

            self._pm = get_plugin_manager(load_entrypoints=self.load_entrypoints, lazy=True)
        return self._pm

    def vocabulary(self) -> Vocabulary:
        """Raises: PluginError."""
        if self._vocabulary is None:
            from ..plugins.manager import vocabulary

            self._vocabulary = vocabulary(self.pm)
        return self._vocabulary

    def redactor(self) -> Redactor:
        """Raises: PluginError."""
        if self._redactor is None:
            from ..plugins.manager import redactor

            self._redactor = redactor(self.pm)
        return self._redactor

    def seams(self) -> SeamRegistry:
        """Every registered seam. Raises: PluginError."""
        if self._seams is None:
            from ..plugins.manager import seam_registry

            self._seams = seam_registry(self.pm)
        return self._seams

    def authorization(self) -> AuthorizationEngine:
        """The grant check and every plugin authorizer. Raises: PluginError."""
        if self._authorization is None:
            from ..core.snapshot.authz import AuthorizationEngine
            from ..plugins.manager import authorizers

            self._authorization = AuthorizationEngine(authorizers(self.pm))
        return self._authorization

    def commands(self, reserved: Collection[str]) -> dict[str, tuple[str, click.Command]]:
        """Plugin commands by name: none, and no manager built, when no plugin may implement
        ``register_commands`` (read from the entry points). Raises: PluginError."""
        if self._commands is None:
            if self._pm is None and not self._may_have_commands():
                self._commands = {}
                return self._commands
            from ..plugins.manager import plugin_commands

            self._commands = plugin_commands(self.pm, reserved=reserved)
        return self._commands

    def _may_have_commands(self) -> bool:
        """Whether a built-in or an allowed installed plugin may implement ``register_commands``
        (the entry points' declarations; nothing is imported)."""
        from ..plugins.entrypoints import (
            BUILTIN_HOOKS,
            allowed_plugin_names,
            installed_plugins,
            may_implement,
        )

        hook = "register_commands"
        if any(hook in hooks for hooks in BUILTIN_HOOKS.values()):
            return True
        if not self.load_entrypoints:
            return False
        allowed = allowed_plugin_names()
        return any(
            may_implement(p, hook)
            for p in installed_plugins()
            if allowed is None or p.name in allowed
        )


def no_plugins_option(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """Callback of the root ``--no-plugins`` flag (eager, so it precedes ``--help``)."""
    if value:
        ctx.meta[_NO_PLUGINS] = True
    return value


def session(ctx: click.Context | None = None) -> Session:
    """The current invocation's plugin session (``ctx.meta`` is shared by the whole tree).

    A program embedding the CLI may hand in its own manager as the context object
    (``cli.main(args, obj=pm)``, ``CliRunner().invoke(cli, args, obj=pm)``); it is used as is.
    """
    ctx = ctx or click.get_current_context()
    found = ctx.meta.get(_SESSION)
    if not isinstance(found, Session):
        given = ctx.find_root().obj
        found = Session(
            load_entrypoints=not ctx.meta.get(_NO_PLUGINS, False),
            pm=given if _is_plugin_manager(given) else None,
        )
        ctx.meta[_SESSION] = found
    return found


def _is_plugin_manager(value: object) -> bool:
    """Whether ``value`` is a pluggy manager (checked without importing pluggy for ``None``)."""
    if value is None:
        return False
    import pluggy

    return isinstance(value, pluggy.PluginManager)
