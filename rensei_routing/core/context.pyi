"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.core.routing.context import *  # noqa: F403
from rensei_routing.core.routing.members import *  # noqa: F403
