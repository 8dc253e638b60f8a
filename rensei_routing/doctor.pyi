# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.ops.doctor.
from rensei_routing.ops.doctor import *
