"""Ruleset snapshots: the signed envelope (``envelope``), its three ages (``freshness``), the org
data it carries (``org``), validators, the four decision-class postures and authorization.

Pure: fetching, caching and persisting are the host side's, signing keys the ``signing``
adapter's. Imports the routing domain and the shared pieces.

The package re-exports the envelope's names, which ``rensei_routing.core.snapshot`` held as a
module before the re-layout.
"""

from .envelope import *  # noqa: F403  (the envelope's names, as its ``__all__`` lists them)
from .envelope import __all__ as __all__
