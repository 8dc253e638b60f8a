"""Authorization through the Cedar engine (cedarpy), fail-closed, as a rensei-routing plugin.

Registers one authorizer (``cedar``) and one snapshot validator (``cedar-policies``):

* the **validator** rejects a compile whose authorization section holds a Cedar policy that
  does not parse (one policy per id, no templates) or does not validate against the declared
  Cedar schema, naming the policy and the error, so the snapshot is never published (the
  endpoint's 503 names it);
* the **authorizer** evaluates each claim or spawn request against the cached snapshot's
  policies and entities (prepared once per revision, :mod:`rensei_authz_cedar.engine`). The
  core runs it under the fail-closed posture beside the built-in grant check: a missing section,
  an unparseable policy, an entity the snapshot lacks, an evaluation error or the engine raising
  is a deny naming why; with no determining policy the answer is a deny unless the org declares
  ``defaultPermit`` (recorded as ``default-permit``); a forbid beats any permit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rensei_routing import hookimpl
from rensei_routing.core.snapshot.authz import Authorizer
from rensei_routing.core.snapshot.validators import SnapshotValidator

if TYPE_CHECKING:
    from .engine import CedarDecider


# The engine (and cedarpy, ~12 ms to import) is loaded on the first Cedar question, not when
# every `rensei` command loads its plugins.
def prepare(sections: Mapping[str, Any]) -> CedarDecider:
    """:func:`.engine.prepare`."""
    from .engine import prepare as engine_prepare

    return engine_prepare(sections)


def bundle_problems(sections: Mapping[str, Any]) -> list[str]:
    """:func:`.engine.bundle_problems`."""
    from .engine import bundle_problems as engine_bundle_problems

    return engine_bundle_problems(sections)


__all__ = ["AUTHORIZER", "VALIDATOR", "register_authorizers", "register_snapshot_validators"]

AUTHORIZER = Authorizer(
    name="cedar",
    prepare=prepare,
    description="Cedar policies of the snapshot's authorization section (cedarpy)",
)
VALIDATOR = SnapshotValidator(
    name="cedar-policies",
    check=bundle_problems,
    description="every Cedar policy parses and validates against the declared schema",
)


@hookimpl
def register_authorizers(register: Callable[[Authorizer], None]) -> None:
    register(AUTHORIZER)


@hookimpl
def register_snapshot_validators(register: Callable[[SnapshotValidator], None]) -> None:
    register(VALIDATOR)
