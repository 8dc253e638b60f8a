"""A test stand-in for ``rensei-seams-hydraflow``: the four HydraFlow spawn seams with the names,
faces and stage names of the shipped plugin, classified by the SEMANTICS.md rule."""

from __future__ import annotations

from collections.abc import Callable

from rensei_routing.plugin import Seam, hookimpl

_AGENTIC = ("default", "role-dial", "fleet-ratchet", "repo-provider", "credit-failover")
_DIALLED = ("maintenance-default", "role-dial", "fleet-ratchet")

SEAMS = (
    Seam(name="agentic-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="subprocess-runner", request_face="agentic", stages=_AGENTIC),
    Seam(name="lightweight-agent", request_face="one-shot", stages=_DIALLED),
    Seam(name="streaming-agent", request_face="agentic", stages=_DIALLED),
)


@hookimpl
def register_seams(register: Callable[[Seam], None]) -> None:
    for seam in SEAMS:
        register(seam)
