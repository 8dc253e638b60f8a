"""The plugin hook specifications (pluggy project ``rensei_routing``): what a plugin may add.

Each hook is called with keywords only. Hooks that contribute things take a ``register``
callback; the manager collects every contribution, sorts it by a stable key and refuses a name
claimed twice, so pluggy's LIFO call order never decides anything. Owns no behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from .core.shadow import Seam

PROJECT = "rensei_routing"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_seams(register: Callable[[Seam], None]) -> None:
    """Call ``register(seam)`` once per spawn seam this plugin serves.

    A :class:`~rensei_routing.core.shadow.Seam` names the seam, its request face, the ordered
    names of the legacy stages it applies and its legacy-mechanism classifier. Two plugins
    registering one seam name is a :class:`~rensei_routing.errors.PluginError` naming both.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Attach click commands or groups to the ``rensei`` root group ``cli``."""
