"""The plugin manager: built-in plugins, installed entry points, and the collected contributions
(seams, vocabulary, redaction patterns, snapshot validators, authorizers, CLI commands, record
observers).

Adapter: loads setuptools entry points (group ``rensei_routing``) only when asked; library
modules never load plugins at import. Each hook is called once per plugin, in plugin-name order
(never pluggy's LIFO order); contributions come through ``register`` callbacks, are sorted by a
stable key, and a name claimed by two plugins is a typed error naming both. Whatever a plugin
does wrong (raises, registers the wrong type, returns a value, misspells a hook) is a
:class:`~rensei_routing.errors.PluginError` naming it, except where a plugin must never break a
spawn or an append: :func:`safe_classify` and :func:`notify_recorded`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pluggy

from ..core.audit.chain import AuditRecord
from ..core.redact import DEFAULT_PATTERNS, DEFAULT_REDACTOR, RedactionPattern, Redactor, marker
from ..core.routing.vocabulary import (
    EMPTY_VOCABULARY,
    WORD_SETS,
    LiteralFamily,
    Provenance,
    Vocabulary,
    VocabularyExtension,
)
from ..core.shadow.compare import Seam, Stage
from ..core.snapshot.validators import SnapshotValidator
from ..errors import InputError, PluginError, UnknownSeamError
from .info import plugin_infos
from .loading import (
    LOAD_PLUGINS_ENV,
    RenseiPluginManager,
    allowed_plugin_names,
    check_pending,
    get_plugin_manager,
    one_line,
    register_plugin,
)

if TYPE_CHECKING:
    import click

    from ..core.snapshot.authz import Authorizer  # imported where authorizers are read

#: ``plugin_infos`` is :mod:`.info`'s, re-exported for the modules that still import it here.
__all__ = [
    "LOAD_PLUGINS_ENV",
    "UNCLASSIFIED",
    "RenseiPluginManager",
    "SeamRegistry",
    "allowed_plugin_names",
    "authorizers",
    "check_pending",
    "classifier_problem",
    "get_plugin_manager",
    "has_observers",
    "notify_recorded",
    "plugin_commands",
    "plugin_infos",
    "redactor",
    "register_plugin",
    "safe_classify",
    "seam_registry",
    "snapshot_validators",
    "vocabulary",
]

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # a library stays quiet unless the application configures

#: The mechanism of a spawn whose seam classifier raised or answered nonsense.
UNCLASSIFIED: Final = "unclassified"
_MAX_DETAIL: Final = 1024
_SEAM_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

T = TypeVar("T")
#: A contribution known by its unique name, with the plugin that registered it.
Named = TypeVar("Named", SnapshotValidator, "Authorizer")


# -- calling hooks ------------------------------------------------------------------------------


def _implementations(pm: pluggy.PluginManager, hook: str) -> list[tuple[str, Any]]:
    """``(plugin name, hookimpl)`` of ``hook``, sorted by plugin name (pending plugins that
    may implement it imported first). Raises: PluginError."""
    if isinstance(pm, RenseiPluginManager):
        pm.load_pending(hook)
    caller = getattr(pm.hook, hook)
    impls = [(pm.get_name(i.plugin) or repr(i.plugin), i) for i in caller.get_hookimpls()]
    for plugin, impl in impls:
        if impl.wrapper or impl.hookwrapper:
            raise PluginError(f"plugin {plugin!r}: hook {hook} cannot be a wrapper")
    return sorted(impls, key=lambda pi: pi[0])


def _call(plugin: str, hook: str, impl: Any, kwargs: Mapping[str, Any]) -> None:
    """Call one implementation; anything but ``None`` back, or an exception, names the plugin."""
    try:
        answer = impl.function(*[kwargs[a] for a in impl.argnames])
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(
            f"plugin {plugin!r} failed in {hook}: {type(e).__name__}: {one_line(e)}"
        ) from e
    if answer is not None:
        raise PluginError(
            f"plugin {plugin!r}: {hook} returned {type(answer).__name__}; it must return None "
            f"and call register(...) instead"
        )


def _contributions(pm: pluggy.PluginManager, hook: str, kind: type[T]) -> list[tuple[str, T]]:
    """Every ``(plugin, value)`` registered through ``hook``, in plugin-name order.

    Raises: PluginError (a value that is not a ``kind``, or the hook misbehaved).
    """
    out: list[tuple[str, T]] = []
    for plugin, impl in _implementations(pm, hook):

        def register(value: object, plugin: str = plugin) -> None:
            if not isinstance(value, kind):
                raise PluginError(
                    f"plugin {plugin!r} registered {type(value).__name__} through {hook}, "
                    f"not a {kind.__name__}"
                )
            out.append((plugin, value))

        _call(plugin, hook, impl, {"register": register})
    return out


# -- vocabulary ---------------------------------------------------------------------------------


def _check_words(plugin: str, field: str, words: object) -> frozenset[str]:
    if isinstance(words, (frozenset, set, tuple, list)):
        names = [w for w in words if isinstance(w, str) and w.strip()]
        if len(names) == len(words):
            return frozenset(names)
    raise PluginError(f"plugin {plugin!r}: vocabulary {field} must be a set of non-empty names")


def vocabulary(pm: pluggy.PluginManager) -> Vocabulary:
    """The effective vocabulary: every ``register_vocabulary`` contribution (the shipped one
    comes from the built-in plugin) merged onto the empty vocabulary.

    Raises:
        PluginError: naming both plugins when a literal family or provenance name is defined
            twice differently, or a name is both a literal family and a capability class;
            naming the plugin for a malformed extension or the reserved mechanism
            ``unclassified``.
    """
    words: dict[str, set[str]] = {f: set() for f in WORD_SETS}
    families: dict[str, tuple[str, LiteralFamily]] = {}
    provenances: dict[str, tuple[str, Any]] = {}
    capability_owner: dict[str, str] = {}
    aliases: dict[str, tuple[str, Provenance]] = {}
    for plugin, ext in _contributions(pm, "register_vocabulary", VocabularyExtension):
        for alias, provenance in ext.model_aliases:
            if not (isinstance(alias, str) and alias and isinstance(provenance, Provenance)):
                raise PluginError(
                    f"plugin {plugin!r}: model_aliases must be (name, Provenance) pairs"
                )
            seen = aliases.setdefault(alias.strip().lower(), (plugin, provenance))
            if seen[1] != provenance:
                raise PluginError(
                    f"model alias {alias!r} is defined differently by {seen[0]!r} and {plugin!r}"
                )
        for f in WORD_SETS:
            words[f] |= _check_words(plugin, f, getattr(ext, f))
        for w in _check_words(plugin, "capability_classes", ext.capability_classes):
            capability_owner.setdefault(w, plugin)
        if UNCLASSIFIED in ext.legacy_mechanisms:
            raise PluginError(f"plugin {plugin!r}: {UNCLASSIFIED!r} is reserved")
        if not isinstance(ext.literal_families, (tuple, list)) or not all(
            isinstance(fam, LiteralFamily) for fam in ext.literal_families
        ):
            raise PluginError(f"plugin {plugin!r}: literal_families must be LiteralFamily values")
        for fam in ext.literal_families:
            known = families.setdefault(fam.name, (plugin, fam))
            if known[1] != fam:
                raise PluginError(
                    f"literal family {fam.name!r} is defined differently by {known[0]!r} "
                    f"and {plugin!r}"
                )
            prov = provenances.setdefault(fam.provenance.name, (plugin, fam.provenance))
            if prov[1] != fam.provenance:
                raise PluginError(
                    f"provenance {fam.provenance.name!r} is defined differently by "
                    f"{prov[0]!r} and {plugin!r}"
                )
    clashes = sorted(families.keys() & capability_owner.keys())
    if clashes:
        name = clashes[0]
        raise PluginError(
            f"{name!r} is a literal family of {families[name][0]!r} and a capability class of "
            f"{capability_owner[name]!r}"
        )
    return EMPTY_VOCABULARY.extended(
        literal_families=[families[n][1] for n in sorted(families)],
        model_aliases={a: aliases[a][1] for a in sorted(aliases)},
        roles=sorted(words["roles"]),
        capability_classes=sorted(words["capability_classes"]),
        provider_bindings=sorted(words["provider_bindings"]),
        repo_classes=sorted(words["repo_classes"]),
        request_faces=sorted(words["request_faces"]),
        transports=sorted(words["transports"]),
        legacy_mechanisms=sorted(words["legacy_mechanisms"]),
    )


# -- seams --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeamRegistry:
    """Every registered seam by name, with the plugin that registered it."""

    seams: Mapping[str, Seam]
    owners: Mapping[str, str]

    def get(self, name: str) -> Seam:
        """Raises: UnknownSeamError."""
        try:
            return self.seams[name]
        except KeyError:
            known = ", ".join(sorted(self.seams)) or "none"
            raise UnknownSeamError(f"no seam named {name!r} (registered: {known})") from None


def _seam_problem(seam: Seam, vocab: Vocabulary) -> str | None:
    if not isinstance(seam.name, str) or not _SEAM_NAME.fullmatch(seam.name):
        return f"seam name {seam.name!r} must match {_SEAM_NAME.pattern}"
    if seam.request_face not in vocab.request_faces:
        return f"seam {seam.name!r}: request face {seam.request_face!r} is not in the vocabulary"
    if not isinstance(seam.stages, tuple) or not seam.stages:
        return f"seam {seam.name!r}: stages must be a non-empty tuple of mechanism names"
    for stage in seam.stages:
        if stage not in vocab.legacy_mechanisms:
            return f"seam {seam.name!r}: stage {stage!r} is not a legacy mechanism"
    if len(set(seam.stages)) != len(seam.stages):
        return f"seam {seam.name!r}: a stage is listed twice"
    if not callable(seam.classifier):
        return f"seam {seam.name!r}: classifier is not callable"
    direct = seam.direct_http_providers
    if not isinstance(direct, frozenset) or not all(isinstance(x, str) for x in direct):
        return f"seam {seam.name!r}: direct_http_providers must be a frozenset of names"
    return None


def seam_registry(pm: pluggy.PluginManager) -> SeamRegistry:
    """Collect ``register_seams`` from every plugin, sorted by seam name; each seam's face and
    stages are checked against :func:`vocabulary`.

    Raises:
        PluginError: two plugins register one seam name, or a plugin registers a non-Seam or a
            seam whose name, face, stages or classifier are unusable.
    """
    vocab = vocabulary(pm)
    seams: dict[str, Seam] = {}
    owners: dict[str, str] = {}
    for plugin, seam in _contributions(pm, "register_seams", Seam):
        problem = _seam_problem(seam, vocab)
        if problem is not None:
            raise PluginError(f"plugin {plugin!r}: {problem}")
        if seam.name in seams:
            raise PluginError(
                f"seam {seam.name!r} is registered by both {owners[seam.name]!r} and {plugin!r}"
            )
        seams[seam.name] = seam
        owners[seam.name] = plugin
    ordered = sorted(seams)
    return SeamRegistry(
        MappingProxyType({n: seams[n] for n in ordered}),
        MappingProxyType({n: owners[n] for n in ordered}),
    )


def classifier_problem(seam: Seam, stages: Sequence[Stage]) -> tuple[Stage | None, str | None]:
    """Run ``seam``'s classifier on non-empty ``stages``: ``(stage, None)`` when it named one of
    them, else ``(None, "<ErrorType>: what went wrong")`` (it raised, returned a non-Stage, or
    returned a stage whose mechanism and provider are not those of a stage it was given; it may
    rewrite the detail). The classifier gets its own tuple of the stages: it cannot change the
    caller's."""
    stages = tuple(stages)
    try:
        result: object = seam.classifier(stages)
    except Exception as e:  # a plugin must never break a spawn
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(result, Stage):
        return None, (
            f"WrongReturnType: classifier of seam {seam.name!r} returned "
            f"{type(result).__name__}, not a Stage"
        )
    if (result.mechanism, result.provider) not in {(s.mechanism, s.provider) for s in stages}:
        return None, (
            f"WrongReturnValue: classifier of seam {seam.name!r} named "
            f"{result.mechanism!r} on {result.provider!r}, which is not among the stages applied"
        )
    return result, None


def safe_classify(registry: SeamRegistry, seam_name: str, stages: Sequence[Stage]) -> Stage:
    """The stage that decided a spawn's route, by the seam's own classifier; never lets a plugin
    break the spawn.

    A classifier that raises (any ``Exception``), returns something other than a
    :class:`Stage`, or returns a stage whose mechanism and provider are not those of a stage
    it was given, yields ``Stage(mechanism="unclassified", provider=<the last stage's provider>,
    detail="<ErrorType> in plugin '<owner>': ...")``, so the shadow record says so.

    Raises:
        UnknownSeamError: no seam of that name is registered (the caller's mistake).
        InputError: ``stages`` is empty (a legacy route names at least one stage).
    """
    seam = registry.get(seam_name)
    if not stages:
        raise InputError("a legacy route must name at least one stage")
    result, problem = classifier_problem(seam, stages)
    if result is not None:
        return result
    owner = registry.owners.get(seam_name, "?")
    kind, _, rest = (problem or "").partition(": ")
    detail = f"{kind} in plugin {owner!r}: {rest}"
    return Stage(mechanism=UNCLASSIFIED, provider=stages[-1].provider, detail=detail[:_MAX_DETAIL])


# -- redaction, validators, commands, observers --------------------------------------------------


def redactor(pm: pluggy.PluginManager) -> Redactor:
    """The built-in patterns (always, first, in their order), then every plugin pattern sorted
    by (label, regex, flags, triggers), an identical one kept once. The plugin patterns apply
    jointly (``Redactor.joint_from``): each matches the same text and the union of their
    matches is redacted, so one plugin's pattern never hides part of another's secret.

    Raises:
        PluginError: naming the plugin whose pattern matches a redaction marker (redaction
            would never settle) or is not a RedactionPattern.
    """
    extra: dict[tuple[str, str, int, tuple[str, ...]], RedactionPattern] = {}
    contributed = _contributions(pm, "register_redaction_patterns", RedactionPattern)
    labels = {p.label for p in DEFAULT_PATTERNS} | {q.label for _, q in contributed}
    for plugin, pat in contributed:
        hit = next((lb for lb in sorted(labels) if pat.regex.search(marker(lb))), None)
        if hit is not None:
            raise PluginError(
                f"plugin {plugin!r}: redaction pattern {pat.label!r} matches the marker "
                f"{marker(hit)!r}"
            )
        extra.setdefault((pat.label, pat.regex.pattern, int(pat.regex.flags), pat.triggers), pat)
    if not extra:
        return DEFAULT_REDACTOR
    # the plugins' patterns apply jointly: none can hide another's match
    patterns = DEFAULT_PATTERNS + tuple(extra[k] for k in sorted(extra))
    return Redactor(patterns, joint_from=len(DEFAULT_PATTERNS))


def snapshot_validators(pm: pluggy.PluginManager) -> tuple[SnapshotValidator, ...]:
    """Every registered snapshot validator sorted by name, ``plugin`` filled in.

    Raises:
        PluginError: two plugins register one validator name, or a plugin registers a value
            that is not a SnapshotValidator (or whose check is not callable).
    """
    return _by_name("snapshot validator", _checked_validators(pm))


def _checked_validators(pm: pluggy.PluginManager) -> Iterator[tuple[str, SnapshotValidator]]:
    for plugin, v in _contributions(pm, "register_snapshot_validators", SnapshotValidator):
        if not isinstance(v.name, str) or not v.name or not callable(v.check):
            raise PluginError(f"plugin {plugin!r}: a validator needs a name and a callable check")
        yield plugin, v


def authorizers(pm: pluggy.PluginManager) -> tuple[Authorizer, ...]:
    """Every registered authorizer sorted by name, ``plugin`` filled in.

    Raises:
        PluginError: two plugins register one authorizer name, or a plugin registers a value
            that is not an Authorizer (or whose prepare is not callable, or whose ``kinds`` is
            not ``None`` or a tuple of names).
    """
    return _by_name("authorizer", _checked_authorizers(pm))


def _checked_authorizers(pm: pluggy.PluginManager) -> Iterator[tuple[str, Authorizer]]:
    from ..core.snapshot.authz import Authorizer  # the authorization commands' only

    for plugin, a in _contributions(pm, "register_authorizers", Authorizer):
        if not isinstance(a.name, str) or not a.name or not callable(a.prepare):
            raise PluginError(
                f"plugin {plugin!r}: an authorizer needs a name and a callable prepare"
            )
        kinds = a.kinds
        if kinds is not None and not (
            isinstance(kinds, tuple)
            and kinds
            and all(isinstance(k, str) and _SEAM_NAME.fullmatch(k) for k in kinds)
        ):
            raise PluginError(
                f"plugin {plugin!r}: authorizer {a.name!r} kinds must be None or a non-empty "
                f"tuple of policy kind names"
            )
        yield plugin, a


def _by_name(what: str, named: Iterable[tuple[str, Named]]) -> tuple[Named, ...]:
    """The ``(plugin, value)`` contributions as values sorted by name, each with its ``plugin``
    filled in; checked one by one, in the order given (a name registered twice is refused as
    soon as it comes). Raises: PluginError."""
    found: dict[str, Named] = {}
    for plugin, value in named:
        if value.name in found:
            raise PluginError(
                f"{what} {value.name!r} is registered by both {found[value.name].plugin!r} "
                f"and {plugin!r}"
            )
        found[value.name] = replace(value, plugin=plugin)
    return tuple(found[n] for n in sorted(found))


def plugin_commands(
    pm: pluggy.PluginManager, *, reserved: Collection[str] = ()
) -> dict[str, tuple[str, click.Command]]:
    """Every command plugins attach through ``register_commands``: name -> (plugin, command).

    Each plugin is handed its own empty group, so nothing is added to a live CLI.

    Raises:
        PluginError: a command name in ``reserved`` (the built-ins) or used by two plugins.
    """
    import click

    out: dict[str, tuple[str, click.Command]] = {}
    for plugin, impl in _implementations(pm, "register_commands"):
        group = click.Group(name="rensei")
        _call(plugin, "register_commands", impl, {"cli": group})
        for name in sorted(group.commands):
            if name in reserved:
                raise PluginError(f"plugin {plugin!r}: command {name!r} is a built-in command")
            if name in out:
                raise PluginError(
                    f"command {name!r} is registered by both {out[name][0]!r} and {plugin!r}"
                )
            out[name] = (plugin, group.commands[name])
    return out


def notify_recorded(pm: pluggy.PluginManager, records: Iterable[AuditRecord]) -> tuple[str, ...]:
    """Call every ``decision_recorded`` observer for each record, in seq order, plugins in name
    order, each shown its own copy of the record. An observer that raises is logged (a warning
    naming the plugin) and skipped; the records stay appended. Returns the failure messages.
    """
    impls = _implementations(pm, "decision_recorded")
    failures: list[str] = []
    if not impls:
        return ()
    for record in records:
        for plugin, impl in impls:
            shown = replace(record)  # its own copy: nothing it does reaches the next observer
            try:
                impl.function(*[{"record": shown}[a] for a in impl.argnames])
            except Exception as e:  # an observer never undoes or fails an append
                msg = (
                    f"plugin {plugin!r} failed observing audit record {record.seq}: "
                    f"{type(e).__name__}: {e}"
                )
                log.warning("%s", msg)
                failures.append(msg)
    return tuple(failures)


def has_observers(pm: pluggy.PluginManager) -> bool:
    """Whether any plugin implements ``decision_recorded`` (so records need reading back).

    Raises: PluginError (a pending plugin that may implement it fails to load)."""
    if isinstance(pm, RenseiPluginManager):
        pm.load_pending("decision_recorded")
    return bool(pm.hook.decision_recorded.get_hookimpls())
