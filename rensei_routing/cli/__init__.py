"""The ``rensei`` command line: the root group and every command module attached to it."""

from __future__ import annotations

from ._root import cli

__all__ = ["cli"]
