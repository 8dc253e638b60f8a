"""The click root group, shared options and the error boundary. The CLI is the only layer that
prints, exits, or reads the clock and environment for defaults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..errors import OutputError, RenseiRoutingError
from ._output import emit_json, printable

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


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rensei-routing", prog_name="rensei")
def cli() -> None:
    """Where should this agent spawn run, and why? Policy, proof and audit on one host."""


def home_option(f: F) -> F:
    """``--home DIR`` (env ``RENSEI_HOME``, default ``./.rensei``): holds the store and keys."""
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="RENSEI_HOME",
        default=DEFAULT_HOME,
        show_default=True,
        help="Home directory holding the SQLite store and keys (env RENSEI_HOME).",
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
