"""The accounts half of SEMANTICS step 5: which of a context's account entries a winning
action lets serve, in its pool's order, and why each other entry cannot. Pure: no I/O, no
clock, no state; the resolver (:mod:`.resolver`) keeps the judgements it asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .explanation import (
    ADMINISTRATIVE_DISABLED,
    ADMINISTRATIVE_DRAINING,
    LITERAL_FAMILY_INCOMPATIBLE,
    NOT_CONFIGURED,
    NOT_IN_POOL,
    PROVIDER_LOCK_MISMATCH,
    RejectedAccount,
)
from .members import Account
from .policy import RoutingAction, account_key

__all__ = ["judge_accounts"]

_ADMIN_REASON: Final = {"disabled": ADMINISTRATIVE_DISABLED, "draining": ADMINISTRATIVE_DRAINING}


def judge_accounts(
    accounts: tuple[Account, ...],
    action: RoutingAction,
    lane: tuple[str, ...] | None,
    rejection: Callable[[str, str], RejectedAccount],
) -> tuple[tuple[str, ...], tuple[RejectedAccount, ...], str | None, str | None, bool]:
    """The accounts half of step 5: ``(eligible ids, rejected entries, chosen id, chosen
    binding, whether the lane excluded any)``, the chosen entry ``None`` when none is
    eligible. ``rejection`` gives the (shared, immutable) entry for an account id and a reason.
    """
    lock = action.provider_lock
    pool = action.pool_order() if action.account_pool else None
    eligible: list[Account] = []
    rejected: list[RejectedAccount] = []
    for account in accounts:
        # Each entry on its own, in SEMANTICS order.
        why: str | None
        if not account.configured:
            why = NOT_CONFIGURED
        else:
            why = _ADMIN_REASON.get(account.administrative_state)
            if why is not None:
                pass
            elif lock is not None and account.provider_binding != lock:
                why = PROVIDER_LOCK_MISMATCH
            elif pool is not None and account_key(account.account_id) not in pool:
                why = NOT_IN_POOL
            elif lane is not None and account.provider_binding not in lane:
                why = LITERAL_FAMILY_INCOMPATIBLE
        if why is None:
            eligible.append(account)
        else:
            rejected.append(rejection(account.account_id, why))
    # Stable sorts: entries that share an id keep their context order.
    if len(eligible) > 1:
        if pool is not None:
            eligible.sort(key=lambda a: pool[account_key(a.account_id)])
        else:
            eligible.sort(key=lambda a: a.account_id)
    if len(rejected) > 1:
        rejected.sort(key=lambda r: r.account_id)
    # The chosen *entry*: with duplicate ids, its own binding, not another entry's.
    chosen = eligible[0] if eligible else None
    return (
        tuple([a.account_id for a in eligible]),
        tuple(rejected),
        None if chosen is None else chosen.account_id,
        None if chosen is None else chosen.provider_binding,
        any(r.reason == LITERAL_FAMILY_INCOMPATIBLE for r in rejected),
    )
