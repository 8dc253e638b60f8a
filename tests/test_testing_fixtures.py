"""``rensei_routing.plugins.testing``, as a plugin author uses it: the pytest11 fixtures (overriding
``rensei_plugin`` here, as an author's conftest.py would) and the hypothesis strategy."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.errors import PluginError
from rensei_routing.plugins.manager import RenseiPluginManager
from rensei_routing.plugins.testing import (
    assert_classifier_total,
    assert_plugin_ok,
    plugin_manager_for,
    stage_sequences_strategy,
)
from rensei_routing.store.home import Home

from .plugins import broken, sample


@pytest.fixture
def rensei_plugin() -> object:
    return sample


@pytest.fixture
def rensei_plugin_name() -> str:
    return "sample"


def test_rensei_pm_holds_the_builtins_and_only_the_plugin_under_test(
    rensei_pm: RenseiPluginManager,
) -> None:
    names = sorted(n for n, _ in rensei_pm.list_name_plugin())
    assert names == [
        "rensei_routing.plugins.default.seams",
        "rensei_routing.plugins.default.vocabulary",
        "sample",
    ]
    assert_plugin_ok(rensei_pm, "sample")


def test_rensei_home_is_initialised_and_isolated(rensei_home: Path) -> None:
    assert Home(rensei_home).info().org == "test"
    assert os.environ["RENSEI_HOME"] == str(rensei_home)
    assert os.environ["RENSEI_ROUTING_LOAD_PLUGINS"] == ""


def test_rensei_cli_runs_with_the_plugin_and_the_home(
    rensei_cli: Callable[..., Result], rensei_home: Path
) -> None:
    seams = json.loads(rensei_cli("seams", "list", "--json").stdout)
    assert [s["name"] for s in seams] == ["default", "sample-batch"]
    assert rensei_cli("sample", "hello").stdout == "hello from sample\n"
    assert rensei_cli("explain", "{}", "--record").exit_code == 0
    assert rensei_cli("audit", "verify").stdout.startswith("intact: 1 records")


def test_assert_plugin_ok_and_the_manager_builder_fail_on_a_broken_plugin() -> None:
    with pytest.raises(AssertionError, match="seam fragile: plugin 'fragile-plugin'"):
        assert_plugin_ok(
            plugin_manager_for(broken.RaisingClassifier(), "fragile-plugin"),
            "fragile-plugin",
            count=20,
        )
    with pytest.raises(PluginError, match="plugin 'typo'"):
        plugin_manager_for(broken.MisspelledHook(), "typo")


def test_assert_classifier_total_fails_on_a_partial_classifier() -> None:
    from rensei_routing.errors import ClassifierError
    from rensei_routing.plugins.manager import seam_registry

    seam = seam_registry(plugin_manager_for(broken.RaisingClassifier(), "f")).get("fragile")
    with pytest.raises(ClassifierError):
        assert_classifier_total(seam, count=5)
    assert_classifier_total(sample.SEAM, count=50)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_strategy_draws_ordered_stage_sequences_of_the_seam(data: st.DataObject) -> None:
    stages = data.draw(stage_sequences_strategy(sample.SEAM))
    positions = [sample.SEAM.stages.index(s.mechanism) for s in stages]
    assert positions and positions == sorted(set(positions))
    assert all(s.provider for s in stages)
