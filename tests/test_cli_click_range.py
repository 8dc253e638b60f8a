"""Both ends of the click range setup.cfg allows (``click>=8.2``): the oldest release it admits
and the newest PyPI has, each installed with ``pip install --target`` into a directory of its
own and put first on ``sys.path`` of a real ``rensei`` process, which reports the click it
actually loaded (version and file) before it runs.

What must hold on both: ``rensei`` with no arguments and every bare group (``rensei host``,
``rensei host receipt``, ...) print their help with real newlines on stderr and exit 2 (a usage
error: no command named; docs/operations.md#exit-codes), and ``--help`` prints it on stdout and
exits 0. Under click 8.5.1 the root escaped the help's newlines (``\\x0a``); under click 8.1 a
bare group printed its help on stdout and exited 0.

Needs PyPI (reachable here and in CI); a failed install fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # two pip installs and about sixty processes

#: Runs ``rensei`` with the click of ``sys.path[0]``: writes what it loaded to argv[1] first.
_RUNNER = """
import importlib.metadata, json, sys
from pathlib import Path
import click
Path(sys.argv[1]).write_text(json.dumps(
    {"version": importlib.metadata.version("click"), "file": click.__file__}))
from rensei_routing.cli import cli
cli.main(args=sys.argv[2:], prog_name="rensei")
"""

#: Renders the whole reference (every command's help) and runs every leaf with ``--help``.
_EVERY_COMMAND = _RUNNER.replace(
    'cli.main(args=sys.argv[2:], prog_name="rensei")',
    """
from rensei_routing.cli._reference import render_reference
reference = render_reference(cli)
def leaves(group, path):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaves(command, (*path, name))
        else:
            yield (*path, name)
count = 0
for path in leaves(cli, ()):
    code = cli.main(args=[*path, "--help"], prog_name="rensei", standalone_mode=False)
    assert code in (0, None), (path, code)
    count += 1
print(len(reference.splitlines()), count)
""",
)


def _lowest_click() -> str:
    """The lower bound of setup.cfg's ``click>=X`` requirement."""
    found = re.search(r"^\s*click\s*>=\s*([\w.]+)\s*$", (ROOT / "setup.cfg").read_text(), re.M)
    assert found, "setup.cfg names no click>= bound"
    return found.group(1)


def _install(target: Path, requirement: str) -> str:
    """``pip install --target`` one click; returns the version pip put there."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(target),
            requirement,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, f"pip install {requirement}: {done.stdout}{done.stderr}"
    (dist,) = target.glob("click-*.dist-info")
    return dist.name.removeprefix("click-").removesuffix(".dist-info")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both ends, each in a directory of its own (holding its version in ``expected-version``)."""
    lowest = _lowest_click()
    ends = {}
    for end, requirement in (("oldest", f"click=={lowest}"), ("newest", f"click>={lowest}")):
        target = tmp_path_factory.mktemp(f"click-{end}")
        (target / "expected-version").write_text(_install(target, requirement))
        ends[end] = target
    return ends


@pytest.fixture(params=["oldest", "newest"])
def click_dir(request: pytest.FixtureRequest, installed: dict[str, Path]) -> Path:
    return installed[request.param]


def _run(
    click_dir: Path, tmp_path: Path, *args: str, code: str = _RUNNER
) -> subprocess.CompletedProcess[str]:
    loaded = tmp_path / "loaded.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(click_dir)
    done = subprocess.run(
        [sys.executable, "-c", code, str(loaded), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    seen = json.loads(loaded.read_text())
    # not vacuous: the subprocess ran the click installed for this end, not the venv's
    assert seen["version"] == (click_dir / "expected-version").read_text()
    assert Path(seen["file"]).resolve().is_relative_to(click_dir.resolve()), seen
    return done


def _groups() -> list[tuple[str, ...]]:
    """Every group of the command tree, the root first."""
    from rensei_routing.cli import cli
    from rensei_routing.cli._root import load_all_builtins

    load_all_builtins()
    found: list[tuple[str, ...]] = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        found.append(path)
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                walk(command, (*path, name))

    walk(cli, ())
    return found


def test_the_two_ends_are_the_bound_and_a_newer_click(installed: dict[str, Path]) -> None:
    """The oldest end is the bound itself (8.2: below it the suite's CliRunner mixes stderr into
    stdout, README "Dependencies"); both ends raise click's own usage error for a bare group
    (stderr, exit 2), which the root must show unescaped."""
    lowest = _lowest_click()
    old, new = ((installed[e] / "expected-version").read_text() for e in ("oldest", "newest"))
    assert old in (lowest, f"{lowest}.0"), old
    assert tuple(int(p) for p in old.split(".")[:2]) >= (8, 2), old  # the bound moved to 8.2
    assert tuple(int(p) for p in new.split(".")[:2]) >= (8, 2), new
    assert len(_groups()) > 10  # the root, every top-level group and the nested ones


@pytest.mark.parametrize("path", _groups(), ids=lambda p: " ".join(("rensei", *p)))
def test_a_bare_group_prints_its_help_with_newlines_and_exits_2(
    click_dir: Path, tmp_path: Path, path: tuple[str, ...]
) -> None:
    done = _run(click_dir, tmp_path, *path)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""  # the help is not data
    usage = f"Usage: {' '.join(('rensei', *path))} [OPTIONS] COMMAND [ARGS]..."
    assert done.stderr.startswith(usage + "\n"), done.stderr[:300]
    assert "\\x0a" not in done.stderr and "\nCommands:\n" in done.stderr
    assert "Error:" not in done.stderr  # the help alone, no second complaint
    helped = _run(click_dir, tmp_path, *path, "--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert helped.stdout == done.stderr  # the same help, on stdout when asked for


def test_a_usage_error_still_escapes_what_it_echoes(click_dir: Path, tmp_path: Path) -> None:
    """The root keeps escaping the input a real usage error echoes (a control character in an
    unknown command's name), on both ends."""
    done = _run(click_dir, tmp_path, "host", "sy\x1bnc")
    assert done.returncode == 2
    assert "\x1b" not in done.stderr and "sy\\x1bnc" in done.stderr


def test_every_command_loads_and_shows_its_help(click_dir: Path, tmp_path: Path) -> None:
    """Every command module imports and every command's help renders on both ends (under click
    8.1 the modules subscripting click's parameter types failed to import: ``rensei org``,
    ``snapshot``, ``explain``, ... were a traceback)."""
    done = _run(click_dir, tmp_path, code=_EVERY_COMMAND)
    assert done.returncode == 0, done.stderr[-3000:]
    lines, leaves = (int(n) for n in done.stdout.split()[-2:])
    assert lines > 1000 and leaves > 50, done.stdout[-500:]
