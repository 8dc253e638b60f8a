# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.control.server.
from rensei_routing.control.server import *
