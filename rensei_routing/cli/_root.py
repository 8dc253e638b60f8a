"""The click root group, shared options and the error boundary. The CLI is the only layer that
prints, exits, or reads the clock and environment for defaults.

Built-in commands load lazily: :data:`BUILTIN` names the module(s) defining each command and the
short help ``rensei --help`` lists, so a command imports only what it uses (waitress, the store,
the resolver) and ``--help`` imports none of them. A test keeps the table equal to the commands.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from ..errors import OutputError, PluginError, RenseiRoutingError
from ._output import emit_json, printable
from ._session import no_plugins_option, session

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_HOME = ".rensei"

#: Every built-in command: the modules (under ``rensei_routing.cli``) that define it, in import
#: order, and its short help as listed by ``rensei --help``.
BUILTIN: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "audit": (
        ("audit", "replay", "audit_import", "audit_segments", "audit_proofs"),
        "The hash-chained decision log: verify, replay, checkpoint, rotate, prune, export, import, "
        "show, tail, prove, verify-proof, consistency.",
    ),
    "authorize": (
        ("authorize",),
        "Explain one authorization against the host's cached snapshot: the snapshot grant check "
        "AND every plugin authorizer must allow.",
    ),
    "backup": (("backup",), "Copy the home, online and verified, to the new DEST."),
    "doctor": (("doctor",), "Check this host: one line per check, ok / warn / fail."),
    "enforce": (
        ("enforce",),
        "Enforcement canaries: arm a repository on its evidence, disarm, the gate, status.",
    ),
    "explain": (
        ("explain",),
        "Resolve one CONTEXT (a file, '-' for stdin, or inline JSON) and explain the decision.",
    ),
    "explain-batch": (
        ("explain",),
        "Resolve every context of a JSON Lines file against ONE snapshot; one JSON decision a "
        "line.",
    ),
    "fleet": (
        ("fleet",),
        "Fleet evidence in PostgreSQL: trust hosts' keys, ingest their audit exports, report, "
        "repair.",
    ),
    "host": (
        ("host", "sessions"),
        "The host's verified snapshot cache: trust, sync, run, status, claim; receipts and "
        "sessions.",
    ),
    "init": (
        ("init",),
        "Create the home, its SQLite store, the host signing key and the snapshot endpoint's "
        "bearer token (idempotent; an existing key or token is never replaced).",
    ),
    "keys": (("keys",), "This home's keys: where the public key and the serve token are."),
    "org": (
        ("snapshot",),
        "The org's live data: capacity profiles and grants, pools and hosts, cells, posteriors.",
    ),
    "plugins": (("plugins",), "Installed plugins: list them, check one."),
    "policy": (
        ("policy", "whatif", "policy_import"),
        "Policy sets: validate, save as revisions, roll back, the route matrix and blast radius, "
        "import, export, show, history.",
    ),
    "quickstart": (("quickstart",), "The main job in one run, on a fresh home, from the examples."),
    "restore": (("backup",), "Restore a backup as the home, verified before it replaces it."),
    "seams": (("plugins",), "Spawn seams registered by plugins."),
    "serve": (("serve",), "Serve the signed ruleset snapshot over HTTP until SIGTERM."),
    "shadow": (
        ("shadow",),
        "Shadow decisions: record spawns beside policy, report agreement, the kill switch.",
    ),
    "snapshot": (
        ("snapshot",),
        "Signed ruleset snapshots: compile, show, history, export, verify.",
    ),
    "ui": (("ui",), "The local, read-only web console over this home."),
    "witness": (
        ("witness",),
        "This home as a witness of other logs, through files: cosign their checkpoints.",
    ),
}


def builtin_command_names() -> frozenset[str]:
    """The names of every built-in command (loaded or not): reserved against plugins."""
    return frozenset(BUILTIN)


_LOADED: set[str] = set()


def load_builtin(name: str) -> None:
    """Import the module(s) defining the built-in command ``name`` (they attach it to ``cli``).

    A command counts as loaded only once every one of its modules is imported: a group that is
    already attached (one of its modules was imported on its own) may still lack subcommands.
    """
    if name in _LOADED:
        return
    for module in BUILTIN[name][0]:
        importlib.import_module(f"{__package__}.{module}")
    _LOADED.add(name)


def load_all_builtins() -> None:
    """Import every built-in command (the CLI reference, tests)."""
    for name in sorted(BUILTIN):
        load_builtin(name)


class CommandError(click.ClickException):
    """A failed command: one line on stderr (every non-printable character escaped), exit 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


class OutputFailedError(CommandError):
    """Stdout could not be written: exit 3, so a script never reads it as the command's verdict."""

    exit_code = 3


class BareGroupError(click.UsageError):
    """A group called without a command (``rensei``, ``rensei host``): its help on stderr, exit 2,
    whatever click is installed (click 8.1 printed it on stdout and exited 0; 8.2 and later
    raise their own usage error, whose help text the root must not escape)."""

    exit_code = 2

    def __init__(self, ctx: click.Context) -> None:
        super().__init__("", ctx=ctx)
        self.help = ctx.get_help()

    def show(self, file: Any = None) -> None:
        click.echo(self.help, err=True, color=self.ctx.color if self.ctx else None)


class _Group(click.Group):
    """Every built-in group: called without a command it shows its help as a usage error
    (:class:`BareGroupError`), the same on every click the package allows."""

    group_class: type[click.Group | type] | None = type  # a subgroup is a _Group too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            raise BareGroupError(ctx)
        return super().parse_args(ctx, args)


def _help_of_bare_group(e: click.ClickException) -> bool:
    """Whether ``e`` shows a group's help (ours, or click >= 8.2's ``NoArgsIsHelpError`` from a
    plugin's own group): its text is help we print as is, not input to escape."""
    return isinstance(e, BareGroupError) or type(e).__name__ == "NoArgsIsHelpError"


class _Root(_Group):
    """Turns every error we raise on purpose into one clear line and a non-zero exit, and keeps
    control characters that a usage error echoes from reaching the terminal."""

    group_class = _Group

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
            if not _help_of_bare_group(e):
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
            if not _help_of_bare_group(e):
                setattr(e, "message", printable(e.message))  # noqa: B010 (click types it Final)
            raise

    # Plugin commands: looked up only when a name is not built in (so a built-in command never
    # waits for entry points), listed for --help with a warning if a plugin is broken.
    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in BUILTIN:
            load_builtin(cmd_name)
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        plugin_command = session(ctx).commands(self._reserved()).get(cmd_name)
        return None if plugin_command is None else plugin_command[1]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command name is a usage error that suggests the closest names."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            name = args[0] if args else ""
            if name and not name.startswith("-") and "Did you mean" not in e.message:
                close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
                if close:
                    setattr(  # noqa: B010 (click types it Final)
                        e, "message", f"{e.message} Did you mean: {', '.join(close)}?"
                    )
            raise

    def _reserved(self) -> frozenset[str]:
        return frozenset({*BUILTIN, *self.commands})

    def _plugin_commands(self, ctx: click.Context) -> dict[str, tuple[str, click.Command]]:
        try:
            return session(ctx).commands(self._reserved())
        except PluginError as e:
            click.echo(printable(f"warning: plugin commands not listed: {e}"), err=True)
            return {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*BUILTIN, *self.commands, *self._plugin_commands(ctx)})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing of ``--help``: built-ins from :data:`BUILTIN` (nothing imported),
        plugin commands from their own help."""
        plugin = self._plugin_commands(ctx)
        names = sorted({*BUILTIN, *self.commands, *plugin})
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in BUILTIN:
                # click's own truncation, without importing the command
                text = click.Command(name, help=BUILTIN[name][1]).get_short_help_str(limit)
            elif name in self.commands:
                text = self.commands[name].get_short_help_str(limit)
            else:
                text = plugin[name][1].get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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


def unused_home_option(f: F) -> F:
    """``--home DIR`` on a command that reads no home (its inputs are files, plugins or a fleet
    URL): accepted and ignored, so every command takes ``--home`` and a script may pass it to
    each. The value is not passed to the command."""
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        expose_value=False,
        help="Accepted and ignored: this command reads no home (every command takes --home).",
    )(f)


def actor_option(f: F) -> F:
    """``--actor NAME``: who writes (else env ``RENSEI_ACTOR``, else the OS user), recorded
    with every policy or enforcement write; a label, never a credential."""
    return click.option(
        "--actor",
        metavar="NAME",
        default=None,
        help="Who is writing, recorded with the write (default: env RENSEI_ACTOR, else the "
        "OS user). A label, never a credential.",
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
