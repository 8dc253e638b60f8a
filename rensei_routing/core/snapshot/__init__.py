"""Ruleset snapshots: the signed envelope (``envelope``), its three ages (``freshness``), the org
data it carries (``org``), validators, the four decision-class postures and authorization.

Pure: fetching, caching and persisting are the host side's, signing keys the ``signing``
adapter's. Imports the routing domain and the shared pieces.

The package re-exports the envelope's names, which ``rensei_routing.core.snapshot`` held as a
module before the re-layout.
"""

from .envelope import (
    ALGORITHM,
    MAX_SNAPSHOT_BYTES,
    SECTION_NAMES,
    RulesetSnapshot,
    SignedHeader,
    check_succession,
    content_hash,
    parse_snapshot,
    seal,
    verify_snapshot,
)

__all__ = [
    "ALGORITHM",
    "MAX_SNAPSHOT_BYTES",
    "SECTION_NAMES",
    "RulesetSnapshot",
    "SignedHeader",
    "check_succession",
    "content_hash",
    "parse_snapshot",
    "seal",
    "verify_snapshot",
]
