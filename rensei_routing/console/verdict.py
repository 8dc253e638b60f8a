"""How the console states the chain's verification: a banner on every page that reads the
chain, and the state of each stored checkpoint. A chain is shown as fine only by a finished
verification that covered the current head; anything else says what is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..core.audit.chain import Checkpoint
from .context import Console
from .html import esc, num
from .state import FULL_EVERY_S

#: Seconds after which a passed verification shows its age instead of ``ok``: twice the
#: schedule of full walks (:data:`.state.FULL_EVERY_S`), so only a walk that stopped coming shows.
STALE_AFTER_S: Final = 2 * FULL_EVERY_S

__all__ = ["CheckpointState", "chain_banner", "chain_state", "checkpoint_state"]


def _when(c: Console) -> str:
    last = c.verifier.last
    return "" if last is None else last.at.strftime("%Y-%m-%d %H:%M:%S UTC")


def chain_state(c: Console, head: tuple[int, str]) -> tuple[str, str]:
    """``(status, sentence)``: ``ok`` only for a verification of this very head that passed;
    ``fail`` for one that failed (at any head: a break stays a break); else ``warn``."""
    last = c.verifier.last
    if last is None:
        since = c.verifier.running_since
        extra = "" if since is None else f" (verifying since {since:%H:%M:%S} UTC)"
        return "warn", f"not verified yet{extra}: the result shows here when it is done"
    if last.error is not None:
        return "fail", f"could not be verified at {_when(c)}: {last.error}"
    result = last.result
    assert result is not None
    if not result:
        where = (
            "a stored checkpoint"
            if result.first_broken_seq is None
            else (f"seq {result.first_broken_seq}")
        )
        return "fail", (
            f"BROKEN: verification at {_when(c)} failed at {where}: {result.reason}"
            + (f" ({result.detail})" if result.detail else "")
        )
    covered = f"{num(result.records_checked - last.first_seq)} record(s) verified at {_when(c)}"
    if last.head != head:
        newer = max(0, head[0] - last.head[0])
        return "warn", f"{covered}; {num(newer)} appended since, not verified yet"
    walked = last.at if last.full_at is None else last.full_at
    age = max(0, int((c.clock() - walked).total_seconds()))
    if age > STALE_AFTER_S:
        return "warn", (
            f"verified {age // 60} min ago ({covered}; the whole chain last walked at "
            f"{walked:%H:%M:%S} UTC): not verified again since"
        )
    return "ok", f"verified: {covered} (whole chain walked {_ago(age)})"


def _ago(seconds: int) -> str:
    return f"{seconds} s ago" if seconds < 120 else f"{seconds // 60} min ago"


def chain_banner(c: Console, head: tuple[int, str] | None = None) -> str:
    """The banner for pages whose figures come from the chain (only broken or unknown show)."""
    if head is None:
        from ..store.audit import AuditLog

        with AuditLog.open(c.home, read_only=True) as log:
            head = log.head()
    status, text = chain_state(c, head)
    if status == "ok":
        return ""
    return f'<div class="banner {status}" id="chain-banner">Audit chain: {esc(text)}</div>'


@dataclass(frozen=True, slots=True)
class CheckpointState:
    """One stored checkpoint as the last verification saw it."""

    status: str
    text: str


def checkpoint_state(c: Console, cp: Checkpoint, head: tuple[int, str]) -> CheckpointState:
    """A checkpoint is ``verified`` when the last verification passed and covered it, ``broken``
    when the last verification failed (a failed checkpoint check fails the whole walk),
    ``pending`` otherwise."""
    last = c.verifier.last
    if last is None or last.result is None:
        return CheckpointState("warn", "not verified yet")
    result = last.result
    if not result:
        if result.first_broken_seq is not None and result.first_broken_seq >= cp.size:
            return CheckpointState(
                "warn", f"the chain breaks after it (seq {result.first_broken_seq})"
            )
        return CheckpointState("fail", f"broken: {result.reason}")
    if result.records_checked >= cp.size:
        return CheckpointState("ok", "verified: signature and head match the chain")
    return CheckpointState("warn", "covers records not verified yet")
