"""The canary's bound, pure: which spawns an armed canary governs (one canonical ``owner/repo``
on the governed transport), why any other spawn is not governed, the armed canary's state as a
value, and the codes of every answer. No I/O: the service reads the armed canaries and asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..routing.members import RepoIdentity
from ..shadow.compare import GATEWAY

__all__ = [
    "ANSWERS",
    "GOVERNED_TRANSPORT",
    "HELD",
    "LOSSY_REPO",
    "NOTHING_ARMED",
    "NOT_GATEWAY",
    "NOT_GOVERNED_REASONS",
    "NO_REPO",
    "REFUSAL_CODES",
    "REJECTED",
    "REPO_NOT_ARMED",
    "TRIPPED",
    "Canary",
    "NotGoverned",
    "bound_of",
    "repo_key",
    "transport_bound",
]

#: The one transport a canary governs: it never moves a spawn onto it, only governs spawns on it.
GOVERNED_TRANSPORT: Final = GATEWAY

# Why a spawn is not governed (it runs exactly as before).
NOTHING_ARMED: Final = "nothing-armed"
NO_REPO: Final = "no-repo"
LOSSY_REPO: Final = "lossy-repo"
REPO_NOT_ARMED: Final = "repo-not-armed"
NOT_GATEWAY: Final = "not-gateway"
NOT_GOVERNED_REASONS: Final = (NOTHING_ARMED, NO_REPO, LOSSY_REPO, REPO_NOT_ARMED, NOT_GATEWAY)

# Why a governed spawn is refused (``EnforcementRefused.code``).
HELD: Final = "held"
REJECTED: Final = "rejected"
TRIPPED: Final = "tripped"
REFUSAL_CODES: Final = (HELD, REJECTED, TRIPPED)

#: What an enforced-decision record says the canary answered: a route (``enforced`` or
#: ``legacy-compatible``, the kinds of ``EnforcedRoute``) or a refusal code.
ANSWERS: Final = ("enforced", "legacy-compatible", HELD, REJECTED)


@dataclass(frozen=True, slots=True)
class NotGoverned:
    """No armed canary covers this spawn: it runs exactly as it would without enforcement.
    ``reason`` is one of :data:`NOT_GOVERNED_REASONS`. Falsy, so ``if answer:`` reads "governed"."""

    reason: str

    def __bool__(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"governed": False, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class Canary:
    """One repository's canary as stored: armed or not, the revision it enforces (pinned, with
    that revision's policy hash), the gate verdict that armed it, its trip rule, and how it
    ended if it did (``tripped`` with ``trip_reason``, or disarmed)."""

    repo: str
    armed: bool
    revision: int
    policy_hash: str
    gate_seq: int | None
    arm_seq: int
    override: bool
    trip_rate: float | None
    trip_window_s: int | None
    armed_at: str
    armed_at_us: int
    actor: str
    tripped: bool = False
    trip_reason: str | None = None
    ended_at: str | None = None
    ended_seq: int | None = None

    @property
    def state(self) -> str:
        """``armed``, ``tripped`` or ``disarmed``."""
        return "armed" if self.armed else "tripped" if self.tripped else "disarmed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "state": self.state,
            "transport": GOVERNED_TRANSPORT,
            "pinned_revision": self.revision,
            "policy_hash": self.policy_hash,
            "gate_seq": self.gate_seq,
            "arm_seq": self.arm_seq,
            "override": self.override,
            "trip_rate": self.trip_rate,
            "trip_window_s": self.trip_window_s,
            "armed_at": self.armed_at,
            "actor": self.actor,
            "trip_reason": self.trip_reason,
            "ended_at": self.ended_at,
            "ended_seq": self.ended_seq,
        }


def repo_key(repo: RepoIdentity | None) -> str | NotGoverned:
    """The canonical ``owner/repo`` a canary could cover, or why none can: no repository, or a
    lossy slug (it never matches, even when its text equals an armed repository's)."""
    if repo is None:
        return NotGoverned(NO_REPO)
    if not repo.canonical:
        return NotGoverned(LOSSY_REPO)
    return repo.value


def bound_of(repo: RepoIdentity | None, armed: Mapping[str, Canary]) -> Canary | NotGoverned:
    """The armed canary covering a spawn's ``repo``, or why none does. ``armed`` holds the
    armed canaries by repository. The checks, in order: anything armed, a repository, a
    canonical one, armed. The transport is checked next (:func:`transport_bound`), once the
    seam has classified the spawn's route."""
    if not armed:
        return NotGoverned(NOTHING_ARMED)
    key = repo_key(repo)
    if isinstance(key, NotGoverned):
        return key
    canary = armed.get(key)
    return NotGoverned(REPO_NOT_ARMED) if canary is None else canary


def transport_bound(transport: str) -> NotGoverned | None:
    """``None`` when a spawn's route runs on the governed transport, else why it is not
    governed: a canary never moves a spawn onto the gateway, so a spawn elsewhere is left as is."""
    return None if transport == GOVERNED_TRANSPORT else NotGoverned(NOT_GATEWAY)
