"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.routing.policy import *  # noqa: F403
