"""The two forms of a checkpoint note: what its hash line is. Pure.

* **tree-root** (written from this release on): the hash line is the RFC 6962 root of the log's
  Merkle tree at the note's size (:mod:`.merkle`), as a C2SP tlog-checkpoint's is, and the body
  carries one more extension line, ``rensei-head: sha256:<hex>``, the ``record_hash`` of record
  ``size - 1`` (the genesis hash for size 0). The line is signed with the rest of the body, so
  a reader that holds only the chain (an export, the console, the fleet) still holds the note
  to the chain's head, and a verifier that knows only tlog reads the root as any checkpoint's.
* **head-hash** (every earlier release): no such line; the hash line is the head record's hash.

A note is of the tree-root form exactly when it carries the ``rensei-head:`` line.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from ..canonical import SHA256_PREFIX
from .note import Checkpoint

__all__ = ["HEAD_LINE", "Form", "chain_head", "form", "root_of", "tree_note"]

#: The start of a tree-root note's head line.
HEAD_LINE: Final = "rensei-head: "
_HEAD: Final = re.compile(r"sha256:[0-9a-f]{64}")

Form = Literal["tree-root", "head-hash"]


def _head_lines(cp: Checkpoint) -> list[str]:
    return [e[len(HEAD_LINE) :] for e in cp.extensions if e.startswith(HEAD_LINE)]


def form(cp: Checkpoint) -> Form:
    """Which form ``cp`` is (see the module docstring)."""
    return "tree-root" if _head_lines(cp) else "head-hash"


def chain_head(cp: Checkpoint) -> str:
    """The chain head ``cp`` names: its ``rensei-head:`` line (tree-root form) or its hash line
    (head-hash form). A tree-root note with more than one head line, or a malformed one, names
    no head any record has (``sha256:`` alone)."""
    lines = _head_lines(cp)
    if not lines:
        return cp.head_hash
    if len(lines) != 1 or not _HEAD.fullmatch(lines[0]):
        return SHA256_PREFIX
    return lines[0]


def root_of(cp: Checkpoint) -> bytes | None:
    """The tree root a tree-root note states (its hash line's 32 bytes); ``None`` for the
    head-hash form."""
    if form(cp) != "tree-root":
        return None
    return bytes.fromhex(cp.head_hash[len(SHA256_PREFIX) :])


def tree_note(
    origin: str, size: int, root: bytes, head_hash: str, extensions: tuple[str, ...] = ()
) -> Checkpoint:
    """The unsigned tree-root note of ``size`` records: hash line ``root``, then
    ``extensions`` and the head line naming ``head_hash``."""
    return Checkpoint(
        origin=origin,
        size=size,
        head_hash=SHA256_PREFIX + root.hex(),
        extensions=(*extensions, HEAD_LINE + head_hash),
    )
