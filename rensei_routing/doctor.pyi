"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.ops.doctor import *  # noqa: F403
