# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.core.shadow.report.
from rensei_routing.core.shadow.report import *
