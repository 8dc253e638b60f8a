"""Shadow mode as a service: the recorder at a spawn seam (``recorder``), what a service at a
spawn seam holds over one home (``seam``, the recorder's base and the Enforcer's) and what-if
over the stored chain (``whatif``).

Owns the orchestration over the store; the comparison rules are ``core.shadow``. Never imports
the CLI. The package re-exports the recorder's names, which ``rensei_routing.shadow`` held as a
module before the re-layout (``record_route_shadow``, ``ShadowRecorder``, ...).
"""

from . import recorder
from .recorder import *  # noqa: F403 (the recorder's public names, as its __all__ lists them)

__all__ = recorder.__all__
