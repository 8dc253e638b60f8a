"""Every module of the package imports on its own, first, in a fresh interpreter: no import
cycle works only in the package's own import order (``core.context`` and ``core._quick`` read
each other's names, and importing ``core._quick`` first used to fail)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import rensei_routing

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(rensei_routing.__path__, prefix="rensei_routing.")
    if ".core." in m.name or m.name.endswith((".core", "._inputs", "._batch"))
)


def test_the_walk_finds_the_core() -> None:
    assert "rensei_routing.core.routing._quick" in MODULES
    assert "rensei_routing.core.routing.context" in MODULES
    assert len(MODULES) > 20


@pytest.mark.parametrize("module", MODULES)
def test_a_module_imports_first(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
