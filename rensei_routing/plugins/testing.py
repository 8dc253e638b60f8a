"""Test helpers for plugin authors: a pytest plugin (entry point ``pytest11``, loaded by pytest
wherever rensei-routing is installed) plus plain functions usable from any test runner.

Fixtures (all prefixed ``rensei_``; override ``rensei_plugin`` in your ``conftest.py``)::

    rensei_plugin       the plugin under test (a module or object with hookimpls): override it
    rensei_plugin_name  its name in the manager (default "plugin-under-test")
    rensei_pm           a plugin manager holding the built-ins and only the plugin under test
    rensei_home         an initialised temporary home; RENSEI_HOME points at it and
                        RENSEI_ROUTING_LOAD_PLUGINS is set empty (no installed plugin leaks in)
    rensei_cli          run ``rensei ARGS...`` in-process with ``rensei_pm`` and ``rensei_home``

Functions: :func:`plugin_manager_for`, :func:`assert_plugin_ok` (every check ``rensei plugins
check`` runs), :func:`assert_classifier_total` (the seeded property check) and
:func:`stage_sequences_strategy` (the same generator as a hypothesis strategy, when hypothesis
is installed). Importing this module loads no installed plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..core.shadow.compare import Seam, Stage
from .checks import PROVIDERS, check_classifier_total, check_plugin_manager
from .manager import (
    LOAD_PLUGINS_ENV,
    RenseiPluginManager,
    check_pending,
    get_plugin_manager,
    register_plugin,
)

if TYPE_CHECKING:
    from click.testing import Result
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "assert_classifier_total",
    "assert_plugin_ok",
    "plugin_manager_for",
    "stage_sequences_strategy",
]

DEFAULT_NAME = "plugin-under-test"


def plugin_manager_for(plugin: object, name: str = DEFAULT_NAME) -> RenseiPluginManager:
    """A manager with the built-in plugins and ``plugin`` only (no installed entry point).

    Raises:
        PluginError: the plugin misspells a hook or has the wrong hook arguments.
    """
    pm = get_plugin_manager(load_entrypoints=False)
    register_plugin(pm, plugin, name)
    check_pending(pm)
    return pm


def _builtin_commands() -> frozenset[str]:
    from ..cli._root import builtin_command_names

    return builtin_command_names()


def assert_plugin_ok(
    pm: RenseiPluginManager, name: str = DEFAULT_NAME, *, count: int = 200
) -> None:
    """Fail (``AssertionError``, one line per problem) unless plugin ``name`` passes every check
    of ``rensei plugins check``."""
    problems = check_plugin_manager(pm, name, reserved_commands=_builtin_commands(), count=count)
    assert not problems, "\n".join(problems)


def assert_classifier_total(seam: Seam, *, count: int = 500, seed: int = 0) -> None:
    """Fail unless ``seam``'s classifier names one of the given stages for ``count`` generated
    stage sequences (seeded, so a failure reproduces)."""
    check_classifier_total(seam, count=count, seed=seed)


def stage_sequences_strategy(
    seam: Seam, providers: Sequence[str] = PROVIDERS
) -> SearchStrategy[tuple[Stage, ...]]:
    """A hypothesis strategy of stage sequences a spawn at ``seam`` could report: non-empty
    subsequences of ``seam.stages`` in order, on providers from ``providers`` or arbitrary
    short text. Requires hypothesis (``pip install hypothesis``)."""
    from hypothesis import strategies as st

    provider = st.sampled_from(tuple(providers)) | st.text(min_size=1, max_size=16)
    detail = st.sampled_from(("", "provider=zai", "x"))

    def at(indices: list[int]) -> SearchStrategy[tuple[Stage, ...]]:
        return st.tuples(
            *[
                st.builds(
                    Stage, mechanism=st.just(seam.stages[i]), provider=provider, detail=detail
                )
                for i in indices
            ]
        )

    indices = st.sets(st.integers(0, len(seam.stages) - 1), min_size=1).map(sorted)
    return indices.flatmap(at)


# -- pytest fixtures ----------------------------------------------------------------------------


@pytest.fixture
def rensei_plugin() -> object:
    """Override in your conftest.py: ``return my_plugin_module``."""
    pytest.fail("override the rensei_plugin fixture to return the plugin under test")


@pytest.fixture
def rensei_plugin_name() -> str:
    return DEFAULT_NAME


@pytest.fixture
def rensei_pm(rensei_plugin: object, rensei_plugin_name: str) -> RenseiPluginManager:
    return plugin_manager_for(rensei_plugin, rensei_plugin_name)


@pytest.fixture
def rensei_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from ..store.home import Home

    home = tmp_path / "rensei-home"
    Home(home).init(org="test")
    monkeypatch.setenv("RENSEI_HOME", str(home))
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "")
    yield home


@pytest.fixture
def rensei_cli(rensei_pm: RenseiPluginManager, rensei_home: Path) -> Callable[..., Result]:
    from click.testing import CliRunner

    from ..cli import cli

    def run(*args: str, **kwargs: Any) -> Result:
        return CliRunner().invoke(cli, list(args), obj=rensei_pm, **kwargs)

    return run
