"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.store.audit.recovery import *  # noqa: F403
from rensei_routing.store.audit.segments import *  # noqa: F403
