"""The trip rule, pure: when an armed canary disarms itself. A rate trip counts the canary's
enforced decisions and refusals in a trailing window; a corrupt policy store trips at once.
No clock: the service counts the window at the decision's own time and asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_TRIP_WINDOW_S",
    "POLICY_STORE_CORRUPT",
    "TRIP_FLOOR",
    "TRIP_REASONS",
    "TRIP_REFUSAL_RATE",
    "TripRule",
]

#: The refusals in the window exceeded the declared rate.
TRIP_REFUSAL_RATE: Final = "refusal-rate"
#: The pinned revision an armed call read does not load (or no longer has its pinned hash).
POLICY_STORE_CORRUPT: Final = "policy-store-corrupt"
TRIP_REASONS: Final = (TRIP_REFUSAL_RATE, POLICY_STORE_CORRUPT)
#: The smallest number of decisions a rate is taken over: with fewer decisions in the window,
#: the rate is refusals / TRIP_FLOOR, so the first refusal of a quiet canary does not read as
#: 100% (and a burst of refusals right after arming still trips).
TRIP_FLOOR: Final = 20
#: The trailing window of an arm that gives ``--trip-rate`` without ``--trip-window``, and the
#: window ``enforce status`` counts a canary's decisions over when it has no trip rule.
DEFAULT_TRIP_WINDOW_S: Final = 3_600


@dataclass(frozen=True, slots=True, kw_only=True)
class TripRule:
    """Trip when the refusals among the canary's decisions in the trailing ``window_s``
    seconds exceed ``rate`` (a fraction, 0 <= rate < 1) of ``max(decisions, TRIP_FLOOR)``."""

    rate: float
    window_s: int

    def trips(self, decisions: int, refusals: int) -> bool:
        """Whether ``refusals`` among ``decisions`` (the window's, this one included) trip."""
        return refusals > self.rate * max(decisions, TRIP_FLOOR)
