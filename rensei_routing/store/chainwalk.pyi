"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.store.audit.attest import *  # noqa: F403
from rensei_routing.store.audit.chainwalk import *  # noqa: F403
