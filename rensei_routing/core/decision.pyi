"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.routing.decision import *  # noqa: F403
from rensei_routing.core.routing.explanation import *  # noqa: F403
