"""The CLI reference (``docs/cli.md``), rendered from the click commands themselves: every
built-in group and command, its usage line, help text and options, as ``--help`` prints them at
a fixed width. ``scripts/cli-reference`` writes it; a test fails when the file is stale.

Plugin commands are not included (they depend on what is installed); each plugin documents its
own.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from ._root import BUILTIN, load_all_builtins

__all__ = ["render_reference"]

_WIDTH = 100

_HEADER = """# CLI reference

Generated from the click commands by `python scripts/cli-reference` (do not edit by hand: a test
fails when this file differs from what the commands say). The commands at a glance and the
rules every command follows are in [commands.md](commands.md); exit codes in
[operations.md](operations.md#exit-codes).
"""


def _walk(
    command: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Command, click.Context]]:
    yield command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if sub.hidden or (ctx.parent is None and name not in BUILTIN):
                continue  # a plugin's command attached to the root (tests, embedders)
            yield from _walk(
                sub,
                click.Context(
                    sub,
                    info_name=name,
                    parent=ctx,
                    terminal_width=_WIDTH,
                    max_content_width=_WIDTH,
                ),
            )


def render_reference(root: click.Group) -> str:
    """The reference of ``root`` and every built-in command under it, as Markdown."""
    load_all_builtins()
    # the root's context settings (-h/--help) as a real invocation has them: click caches each
    # command's help option, so a context built without them would change later invocations
    settings = {**root.context_settings, "terminal_width": _WIDTH, "max_content_width": _WIDTH}
    top = click.Context(root, info_name="rensei", **settings)
    parts = [_HEADER]
    for command, ctx in _walk(root, top):
        # list_commands of the root would look up plugin commands: list the built-ins only
        text = (
            command.get_help(ctx)
            if not isinstance(command, click.Group)
            else _group_help(command, ctx)
        )
        parts.append(f"## `{ctx.command_path}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def _group_help(group: click.Group, ctx: click.Context) -> str:
    """A group's help as ``--help`` prints it, its commands listed from ``group.commands``
    (the root's ``list_commands`` would add whatever plugins are installed)."""
    formatter = ctx.make_formatter()
    group.format_usage(ctx, formatter)
    group.format_help_text(ctx, formatter)
    click.Command.format_options(group, ctx, formatter)
    rows = [
        (name, group.commands[name].get_short_help_str(formatter.width - 6 - len(name)))
        for name in sorted(group.commands)
        if not group.commands[name].hidden and (ctx.parent is not None or name in BUILTIN)
    ]
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)
    return formatter.getvalue()
