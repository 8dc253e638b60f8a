"""Shadow mode's rules: spawn lines, legacy-mechanism attribution and the comparison of a legacy
route with policy's (``compare``), what-if over recorded contexts, agreement reports.

Pure: the recorder at a seam and the replay over the stored chain are ``rensei_routing.shadow``.
Imports the routing domain and the shared pieces.

The package re-exports the comparison's names, which ``rensei_routing.core.shadow`` held as a
module before the re-layout (the seam plugins import them from here).
"""

from .compare import *  # noqa: F403  (the comparison's names, as its ``__all__`` lists them)
from .compare import __all__ as __all__
