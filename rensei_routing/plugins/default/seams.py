"""The built-in seam: ``default``, a spawn site with no legacy stages of its own beyond the
one it reports, classified by the rule of SEMANTICS.md."""

from __future__ import annotations

from collections.abc import Callable

from ...plugin import Seam, hookimpl


@hookimpl
def register_seams(register: Callable[[Seam], None]) -> None:
    register(
        Seam(
            name="default",
            request_face="unknown",
            stages=("default",),
            description="A spawn reported with its final route only.",
        )
    )
