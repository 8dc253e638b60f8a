"""The module paths of before the re-layout (docs/architecture.md, "Old module paths"), still
importable until 0.3.0, each with a ``DeprecationWarning`` naming its new path.

Plugins written against the flat layout import ``rensei_routing.core.authz``,
``rensei_routing.core.shadow``, ``rensei_routing.hookspecs`` and so on. Each old name that is no
longer a module of its own resolves, on first import, to the module that now holds its code: the
same module object, so a name patched or read through either path is one name. Nothing is
imported until an old path is asked for, and no old path is used inside the package (the
layering test checks that).

Two old modules were split in two (``core.decision`` into ``core.routing.decision`` and
``core.routing.explanation``; ``core.context`` into ``core.routing.context`` and
``core.routing.members``): their old paths load a module of their own holding every name of both
(the same objects), so everything they exported still imports from them.

The first import of an old path in a process warns (:data:`REMOVED_IN` is the release that drops
it); later imports find it in ``sys.modules`` and stay quiet. The warning is attributed to the
line that imported the old path (the import system's own frames skipped), so Python's default
filters show it when that line is in ``__main__`` and test runners show it for test code.

Old paths that became packages (``rensei_routing.plugins``, ``rensei_routing.shadow``,
``rensei_routing.control``, ``rensei_routing.core.snapshot``, ``rensei_routing.core.shadow``)
need no alias: the package re-exports the names the module had.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

#: The release that removes the old paths (CHANGELOG.md, "Deprecated").
REMOVED_IN: Final = "0.3.0"

#: Old dotted path -> the module that holds its code now (or, for a split module, the modules,
#: the one that holds the old name's main class last).
MOVED: Final[dict[str, str | tuple[str, ...]]] = {
    "rensei_routing.core.vocabulary": "rensei_routing.core.routing.vocabulary",
    "rensei_routing.core.context": (
        "rensei_routing.core.routing.members",
        "rensei_routing.core.routing.context",
    ),
    "rensei_routing.core._quick": "rensei_routing.core.routing._quick",
    "rensei_routing.core.policy": "rensei_routing.core.routing.policy",
    "rensei_routing.core.validation": "rensei_routing.core.routing.validation",
    "rensei_routing.core.index": "rensei_routing.core.routing.index",
    "rensei_routing.core.resolver": "rensei_routing.core.routing.resolver",
    "rensei_routing.core.decision": (
        "rensei_routing.core.routing.explanation",
        "rensei_routing.core.routing.decision",
    ),
    "rensei_routing.core.ids": "rensei_routing.core.routing.ids",
    "rensei_routing.core.jsonl": "rensei_routing.core.routing.jsonl",
    "rensei_routing.core.chain": "rensei_routing.core.audit.chain",
    "rensei_routing.core.note": "rensei_routing.core.audit.note",
    "rensei_routing.core.archive": "rensei_routing.core.audit.archive",
    "rensei_routing.core.freshness": "rensei_routing.core.snapshot.freshness",
    "rensei_routing.core.org": "rensei_routing.core.snapshot.org",
    "rensei_routing.core.validators": "rensei_routing.core.snapshot.validators",
    "rensei_routing.core.postures": "rensei_routing.core.snapshot.postures",
    "rensei_routing.core.authz": "rensei_routing.core.snapshot.authz",
    "rensei_routing.core.spawn": "rensei_routing.core.shadow.spawn",
    "rensei_routing.core.whatif": "rensei_routing.core.shadow.whatif",
    "rensei_routing.core.report": "rensei_routing.core.shadow.report",
    "rensei_routing.host.server": "rensei_routing.control.server",
    "rensei_routing.host.files": "rensei_routing.files",
    "rensei_routing.whatif": "rensei_routing.shadow.whatif",
    "rensei_routing.doctor": "rensei_routing.ops.doctor",
    "rensei_routing.store.backup": "rensei_routing.ops.backup",
    "rensei_routing.store.segments": (
        "rensei_routing.store.audit.recovery",
        "rensei_routing.store.audit.segments",
    ),
    "rensei_routing.store.chainwalk": (
        "rensei_routing.store.audit.attest",
        "rensei_routing.store.audit.chainwalk",
    ),
    "rensei_routing.store.rotation": (
        "rensei_routing.store.audit.attest",
        "rensei_routing.store.audit.rotation",
    ),
    "rensei_routing.store.autocheckpoint": "rensei_routing.store.audit.autocheckpoint",
    "rensei_routing.store.reattest": "rensei_routing.store.audit.reattest",
    "rensei_routing.hookspecs": "rensei_routing.plugins.hookspecs",
    "rensei_routing.plugin_checks": "rensei_routing.plugins.checks",
    "rensei_routing.testing": "rensei_routing.plugins.testing",
    "rensei_routing.default_plugins": "rensei_routing.plugins.default",
    "rensei_routing.default_plugins.seams": "rensei_routing.plugins.default.seams",
    "rensei_routing.default_plugins.vocabulary": "rensei_routing.plugins.default.vocabulary",
}


class _MovedFinder:
    """Finds an old path and loads it as the module that holds its code now (a meta path finder
    and loader by protocol: subclassing ``importlib.abc``'s would import ``importlib.resources``
    and more at every start-up)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        target = MOVED[spec.name]
        warnings.warn(deprecation_message(spec.name), DeprecationWarning, stacklevel=_caller())
        if isinstance(target, tuple):  # a split module: one of its own, with both halves' names
            combined = ModuleType(spec.name, f"Old path of {', '.join(target)}.")
            for name in target:
                source = importlib.import_module(name)
                combined.__dict__.update(
                    {k: v for k, v in vars(source).items() if not k.startswith("__")}
                )
            return combined
        module = importlib.import_module(target)
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the alias's spec on the shared module: give it back its own.
        if module.__name__ in self._specs:
            module.__spec__ = self._specs[module.__name__]


def deprecation_message(old: str) -> str:
    """The warning an old path gives: the path(s) to import instead and when it goes."""
    target = MOVED[old]
    new = " and ".join(target) if isinstance(target, tuple) else target
    return f"{old} is deprecated and will be removed in {REMOVED_IN}: import {new} instead"


def _caller() -> int:
    """The ``stacklevel`` of the frame that imported the old path: the first frame, going out
    from ``create_module``, that is neither this module nor ``importlib.import_module``, so the
    warning names the user's line and its module's warning filters apply. ``warnings.warn``
    itself skips the import system's bootstrap frames, so they are not counted."""
    frame = sys._getframe(2)  # create_module's caller
    level = 1
    while frame is not None:
        filename = frame.f_code.co_filename
        if not ("importlib" in filename and "_bootstrap" in filename):
            level += 1
            if filename not in (__file__, importlib.__file__):
                break
        frame = frame.f_back  # type: ignore[assignment]
    return level


FINDER: Final = _MovedFinder()


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once (idempotent): first, so that an old path
    whose directory holds only type stubs is not taken for a namespace package."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, FINDER)
