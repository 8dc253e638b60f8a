"""Shadow mode as a service: the recorder at a spawn seam (``recorder``) and what-if over the
stored chain (``whatif``).

Owns the orchestration over the store; the comparison rules are ``core.shadow``. Never imports
the CLI. The package re-exports the recorder's names, which ``rensei_routing.shadow`` held as a
module before the re-layout (``record_route_shadow``, ``ShadowRecorder``, ...).
"""

from .recorder import (
    SINK_ERRORS,
    ShadowRecorder,
    record_route_shadow,
    set_shadow_enabled,
    shadow_enabled,
    utc_now,
)

__all__ = [
    "SINK_ERRORS",
    "ShadowRecorder",
    "record_route_shadow",
    "set_shadow_enabled",
    "shadow_enabled",
    "utc_now",
]
