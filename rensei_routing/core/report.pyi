"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.shadow.report import *  # noqa: F403
