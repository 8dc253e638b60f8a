"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.snapshot.org import *  # noqa: F403
