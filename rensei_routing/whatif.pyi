"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.shadow.whatif import *  # noqa: F403
