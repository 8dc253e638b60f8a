"""The ``rensei`` command line: the root group and every command module attached to it."""

from __future__ import annotations

# each command module attaches its commands to ``cli`` when imported
from . import audit, explain, init, policy, shadow, whatif  # noqa: F401
from ._root import cli

__all__ = ["cli"]
