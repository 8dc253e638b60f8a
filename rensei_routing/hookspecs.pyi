"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.plugins.hookspecs import *  # noqa: F403
