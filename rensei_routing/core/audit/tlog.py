"""The proof files of the audit log's tree: C2SP ``tlog-proof`` (one record's inclusion, with
the checkpoint it is proven against) and the body of C2SP ``tlog-witness``'s add-checkpoint
request (a consistency proof from an old size to a checkpoint). Pure: parses and writes text
and checks proofs by :mod:`.merkle` and signatures by :mod:`.cosignature`; reading files and
keys is the caller's.

A tlog-proof reads::

    c2sp.org/tlog-proof@v1
    extra <base64 of opaque bytes>       (optional)
    index <leaf index>
    <base64 hash>                        (the audit path, leaf's sibling first; zero or more)

    <checkpoint note, signatures and cosignatures included>

An add-checkpoint body reads::

    old <size of the older checkpoint>
    <base64 hash>                        (the consistency proof; none when old is 0)

    <checkpoint note>

Both are strict: every line ends in a newline, decimals have no leading zero, base64 is
canonical, hashes are 32 bytes, at most 63 of them; anything else is an
:class:`~rensei_routing.errors.EvidenceFormatError` (verdict ``malformed``), or a
:class:`~rensei_routing.errors.CheckpointFormatError` for the note itself.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ...errors import CheckpointRejectedError, EvidenceFormatError
from .archive import MAX_LINE_BYTES
from .cosignature import Check, PolicyResult, WitnessPolicy, check_checkpoint
from .merkle import HASH_SIZE, leaf_hash, verify_consistency, verify_inclusion
from .note import Checkpoint, bounded_text, decode_b64, parse_checkpoint

__all__ = [
    "ADD_CHECKPOINT_MAX_BYTES",
    "MAX_PROOF_LINES",
    "PROOF_HEADER",
    "PROOF_MAX_BYTES",
    "AddCheckpoint",
    "TlogProof",
    "check_consistent",
    "parse_add_checkpoint",
    "parse_tlog_proof",
    "verify_tlog_proof",
]

PROOF_HEADER: Final = "c2sp.org/tlog-proof@v1"
#: At most this many hash lines (a tree of under 2**63 leaves needs no more).
MAX_PROOF_LINES: Final = 63
#: A proof file's limit: an ``extra`` line holding one exported record, and the rest.
PROOF_MAX_BYTES: Final = 4 * (MAX_LINE_BYTES // 3 + 1) + 64 * 1024
#: An add-checkpoint body's limit (a checkpoint note and at most 63 hash lines fit well within).
ADD_CHECKPOINT_MAX_BYTES: Final = 64 * 1024
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
_MAX_INT: Final = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TlogProof:
    """One leaf's inclusion proof against a signed checkpoint, with optional ``extra`` bytes
    (not authenticated by the proof: our log puts the record's export line there)."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: Checkpoint
    extra: bytes | None = None

    def to_text(self) -> str:
        """The proof file's text."""
        lines = [PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + _b64(self.extra))
        lines.append(f"index {self.index}")
        lines.extend(_b64(h) for h in self.proof)
        return "".join(f"{line}\n" for line in lines) + "\n" + self.checkpoint.to_text()


def parse_tlog_proof(text: str | bytes) -> TlogProof:
    """Parse a ``c2sp.org/tlog-proof@v1`` file (nothing is verified).

    Raises:
        EvidenceFormatError: the header, ``extra``, ``index`` or a hash line is malformed, or
            the file is too long or not UTF-8.
        CheckpointFormatError: the checkpoint note is malformed.
    """
    head, note = _split(text, PROOF_MAX_BYTES, "proof")
    if not head or head[0] != PROOF_HEADER:
        raise EvidenceFormatError(f"a proof starts with the line {PROOF_HEADER}")
    rest = head[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = _unb64(rest[0][len("extra ") :], "the extra line")
        if not extra:
            raise EvidenceFormatError("the extra line is empty")
        rest = rest[1:]
    if not rest or not rest[0].startswith("index "):
        raise EvidenceFormatError("a proof needs an 'index N' line")
    index = _decimal(rest[0][len("index ") :], "index")
    return TlogProof(
        index=index, proof=_hashes(rest[1:]), checkpoint=parse_checkpoint(note), extra=extra
    )


def verify_tlog_proof(
    proof: TlogProof, leaf: bytes, policy: WitnessPolicy, check: Check
) -> PolicyResult:
    """Check ``proof`` for the leaf data ``leaf`` (a record's 32 hash bytes): the checkpoint
    under ``policy``, then the audit path from the leaf to the checkpoint's root.

    Raises:
        CheckpointRejectedError: the checkpoint fails the policy (its verdict).
        ProofError: ``inclusion-failed``: the path does not lead to the checkpoint's root.
    """
    result = check_checkpoint(proof.checkpoint, policy, check)
    cp = proof.checkpoint
    verify_inclusion(proof.index, cp.size, leaf_hash(leaf), proof.proof, cp.root)
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class AddCheckpoint:
    """The body of a tlog-witness add-checkpoint request: the consistency proof from the tree
    of ``old_size`` leaves to ``checkpoint``."""

    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: Checkpoint

    def to_text(self) -> str:
        """The request body's text."""
        lines = [f"old {self.old_size}", *(_b64(h) for h in self.proof)]
        return "".join(f"{line}\n" for line in lines) + "\n" + self.checkpoint.to_text()


def parse_add_checkpoint(text: str | bytes) -> AddCheckpoint:
    """Parse an add-checkpoint request body (nothing is verified but its shape).

    Raises:
        EvidenceFormatError: the ``old`` or a hash line is malformed, the old size is above the
            checkpoint's, or a proof is given from size 0.
        CheckpointFormatError: the checkpoint note is malformed.
    """
    head, note = _split(text, ADD_CHECKPOINT_MAX_BYTES, "add-checkpoint body")
    if not head or not head[0].startswith("old "):
        raise EvidenceFormatError("an add-checkpoint body starts with an 'old N' line")
    old = _decimal(head[0][len("old ") :], "old size")
    proof = _hashes(head[1:])
    checkpoint = parse_checkpoint(note)
    if old > checkpoint.size:
        raise EvidenceFormatError(f"old size {old} is above the checkpoint's {checkpoint.size}")
    if old == 0 and proof:
        raise EvidenceFormatError("a consistency proof from size 0 must be empty")
    return AddCheckpoint(old_size=old, proof=proof, checkpoint=checkpoint)


def check_consistent(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Check that ``new`` extends ``old`` (same origin) by the consistency ``proof``. The
    signatures are the caller's to check (:func:`.cosignature.check_checkpoint`).

    Raises:
        CheckpointRejectedError: ``other-origin``: the two are of different logs.
        ProofError: ``inconsistent``: a smaller new size, another root at the same size, or a
            proof that does not hold.
    """
    if old.origin != new.origin:
        raise CheckpointRejectedError(
            "other-origin", f"checkpoints of {old.origin!r} and {new.origin!r}"
        )
    verify_consistency(old.size, new.size, old.root, new.root, proof)


# -- lines --------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    return decode_b64(text, what, EvidenceFormatError)


def _decimal(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) > _MAX_INT:
        raise EvidenceFormatError(f"the {what} is not a decimal without leading zeros")
    return int(text)


def _hashes(lines: Sequence[str]) -> tuple[bytes, ...]:
    if len(lines) > MAX_PROOF_LINES:
        raise EvidenceFormatError(f"more than {MAX_PROOF_LINES} proof hashes")
    out = []
    for line in lines:
        h = _unb64(line, "a proof hash line")
        if len(h) != HASH_SIZE:
            raise EvidenceFormatError("a proof hash is not 32 bytes")
        out.append(h)
    return tuple(out)


def _split(text: str | bytes, limit: int, what: str) -> tuple[list[str], str]:
    """The lines before the first blank line, and the note after it."""
    decoded = bounded_text(text, limit, what, EvidenceFormatError)
    split = decoded.find("\n\n")
    if split < 0:
        raise EvidenceFormatError(f"{what} has no blank line before its checkpoint")
    head = decoded[:split]
    if any(c < " " and c != "\n" for c in head) or "\x7f" in head:
        raise EvidenceFormatError(f"{what} contains control characters")
    return head.split("\n"), decoded[split + 2 :]
