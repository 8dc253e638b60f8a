"""Segment statements: what a seal or a prune of an audit segment asserts, as a line of its own
in a signed checkpoint note. Pure: builds the line and the unsigned note, and compares a note
with the catalogue row it must cover; signing and checking the signature are the adapter's
(:mod:`rensei_routing.store.audit.chainwalk`, :mod:`rensei_routing.store.audit.rotation`).

A sealed segment's note carries, after ``payloads: strict-json``::

    rensei-segment: sealed <first seq> <last seq> <prev hash>

and a pruned segment's (signed when the prune checked the export)::

    rensei-segment: pruned <first seq> <last seq> <prev hash> <export sha256>

with the note's size ``last + 1`` and its head the segment's head hash. The line is covered by
the signature like the rest of the body, so no ordinary checkpoint (which never carries it) can
pose as a seal or as a prune anchor, a seal cannot pose as a prune, and a statement about one
range or export says nothing about another. A note is still a checkpoint of the log (its size
and head are true of the chain), which is why a statement is one more line and not a format of
its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from .note import STRICT_PAYLOADS, Checkpoint
from .treehead import chain_head, tree_note

__all__ = ["SEGMENT_LINE", "SegmentClaim", "claim_problem", "stated"]

#: The start of a segment statement's extension line.
SEGMENT_LINE: Final = "rensei-segment: "

Kind = Literal["sealed", "pruned"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentClaim:
    """What a catalogue row asserts: records ``first_seq..last_seq``, the first linking to
    ``prev_hash``, the last hashing to ``head_hash``; pruned, with the export's SHA-256."""

    kind: Kind
    first_seq: int
    last_seq: int
    prev_hash: str
    head_hash: str
    export_sha256: str | None = None

    @property
    def line(self) -> str:
        """The statement's extension line."""
        parts = [self.kind, str(self.first_seq), str(self.last_seq), self.prev_hash]
        if self.kind == "pruned":
            parts.append(self.export_sha256 or "-")
        return SEGMENT_LINE + " ".join(parts)

    def note(self, origin: str, root: bytes | None = None) -> Checkpoint:
        """The unsigned note stating this claim: a checkpoint of ``last + 1`` records and the
        head, with ``payloads: strict-json`` (the records were parsed when they were sealed)
        and the statement line; of the tree-root form (:mod:`.treehead`) when ``root``, the
        tree's root at that size, is given."""
        if root is not None:
            return tree_note(
                origin, self.last_seq + 1, root, self.head_hash, (STRICT_PAYLOADS, self.line)
            )
        return Checkpoint(
            origin=origin,
            size=self.last_seq + 1,
            head_hash=self.head_hash,
            extensions=(STRICT_PAYLOADS, self.line),
        )


def stated(cp: Checkpoint) -> tuple[str, ...]:
    """The segment statement lines ``cp`` carries (an ordinary checkpoint: none)."""
    return tuple(e for e in cp.extensions if e.startswith(SEGMENT_LINE))


def claim_problem(cp: Checkpoint, claim: SegmentClaim) -> str | None:
    """Why ``cp`` (whose signature the caller checks) does not state exactly ``claim``, or
    ``None`` when it does: one statement line, equal to the claim's, at the claim's size and
    head."""
    lines = stated(cp)
    if not lines:
        return "states no segment (an ordinary checkpoint, or a note of an earlier release)"
    if len(lines) > 1:
        return "states more than one segment"
    if lines[0] != claim.line:
        said = lines[0][len(SEGMENT_LINE) :]
        kind = said.split(" ", 1)[0]
        if kind != claim.kind and kind in ("sealed", "pruned"):
            return f"states a {kind} segment, not a {claim.kind} one ({said})"
        return f"states another segment or export ({said})"
    if (cp.size, chain_head(cp)) != (claim.last_seq + 1, claim.head_hash):
        return "does not end at the segment's head"
    return None
