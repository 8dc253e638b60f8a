"""The plugin hook specifications (pluggy project ``rensei_routing``): what a plugin may add.
Owns no behaviour; each docstring is the plugin author's reference (docs/plugins.md repeats it
with examples). Every type a hook takes or registers, and ``hookimpl``, is exported by
:mod:`rensei_routing.plugin`, the one module a plugin imports (``tests/test_plugin_api.py``).

Every hook is called with keywords only, once per plugin, in the order of the plugins' names
(never pluggy's LIFO registration order). The ``register_*`` hooks contribute values through a
``register`` callback and must return ``None``; the manager collects every contribution, sorts
it by a stable key, and refuses a name claimed twice with a
:class:`~rensei_routing.plugin.PluginError` naming both plugins. A hook that raises, registers a
value of the wrong type or returns a value is a ``PluginError`` naming the plugin.
``apply_enforced_route`` is the one hook that answers a value: the seam's own plugin is asked
(:func:`~rensei_routing.plugins.routes.apply_route`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from ..core.audit.chain import AuditRecord
    from ..core.enforce.route import EnforcedRoute
    from ..core.redact import RedactionPattern
    from ..core.routing.vocabulary import VocabularyExtension
    from ..core.shadow.compare import Seam
    from ..core.snapshot.authz import Authorizer
    from ..core.snapshot.validators import SnapshotValidator

PROJECT = "rensei_routing"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_seams(register: Callable[[Seam], None]) -> None:
    """Call ``register(seam)`` once per spawn seam this plugin serves.

    A :class:`~rensei_routing.plugin.Seam` names the seam, its request face (a word
    of the vocabulary's ``request_faces``; it decides the transport rule), the ordered names of the
    legacy stages it applies (each a word of ``legacy_mechanisms``), its legacy-mechanism
    classifier (``Sequence[Stage] -> Stage``: the stage that decided the route) and the
    provider names that mean a direct HTTP call at a one-shot face. Two plugins registering one
    seam name is a ``PluginError`` naming both. A classifier that raises or answers nonsense at
    record time never breaks a spawn: the record says ``unclassified`` and why.
    """


@hookspec
def register_vocabulary(register: Callable[[VocabularyExtension], None]) -> None:
    """Call ``register(extension)`` with the words this plugin adds to the routing vocabulary:
    roles, literal model families (each with its provenance rule), capability classes, provider
    bindings, repo classes, request faces, transports, legacy mechanisms.

    The shipped vocabulary is contributed the same way by the built-in plugin
    ``rensei_routing.plugins.default.vocabulary``. The same word from two plugins is fine; a
    literal family (or provenance) name with a different definition, or a name that is both a
    literal family and a capability class, is a ``PluginError`` naming both plugins.
    """


@hookspec
def register_redaction_patterns(register: Callable[[RedactionPattern], None]) -> None:
    """Call ``register(pattern)`` once per credential shape to redact from audit records
    (a :class:`~rensei_routing.plugin.RedactionPattern`: label, compiled regex, literal
    triggers). Plugin patterns run after the built-in ones, sorted by (label, regex); a plugin
    can add redaction, never remove it. An identical pattern from two plugins is kept once.
    """


@hookspec
def register_snapshot_validators(register: Callable[[SnapshotValidator], None]) -> None:
    """Call ``register(validator)`` once per check over a ruleset snapshot's sections (a
    :class:`~rensei_routing.plugin.SnapshotValidator`: name, check). The check
    gets a deep read-only copy of the sections and returns a list of problems (empty = valid);
    a check that changes them fails. Validators run sorted
    by name; a validator that raises or returns the wrong type counts as a failed validation.
    Two plugins registering one validator name is a ``PluginError`` naming both.
    """


@hookspec
def register_authorizers(register: Callable[[Authorizer], None]) -> None:
    """Call ``register(authorizer)`` once per authorizer for claim and spawn admission (a
    :class:`~rensei_routing.plugin.Authorizer`: name, ``prepare(sections) -> decide``,
    ``decide(requests) -> [PolicyVerdict]``). ``prepare`` runs once per snapshot revision; each
    request carries principal, action, resource and a context (pool, project, repo, role, and
    the snapshot's ``rulesetRev``/``snapshotAgeMs``/``degraded``). A verdict is a permit, a
    forbid or no applicable policy, with the determining policy ids and any evaluation errors.

    Every registered authorizer AND the built-in snapshot grant check must allow; anything an
    authorizer raises, or a verdict carrying an error, is a deny naming why (fail closed). An
    authorizer claims the policy kinds it evaluates (``kinds``, default its own name: ``cedar``
    claims the Cedar section); a policy kind of the snapshot no registered authorizer claims
    denies, whatever else is registered. Each authorizer sees its own read-only copies of the
    sections and requests. Two plugins registering one authorizer name is a ``PluginError``
    naming both.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Attach click commands or groups to ``cli``; they appear under the ``rensei`` root.

    A name already used by a built-in command, or by another plugin, is a ``PluginError``
    naming both. Plugin commands raise :class:`~rensei_routing.plugin.RenseiRoutingError`
    subclasses for expected failures (one line on stderr, exit 1).
    """


@hookspec
def decision_recorded(record: AuditRecord) -> None:
    """Observe one record just durably appended to the audit log by the CLI (``explain
    --record``, ``explain-batch --record``, shadow recording): the stored, redacted
    :class:`~rensei_routing.plugin.AuditRecord` (``seq``, hashes, ``payload``).

    Called after the commit, once per record, in seq order. An observer that raises is logged
    (one warning line naming the plugin) and skipped; it never undoes or fails the append.
    """


@hookspec(firstresult=True)
def apply_enforced_route(seam: str, route: EnforcedRoute, request: Any) -> Any:
    """Apply an enforced route to a spawn at ``seam``: return ``request`` rewritten so the
    spawn runs on ``route`` (a :class:`~rensei_routing.plugin.EnforcedRoute`), or
    ``None`` for a seam that is not this plugin's.

    ``request`` is whatever the seam spawns from (an argv, a request mapping): the plugin gets
    its own deep copy, so it can never change the caller's, and returns a new value. A
    ``legacy-compatible`` route leaves the request's model as it was (or sets the same one); a
    route whose ``model`` is ``None`` names no model and leaves it too. A request of the wrong
    shape is a :class:`~rensei_routing.plugin.SeamRequestError`. The host asks only the plugin
    that registered ``seam`` (``apply_route``); an enforced route at a seam whose plugin
    answers ``None`` or does not implement this hook is a
    :class:`~rensei_routing.plugin.RouteNotAppliedError`: the spawn must not run.
    """
