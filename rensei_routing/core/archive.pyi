"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.audit.archive import *  # noqa: F403
