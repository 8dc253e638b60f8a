# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.shadow.spawn.
from rensei_routing.core.shadow.spawn import *
