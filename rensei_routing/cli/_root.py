"""The click root group, shared options and the error boundary. The CLI is the only layer that
prints, exits, or reads the clock and environment for defaults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..errors import OutputError, PluginError, RenseiRoutingError
from ._output import emit_json, printable
from ._session import no_plugins_option, session

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_HOME = ".rensei"


class CommandError(click.ClickException):
    """A failed command: one line on stderr (every non-printable character escaped), exit 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


class OutputFailedError(CommandError):
    """Stdout could not be written: exit 3, so a script never reads it as the command's verdict."""

    exit_code = 3


class _Root(click.Group):
    """Turns every error we raise on purpose into one clear line and a non-zero exit, and keeps
    control characters that a usage error echoes from reaching the terminal."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as e:
            setattr(e, "message", printable(e.message))  # noqa: B010 (click types it Final)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutputError as e:
            raise OutputFailedError(str(e)) from e
        except RenseiRoutingError as e:
            raise CommandError(str(e)) from e
        except click.ClickException as e:  # usage errors of a subcommand echo their input
            setattr(e, "message", printable(e.message))  # noqa: B010 (click types it Final)
            raise

    # Plugin commands: looked up only when a name is not built in (so a built-in command never
    # waits for entry points), listed for --help with a warning if a plugin is broken.
    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        plugin_command = session(ctx).commands(self.commands).get(cmd_name)
        return None if plugin_command is None else plugin_command[1]

    def list_commands(self, ctx: click.Context) -> list[str]:
        try:
            extra = session(ctx).commands(self.commands)
        except PluginError as e:
            click.echo(printable(f"warning: plugin commands not listed: {e}"), err=True)
            extra = {}
        return sorted({*super().list_commands(ctx), *extra})


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rensei-routing", prog_name="rensei")
@click.option(
    "--no-plugins",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=no_plugins_option,
    help="Load no installed plugin (built-ins only): a clean-room run.",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="RENSEI_HOME",
    default=DEFAULT_HOME,
    show_default=True,
    help="Home directory holding the SQLite store and keys (env RENSEI_HOME); every command "
    "inherits it, and a command's own --home overrides it.",
)
def cli(home: Path) -> None:
    """Where should this agent spawn run, and why? Policy, proof and audit on one host."""


def _inherit_home(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    """A command's own ``--home`` wins; else the root group's (which already resolved
    ``RENSEI_HOME`` and the default)."""
    if value is not None:
        return value
    inherited = ctx.find_root().params.get("home")
    return inherited if isinstance(inherited, Path) else Path(DEFAULT_HOME)


def home_option(f: F) -> F:
    """``--home DIR`` on a command: overrides ``rensei --home DIR`` (itself env ``RENSEI_HOME``,
    default ``./.rensei``), the directory holding the store and keys."""
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        callback=_inherit_home,
        help="Home directory holding the SQLite store and keys (default: the root --home, "
        f"env RENSEI_HOME, else ./{DEFAULT_HOME}).",
    )(f)


def json_option(f: F) -> F:
    """``--json``: machine-readable output on stdout."""
    return click.option("json_", "--json", is_flag=True, help="Output as JSON.")(f)


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (see :func:`._output.emit_json`).

    Raises:
        OutputError: stdout cannot be written.
    """
    emit_json(value)
