"""The plugin under test, for the ``rensei_routing.plugins.testing`` fixtures."""

from __future__ import annotations

import pytest
import rensei_authz_cedar


@pytest.fixture
def rensei_plugin() -> object:
    return rensei_authz_cedar


@pytest.fixture
def rensei_plugin_name() -> str:
    return "cedar"
