"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.store.audit.autocheckpoint import *  # noqa: F403
