# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.shadow.whatif.
from rensei_routing.core.shadow.whatif import *
