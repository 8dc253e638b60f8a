# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.snapshot.freshness.
from rensei_routing.core.snapshot.freshness import *
