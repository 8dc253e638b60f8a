"""The hash-chained audit log of one home: the chain, its segments, the walk that verifies them,
rotation and pruning, checkpoints, all in the home database (``audit_*`` tables) and the sealed
segment files under ``<home>/audit/segments/``.

The modules form a DAG, lowest first: :mod:`.segments` (the catalogue, sealed files, reading
across them), :mod:`.attest` (what is signed and what a row is held to), :mod:`.tree` (the
Merkle tree stored under the chain), :mod:`.handle` (one log's connections and keys),
:mod:`.group` (the commit queue one process's appends share), :mod:`.recovery` (the directory
reconciled with the catalogue), :mod:`.chainwalk` (verification across segments),
:mod:`.rotation` (seal and prune), :mod:`.autocheckpoint`, :mod:`.reattest`, and :mod:`.log`
(:class:`AuditLog`, which uses them all). None imports one above it. The names below are the
package's public API.
"""

from __future__ import annotations

from ..notes import read_checkpoint
from .chainwalk import ChainVerdict
from .log import APPEND_CHUNK, AppendResult, AuditLog
from .rotation import Rotation
from .segments import Segment

__all__ = [
    "APPEND_CHUNK",
    "AppendResult",
    "AuditLog",
    "ChainVerdict",
    "Rotation",
    "Segment",
    "read_checkpoint",
]
