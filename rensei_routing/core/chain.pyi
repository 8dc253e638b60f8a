# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.audit.chain.
from rensei_routing.core.audit.chain import *
