# Type information for an old module path (rensei_routing/_moved.py): rensei_routing.plugins.default.vocabulary.
from rensei_routing.plugins.default.vocabulary import *
