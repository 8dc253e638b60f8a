"""Meta-tests: every hook specification is documented in docs/plugins.md (a section headed by
its signature) and exercised by a ``test_hook_<name>`` test; every CLI command has help."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest

from rensei_routing.cli import cli
from rensei_routing.cli._root import load_all_builtins
from rensei_routing.plugins import hookspecs
from rensei_routing.plugins.info import HOOK_NAMES

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
TESTS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
DOCUMENTED = set(re.findall(r"^### `(\w+)\(", DOCS, flags=re.MULTILINE))


def test_the_hook_list_is_the_hookspecs_module() -> None:
    specs = {
        n
        for n, f in inspect.getmembers(hookspecs, inspect.isfunction)
        if f.__module__ == hookspecs.__name__
    }
    assert set(HOOK_NAMES) == specs
    assert len(HOOK_NAMES) >= 6


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_is_documented_with_its_signature(hook: str) -> None:
    assert hook in DOCUMENTED, f"docs/plugins.md has no '### `{hook}(' section"
    spec = getattr(hookspecs, hook)
    assert (spec.__doc__ or "").strip(), f"hookspec {hook} has no docstring"
    params = list(inspect.signature(spec).parameters)
    heading = re.search(rf"^### `{hook}\((.*)\)", DOCS, flags=re.MULTILINE)
    assert heading is not None
    assert re.findall(r"(?:^|, )(\w+):", heading.group(1)) == params


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_has_a_test(hook: str) -> None:
    assert re.search(rf"^def test_hook_{hook}\(", TESTS, flags=re.MULTILINE), (
        f"no test_hook_{hook} test"
    )


def test_no_section_documents_a_hook_that_does_not_exist() -> None:
    assert set(HOOK_NAMES) == DOCUMENTED


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    load_all_builtins()  # built-in commands load lazily; list every one of them
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            out.extend(_commands(command, f"{prefix} {name}"))
    return out


@pytest.mark.parametrize(("path", "command"), _commands(cli, "rensei"), ids=lambda v: str(v))
def test_every_command_has_help(path: str, command: click.Command) -> None:
    assert (command.help or "").strip(), f"{path} has no help"
