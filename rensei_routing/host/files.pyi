"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.files import *  # noqa: F403
