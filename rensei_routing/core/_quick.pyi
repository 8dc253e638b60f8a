"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.routing._quick import *  # noqa: F403
