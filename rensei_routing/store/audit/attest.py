"""What the audit store signs and what it holds a signed note to: a checkpoint of a head
(:func:`sign`), the statement of a segment's seal or prune (:func:`sign_claim`, the claims are
:mod:`...core.audit.anchors`'), and whether a catalogue row is covered by one signed with the
host key (:func:`unattested`, :func:`signed_head`). Owns no table and reads no database.
"""

from __future__ import annotations

from ... import signing
from ...core.audit.anchors import SegmentClaim, claim_problem
from ...core.audit.chain import (
    STRICT_PAYLOADS,
    Checkpoint,
    NoteSignature,
    note_key_hash,
    parse_checkpoint,
)
from ...core.audit.treehead import chain_head, tree_note
from ...errors import CheckpointFormatError
from .segments import Segment

__all__ = ["claim_of", "sign", "sign_claim", "signed_head", "unattested"]


def sign(
    key: signing.PrivateKey,
    origin: str,
    size: int,
    head_hash: str,
    line: str = STRICT_PAYLOADS,
    root: bytes | None = None,
) -> Checkpoint:
    """A checkpoint of ``size`` records ending at ``head_hash``, signed by ``key``, carrying
    ``line`` (by default ``payloads: strict-json``: its signer verified every record strictly);
    of the tree-root form (:mod:`...core.audit.treehead`) when ``root`` (the tree's root at
    ``size``) is given, else of the head-hash form."""
    cp = (
        Checkpoint(origin=origin, size=size, head_hash=head_hash, extensions=(line,))
        if root is None
        else tree_note(origin, size, root, head_hash, (line,))
    )
    key_hash = note_key_hash(origin, key.public_key.raw)
    return cp.with_signature(
        NoteSignature(name=origin, key_hash=key_hash, signature=key.sign(cp.body))
    )


def sign_claim(
    key: signing.PrivateKey, origin: str, claim: SegmentClaim, root: bytes | None = None
) -> Checkpoint:
    """The statement of ``claim`` (a seal or a prune, :mod:`..core.audit.anchors`): a
    checkpoint of the segment's head carrying its statement line, signed by ``key``."""
    cp = claim.note(origin, root)
    key_hash = note_key_hash(origin, key.public_key.raw)
    return cp.with_signature(
        NoteSignature(name=origin, key_hash=key_hash, signature=key.sign(cp.body))
    )


def claim_of(segment: Segment) -> SegmentClaim:
    """What ``segment``'s catalogue row asserts."""
    return SegmentClaim(
        kind="pruned" if segment.pruned else "sealed",
        first_seq=segment.first_seq,
        last_seq=segment.last_seq,
        prev_hash=segment.prev_hash,
        head_hash=segment.head_hash,
        export_sha256=segment.export_sha256,
    )


def _signed(segment: Segment, origin: str, public: signing.PublicKey) -> Checkpoint | str:
    """``segment``'s note, parsed and signed by ``public`` for ``origin``; else why not."""
    try:
        cp = parse_checkpoint(segment.note)
    except CheckpointFormatError as e:
        return f"its note is unreadable: {e}"
    sig = cp.signature_by(origin, note_key_hash(origin, public.raw))
    if cp.origin != origin or sig is None or not signing.check(public, cp.body, sig):
        return "its note is not signed by this host's key"
    return cp


def unattested(segment: Segment, origin: str, public: signing.PublicKey) -> str | None:
    """Why no statement of its kind signed by ``public`` covers ``segment``'s catalogue row
    (a seal for a sealed segment, a prune statement for a pruned one, naming exactly its
    range, first link, head and export digest), or ``None`` when one does."""
    kind = "pruned" if segment.pruned else "sealed"
    found = _signed(segment, origin, public)
    why = found if isinstance(found, str) else claim_problem(found, claim_of(segment))
    if why is None:
        return None
    what = why if isinstance(found, str) else f"its note {why}"
    if segment.pruned:
        fix = (
            "if an earlier release pruned it, `rensei audit reattest --exported FILE` checks "
            "the export and signs it"
        )
        stmt = "prune statement"
    else:
        fix = (
            "if an earlier release sealed it, `rensei audit reattest` re-signs it from its records"
        )
        stmt = "seal"
    return (
        f"segment {segment.name} is {kind}, but no {stmt} signed by this host's key covers it: "
        f"{what}; {fix}"
    )


def signed_head(segment: Segment, origin: str, public: signing.PublicKey) -> str | None:
    """Why ``segment``'s note is not a checkpoint signed by ``public`` of exactly its size and
    head (any kind of note: an earlier release's seal, a checkpoint), or ``None`` when it is.
    Such a note pins, through SHA-256, every record up to the segment's head."""
    found = _signed(segment, origin, public)
    if isinstance(found, str):
        return f"segment {segment.name}: {found}"
    if (found.size, chain_head(found)) != (segment.last_seq + 1, segment.head_hash):
        return f"segment {segment.name}: its note does not end at the segment's head"
    return None
