"""The ``rensei`` command line: the root group. Built-in commands are imported when used (see
``_root.BUILTIN``); plugin commands (``register_commands``) are looked up per invocation, after
``--no-plugins`` is known (see ``_session``)."""

from __future__ import annotations

from ._root import cli

__all__ = ["cli"]
