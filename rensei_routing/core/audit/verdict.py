"""The verdict of a chain walk: :class:`VerifyResult` and its reason codes. Pure; split from
:mod:`.chain` (which re-exports every name) so the walk's pieces (:mod:`.chain`, :mod:`.ranges`)
share one result type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from ..canonical import SHA256_PREFIX

__all__ = ["GENESIS_HASH", "REASONS", "Reason", "VerifyResult", "broken"]

GENESIS_HASH: Final = SHA256_PREFIX + "0" * 64

Reason = Literal[
    "seq-gap",
    "prev-hash-mismatch",
    "payload-hash-mismatch",
    "record-hash-mismatch",
    "unparseable-record",
    "truncated-below-checkpoint",
    "checkpoint-signature-invalid",
    # a catalogue row of the segmented chain (sealed or pruned) that no statement of its
    # kind signed by the host key covers (see .anchors): reported by the walk over segments,
    # never by verify_chain, so it is not in REASONS
    "segment-unattested",
    # the Merkle tree stored under the chain (store/audit/tree.py), checked after the chain
    # walk holds: hashes missing, a stored hash not the one recomputed from the records,
    # hashes past the head, a tree-root checkpoint whose root is not the tree's at its size
    "tree-truncated",
    "tree-node-mismatch",
    "tree-overrun",
    "checkpoint-root-mismatch",
]
#: Every reason code :func:`verify_chain` can report, in the order checks run on one record.
REASONS: Final[tuple[Reason, ...]] = (
    "unparseable-record",
    "seq-gap",
    "prev-hash-mismatch",
    "payload-hash-mismatch",
    "record-hash-mismatch",
    "truncated-below-checkpoint",
    "checkpoint-signature-invalid",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyResult:
    """What :func:`verify_chain` found; truthy when the chain (and every checkpoint) holds.

    ``first_broken_seq`` is the seq at which the chain stops holding (records below it verified),
    ``None`` when intact or when a checkpoint itself is untrustworthy.
    """

    ok: bool
    records_checked: int
    first_broken_seq: int | None = None
    reason: Reason | None = None
    detail: str = ""
    head_hash: str = GENESIS_HASH
    checkpoints_checked: int = 0

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict[str, Any]:
        """JSON form (keys as the field names)."""
        return {
            "ok": self.ok,
            "records_checked": self.records_checked,
            "first_broken_seq": self.first_broken_seq,
            "reason": self.reason,
            "detail": self.detail,
            "head_hash": self.head_hash,
            "checkpoints_checked": self.checkpoints_checked,
        }


def broken(
    checked: int, seq: int | None, reason: Reason, detail: str, head: str = GENESIS_HASH
) -> VerifyResult:
    """A failed verdict: ``checked`` records verified, the first broken at ``seq``."""
    return VerifyResult(
        ok=False,
        records_checked=checked,
        first_broken_seq=seq,
        reason=reason,
        detail=detail,
        head_hash=head,
    )
