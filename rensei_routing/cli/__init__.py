"""The ``rensei`` command line: the root group and every command module attached to it."""

from __future__ import annotations

from . import explain, policy  # noqa: F401  (each module attaches its commands to ``cli``)
from ._root import cli

__all__ = ["cli"]
