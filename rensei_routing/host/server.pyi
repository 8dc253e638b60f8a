"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.control.server import *  # noqa: F403
