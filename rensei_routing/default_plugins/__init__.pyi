"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.plugins.default import *  # noqa: F403
