"""Types of an old module path (rensei_routing/_moved.py)."""

from rensei_routing.plugins.default.vocabulary import *  # noqa: F403
