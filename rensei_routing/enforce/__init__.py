"""Enforcement as a service: the ``Enforcer`` a spawn seam asks (not governed, an enforced route
with its lineage, or a typed refusal, each governed answer an audit record committed first),
and arming, disarming, gating and reading canaries (docs/enforcement.md). The rules are
``core.enforce``'s; the state is ``store.enforcement``'s. Never imports the CLI.
"""

from __future__ import annotations

from ..core.enforce.bound import NotGoverned
from ..core.enforce.route import EnforcedRoute
from ..errors import EnforcementError, EnforcementRefused
from .canary import Armed, arm, disarm, status
from .enforcer import Enforcer
from .gate import GateRun, run_gate

__all__ = [
    "Armed",
    "EnforcedRoute",
    "EnforcementError",
    "EnforcementRefused",
    "Enforcer",
    "GateRun",
    "NotGoverned",
    "arm",
    "disarm",
    "run_gate",
    "status",
]
