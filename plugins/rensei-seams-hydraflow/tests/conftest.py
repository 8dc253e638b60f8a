"""The plugin under test, for the ``rensei_routing.plugins.testing`` fixtures."""

from __future__ import annotations

import pytest
import rensei_seams_hydraflow


@pytest.fixture
def rensei_plugin() -> object:
    return rensei_seams_hydraflow


@pytest.fixture
def rensei_plugin_name() -> str:
    return "hydraflow"
