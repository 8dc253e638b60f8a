"""Everything a plugin author imports, from one place: ``from rensei_routing.plugin import ...``.

The hook marker (``hookimpl``), every type a hook takes or registers (the seam and its stages,
vocabulary extensions with the shipped vocabulary and Anthropic provenance, redaction patterns,
snapshot validators, authorizers and what they answer, the audit record an observer sees, the
enforced route and its kinds), the errors a plugin raises or meets, and the test helpers
(docs/plugins.md). ``tests/test_plugin_api.py`` checks that every type named in a hook
specification's signature, and every type those types hold, is exported here, so a new hook
cannot forget one.

This module is the plugin contract: a name in ``__all__`` keeps its meaning across releases,
whatever module defines it. The host's own machinery (the manager, the checks, loading) is
``rensei_routing.plugins``: plural, and not for plugins to import.

Every name is imported on first use (PEP 562): importing this module imports nothing else, and
using ``Seam`` imports neither pluggy nor the plugin manager, so a plugin that is imported only
when one of its hooks is called stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.audit.chain import AuditRecord
    from .core.enforce.route import ENFORCED, LEGACY_COMPATIBLE, ROUTE_KINDS, EnforcedRoute
    from .core.redact import RedactionPattern
    from .core.routing.vocabulary import (
        ANTHROPIC_PROVENANCE,
        DEFAULT_VOCABULARY,
        LiteralFamily,
        Provenance,
        Vocabulary,
        VocabularyExtension,
    )
    from .core.shadow.compare import (
        UNCLASSIFIED,
        Classifier,
        Seam,
        Stage,
        classify_legacy_mechanism,
    )
    from .core.snapshot.authz import AuthorizationRequest, Authorizer, Decide, EntityRef
    from .core.snapshot.org import authorization_of
    from .core.snapshot.postures import PolicyVerdict
    from .core.snapshot.validators import SnapshotCheck, SnapshotValidator
    from .errors import (
        InputError,
        PluginError,
        RenseiRoutingError,
        RouteNotAppliedError,
        SeamRequestError,
        SnapshotError,
    )
    from .plugins.hookspecs import hookimpl
    from .plugins.testing import (
        assert_classifier_total,
        assert_plugin_ok,
        plugin_manager_for,
        stage_sequences_strategy,
    )


def _from(module: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, module)


#: Public name -> the module defining it (relative to ``rensei_routing``).
_LAZY: dict[str, str] = {
    **_from(".plugins.hookspecs", "hookimpl"),
    # register_seams
    **_from(
        ".core.shadow.compare",
        "Classifier",
        "Seam",
        "Stage",
        "UNCLASSIFIED",
        "classify_legacy_mechanism",
    ),
    # register_vocabulary
    **_from(
        ".core.routing.vocabulary",
        "ANTHROPIC_PROVENANCE",
        "DEFAULT_VOCABULARY",
        "LiteralFamily",
        "Provenance",
        "Vocabulary",
        "VocabularyExtension",
    ),
    # register_redaction_patterns
    **_from(".core.redact", "RedactionPattern"),
    # register_snapshot_validators
    **_from(".core.snapshot.validators", "SnapshotCheck", "SnapshotValidator"),
    # register_authorizers
    **_from(".core.snapshot.authz", "AuthorizationRequest", "Authorizer", "Decide", "EntityRef"),
    **_from(".core.snapshot.postures", "PolicyVerdict"),
    **_from(".core.snapshot.org", "authorization_of"),
    # decision_recorded
    **_from(".core.audit.chain", "AuditRecord"),
    # apply_enforced_route
    **_from(".core.enforce.route", "ENFORCED", "EnforcedRoute", "LEGACY_COMPATIBLE", "ROUTE_KINDS"),
    # what a plugin raises, or meets
    **_from(
        ".errors",
        "InputError",
        "PluginError",
        "RenseiRoutingError",
        "RouteNotAppliedError",
        "SeamRequestError",
        "SnapshotError",
    ),
    # testing a plugin (imports pytest)
    **_from(
        ".plugins.testing",
        "assert_classifier_total",
        "assert_plugin_ok",
        "plugin_manager_for",
        "stage_sequences_strategy",
    ),
}

__all__ = [
    "ANTHROPIC_PROVENANCE",
    "DEFAULT_VOCABULARY",
    "ENFORCED",
    "LEGACY_COMPATIBLE",
    "ROUTE_KINDS",
    "UNCLASSIFIED",
    "AuditRecord",
    "AuthorizationRequest",
    "Authorizer",
    "Classifier",
    "Decide",
    "EnforcedRoute",
    "EntityRef",
    "InputError",
    "LiteralFamily",
    "PluginError",
    "PolicyVerdict",
    "Provenance",
    "RedactionPattern",
    "RenseiRoutingError",
    "RouteNotAppliedError",
    "Seam",
    "SeamRequestError",
    "SnapshotCheck",
    "SnapshotError",
    "SnapshotValidator",
    "Stage",
    "Vocabulary",
    "VocabularyExtension",
    "assert_classifier_total",
    "assert_plugin_ok",
    "authorization_of",
    "classify_legacy_mechanism",
    "hookimpl",
    "plugin_manager_for",
    "stage_sequences_strategy",
]


# Outside TYPE_CHECKING only: a type checker sees the imports above and nothing else, so
# ``from rensei_routing.plugin import Sema`` is an error there too, not a name of type Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __package__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
