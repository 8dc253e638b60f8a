"""The ``rensei`` command line: the root group and every command module attached to it.

Plugin commands (``register_commands``) are not attached at import: the root group looks them
up per invocation, after ``--no-plugins`` is known (see ``_session``)."""

from __future__ import annotations

# each command module attaches its commands to ``cli`` when imported
from . import (  # noqa: F401
    audit,
    backup,
    doctor,
    explain,
    host,
    init,
    plugins,
    policy,
    quickstart,
    shadow,
    snapshot,
    whatif,
)
from ._root import cli

__all__ = ["cli"]
