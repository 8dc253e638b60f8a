"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.audit.chain import *  # noqa: F403
