"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.ops.backup import *  # noqa: F403
