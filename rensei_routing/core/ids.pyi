# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.routing.ids.
from rensei_routing.core.routing.ids import *
