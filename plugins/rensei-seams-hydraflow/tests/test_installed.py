"""The plugin as installed: its entry point loads through the real ``rensei`` console script,
``RENSEI_ROUTING_LOAD_PLUGINS`` and ``--no-plugins`` keep it out, ``plugins check`` passes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RENSEI = Path(sys.executable).with_name("rensei")
HYDRAFLOW = {"agentic-runner", "lightweight-agent", "streaming-agent", "subprocess-runner"}


def _rensei(*args: str, load: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_ROUTING_LOAD_PLUGINS"}
    if load is not None:
        env["RENSEI_ROUTING_LOAD_PLUGINS"] = load
    exe = str(RENSEI) if RENSEI.exists() else shutil.which("rensei")
    assert exe, "the rensei console script is not installed"
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, check=False)


def _seams(*args: str, load: str | None) -> set[str]:
    done = _rensei(*args, "seams", "list", "--json", load=load)
    assert done.returncode == 0, done.stderr
    return {row["name"] for row in json.loads(done.stdout)}


@pytest.mark.parametrize(
    ("load", "args", "loaded"),
    [
        (None, (), True),
        ("hydraflow", (), True),
        (" other , hydraflow ", (), True),
        ("", (), False),
        ("other", (), False),
        (None, ("--no-plugins",), False),
    ],
    ids=["unset", "named", "in-a-list", "empty", "another", "no-plugins"],
)
def test_the_entry_point_loads_only_when_allowed(
    load: str | None, args: tuple[str, ...], loaded: bool
) -> None:
    assert _seams(*args, load=load) == (HYDRAFLOW | {"default"} if loaded else {"default"})


def test_plugins_list_names_the_distribution_and_hooks() -> None:
    done = _rensei("plugins", "list", "--json", load="hydraflow")
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["hydraflow"]["distribution"] == "rensei-seams-hydraflow"
    assert rows["hydraflow"]["version"] == "0.1.0"
    assert rows["hydraflow"]["hooks"] == ["apply_enforced_route", "register_seams"]
    assert rows["hydraflow"]["builtin"] is False


def test_plugins_check_passes_the_installed_plugin_even_when_not_loaded() -> None:
    done = _rensei("plugins", "check", "hydraflow", load="")
    assert (done.returncode, done.stdout) == (0, "ok: plugin 'hydraflow'\n"), done.stderr
