"""Every option of every built-in command says what it does (issue 22, edge 13): a test over the
whole click tree, so a new option without help text fails here, and the options with a default
worth knowing show it (``host run --interval/--jitter``)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from rensei_routing.cli import cli
from rensei_routing.cli._root import load_all_builtins


def _commands() -> Iterator[tuple[str, click.Command]]:
    load_all_builtins()

    def walk(path: str, command: click.Command) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                yield from walk(f"{path} {name}", command.commands[name])

    yield from walk("rensei", cli)


COMMANDS = dict(_commands())


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_option_has_help_text(path: str) -> None:
    command = COMMANDS[path]
    missing = [
        p.opts[0]
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert missing == [], f"{path}: options without help: {missing}"
    assert (command.help or command.short_help or "").strip(), f"{path} has no help text"


@pytest.mark.parametrize(
    ("path", "option"),
    [("rensei host run", "--interval"), ("rensei host run", "--jitter")],
)
def test_options_with_a_default_show_it(path: str, option: str) -> None:
    (param,) = [p for p in COMMANDS[path].params if option in getattr(p, "opts", ())]
    assert isinstance(param, click.Option) and param.show_default
