"""The CLI's plugins for one invocation: the manager is built once, on first need (never at
import), honouring ``--no-plugins`` and ``RENSEI_ROUTING_LOAD_PLUGINS``, and the vocabulary,
redactor and plugin commands derived from it are cached beside it on the root context.

Where the entry points show that no installed plugin may contribute to the vocabulary or the
redaction patterns (and that building the manager would raise nothing), those are the shipped
ones, taken without building the manager nor importing pluggy: a short command such as
``rensei explain`` then starts without the plugin machinery."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the plugin machinery is imported on first need, not at start-up
    import pluggy

    from ..core.redact import Redactor
    from ..core.routing.vocabulary import Vocabulary
    from ..core.snapshot.authz import AuthorizationEngine
    from ..plugins.entrypoints import InstalledPlugin
    from ..plugins.manager import SeamRegistry

_NO_PLUGINS = "rensei_routing.no_plugins"
#: The built-in plugins implementing each hook :meth:`Session._only_builtins_implement` is asked
#: about, as its answers assume: the built-in vocabulary plugin registers the shipped
#: vocabulary, and no built-in plugin adds a redaction pattern. Were a built-in to implement
#: either otherwise, the manager answers.
_BUILTIN_IMPLEMENTERS: dict[str, frozenset[str]] = {
    "register_vocabulary": frozenset({"rensei_routing.plugins.default.vocabulary"}),
    "register_redaction_patterns": frozenset(),
}
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
        #: Whether the allowed installed plugins can be read without the manager (their names
        #: distinct, none a built-in's); ``None`` until read. ``_allowed``: those plugins.
        self._shipped_only: bool | None = None
        self._allowed: list[InstalledPlugin] = []

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
            if self._only_builtins_implement("register_vocabulary"):
                # what the built-in vocabulary plugin registers, and all that would be merged
                from ..core.routing.vocabulary import DEFAULT_VOCABULARY

                self._vocabulary = DEFAULT_VOCABULARY
                return self._vocabulary
            from ..plugins.manager import vocabulary

            self._vocabulary = vocabulary(self.pm)
        return self._vocabulary

    def redactor(self) -> Redactor:
        """Raises: PluginError."""
        if self._redactor is None:
            if self._only_builtins_implement("register_redaction_patterns"):
                # no built-in plugin adds a pattern: the manager's answer would be the default
                from ..core.redact import DEFAULT_REDACTOR

                self._redactor = DEFAULT_REDACTOR
                return self._redactor
            from ..plugins.manager import redactor

            self._redactor = redactor(self.pm)
        return self._redactor

    def _only_builtins_implement(self, hook: str) -> bool:
        """Whether ``hook`` would be answered by the built-in plugins alone, and the manager
        built without error: no manager was handed in or built, no allowed installed plugin may
        implement ``hook``, and no two installed plugins (nor one and a built-in) share a name
        (the manager refuses that when it is built; the error is left to it)."""
        if self._pm is not None or self._shipped_only is False:
            return False
        from ..plugins.entrypoints import (
            BUILTIN_HOOKS,
            allowed_plugin_names,
            installed_plugins,
            may_implement,
        )

        builtins = frozenset(m for m, hooks in BUILTIN_HOOKS.items() if hook in hooks)
        if builtins != _BUILTIN_IMPLEMENTERS[hook]:
            return False

        if self._shipped_only is None:
            plugins = installed_plugins() if self.load_entrypoints else ()
            allowed = allowed_plugin_names()
            self._allowed = [p for p in plugins if allowed is None or p.name in allowed]
            names = [p.name for p in self._allowed]
            unique = len(set(names)) == len(names) and not set(names) & set(BUILTIN_HOOKS)
            self._shipped_only = unique
            if not unique:
                return False
        return not any(may_implement(p, hook) for p in self._allowed)

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
