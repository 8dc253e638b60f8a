"""``rensei plugins ...`` and ``rensei seams ...``: what is installed, what each plugin adds, and
whether an installed plugin holds up (``plugins check``). Must not hold plugin rules (those are
in :mod:`rensei_routing.plugins.manager` and :mod:`rensei_routing.plugins.checks`)."""

from __future__ import annotations

import click

from ..plugins.checks import check_plugin
from ..plugins.info import plugin_infos
from ._output import emit, printable
from ._root import (
    CommandError,
    builtin_command_names,
    cli,
    echo_json,
    json_option,
    unused_home_option,
)
from ._session import session


@cli.group(name="plugins")
def plugins() -> None:
    """Installed plugins: list them, check one."""


@plugins.command(name="list")
@unused_home_option
@json_option
def plugins_list(json_: bool) -> None:
    """List every loaded plugin: name, distribution and version, hooks implemented."""
    infos = plugin_infos(session().pm)
    if json_:
        echo_json([i.to_dict() for i in infos])
        return
    for i in infos:
        origin = "built-in" if i.builtin else f"{i.distribution or '-'} {i.version or '-'}"
        emit(_row(i.name, origin, ", ".join(i.hooks) or "-"))


@plugins.command(name="check")
@click.argument("name")
@click.option(
    "--examples",
    type=click.IntRange(1, 100_000),
    default=500,
    show_default=True,
    help="Generated stage sequences per seam for the classifier totality check.",
)
@unused_home_option
def plugins_check(name: str, examples: int) -> None:
    """Load the installed plugin NAME alone (beside the built-ins) and check it: it loads, its
    hooks answer with the right types and clash with nothing, and each of its seam classifiers
    is total over generated stage sequences. One line per problem; exit 1 if any."""
    root = click.get_current_context().find_root().command
    reserved = {*builtin_command_names(), *(root.commands if isinstance(root, click.Group) else {})}
    problems = check_plugin(name, reserved_commands=reserved, count=examples)
    for problem in problems:
        emit(printable(problem))
    if problems:
        raise CommandError(f"plugin {name!r}: {len(problems):,} problem(s)")
    emit(printable(f"ok: plugin {name!r}"))


@cli.group(name="seams")
def seams() -> None:
    """Spawn seams registered by plugins."""


@seams.command(name="list")
@unused_home_option
@json_option
def seams_list(json_: bool) -> None:
    """List every seam: name, plugin, request face, ordered legacy stages."""
    registry = session().seams()
    rows = [
        {
            "name": name,
            "plugin": registry.owners[name],
            "request_face": seam.request_face,
            "stages": list(seam.stages),
            "description": seam.description,
        }
        for name, seam in registry.seams.items()
    ]
    if json_:
        echo_json(rows)
        return
    for r in rows:
        emit(
            _row(str(r["name"]), str(r["plugin"]), str(r["request_face"]), " > ".join(r["stages"]))
        )


def _row(*fields: str) -> str:
    """A tab-separated row, each field made printable (a tab inside a field is escaped)."""
    return "\t".join(printable(f) for f in fields)
