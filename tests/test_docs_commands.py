"""docs/commands.md lists every command of ``rensei`` and says exactly which take ``--home``: the
click command tree is walked, every command (leaf) must have its own row in the tables and
every row must name a command that exists; the page's claim that every command takes
``--home`` must hold, and its list of the commands that read no home (and ignore ``--home``)
must be exactly the commands whose ``--home`` says so."""

from __future__ import annotations

import re
from pathlib import Path

import click

from rensei_routing.cli import cli
from rensei_routing.cli._root import load_all_builtins

COMMANDS_MD = Path(__file__).resolve().parent.parent / "docs" / "commands.md"


def _leaves() -> dict[str, click.Command]:
    load_all_builtins()
    found: dict[str, click.Command] = {}

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, (*path, name))
            else:
                found[" ".join((*path, name))] = command

    walk(cli, ())
    return found


LEAVES = _leaves()
TEXT = COMMANDS_MD.read_text("utf-8")


def _row_commands() -> list[str]:
    """The command each table row names: the words of its first cell after ``rensei`` up to
    the first argument or option (an upper-case word, ``-...`` or ``[...]``)."""
    named = []
    for cell in re.findall(r"^\| `rensei ([^`]*)`", TEXT, re.M):
        words = []
        for word in cell.split():
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            words.append(word)
        named.append(" ".join(words))
    return named


def _home_option(command: click.Command) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and "--home" in param.opts:
            return param
    return None


def test_the_walk_finds_the_commands() -> None:
    assert len(LEAVES) > 60 and {"explain", "audit verify", "host session start"} <= set(LEAVES)


def test_every_command_has_one_row() -> None:
    rows = _row_commands()
    missing = sorted(set(LEAVES) - set(rows))
    assert missing == [], f"docs/commands.md has no row for: {missing}"
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert twice == [], f"docs/commands.md has more than one row for: {twice}"


def test_every_row_names_a_command() -> None:
    unknown = sorted(set(_row_commands()) - set(LEAVES))
    assert unknown == [], f"docs/commands.md lists commands that do not exist: {unknown}"


def test_every_command_takes_home_as_the_page_says() -> None:
    assert "Every command takes `--home DIR`" in TEXT
    without = sorted(name for name, command in LEAVES.items() if _home_option(command) is None)
    assert without == []


def test_the_commands_that_ignore_home_are_the_ones_listed() -> None:
    flat = " ".join(TEXT.split())
    rule = r"The commands that read no home \((.*?)\) accept `--home` and ignore it"
    found = re.search(rule, flat)
    assert found, "docs/commands.md: the list of the commands that read no home"
    listed = set(re.findall(r"`([a-z][a-z -]*)`", found.group(1)))
    ignoring = set()
    for name, command in LEAVES.items():
        option = _home_option(command)
        if option is not None and (option.help or "").startswith("Accepted and ignored"):
            ignoring.add(name)
    assert listed == ignoring
