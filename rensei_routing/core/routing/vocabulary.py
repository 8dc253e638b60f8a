"""The routing vocabulary as data: roles, model requirements and their provenance rules, bindings.

Pure: no I/O, no globals that change. Nothing about a particular vendor is wired into the
resolver; it reads every such fact from a :class:`Vocabulary`, whose shipped default carries
the values of the design sources (``DEFAULT_VOCABULARY``). A plugin extends a vocabulary with
:meth:`Vocabulary.extended`, which returns a new value and never edits the default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from ...errors import ConfigurationError

__all__ = [
    "CAPABILITY",
    "CONCRETE_MODEL",
    "DEFAULT_VOCABULARY",
    "LITERAL_FAMILY",
    "REQUIREMENT_KINDS",
    "LiteralFamily",
    "Provenance",
    "Vocabulary",
    "VocabularyExtension",
    "canonical_worker_role",
]

LITERAL_FAMILY: Final = "literal_family"
CAPABILITY: Final = "capability"
CONCRETE_MODEL: Final = "concrete_model"
REQUIREMENT_KINDS: Final = (LITERAL_FAMILY, CAPABILITY, CONCRETE_MODEL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """Where a model id comes from, and which provider lanes may serve it.

    A model id has this provenance when its lowercased form matches ``pattern`` and contains
    none of ``foreign_markers``.
    """

    name: str
    pattern: str
    foreign_markers: tuple[str, ...] = ()
    provider_bindings: frozenset[str] = frozenset()
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern))

    def claims(self, model: str) -> bool:
        """True when ``model`` has this provenance."""
        lowered = model.lower()
        if not self._regex.match(lowered):
            return False
        return not any(marker in lowered for marker in self.foreign_markers)


@dataclass(frozen=True, slots=True, kw_only=True)
class LiteralFamily:
    """A literal model family (``claude-opus``): a provenance plus a family token (``opus``)."""

    name: str
    token: str
    provenance: Provenance

    def satisfied_by(self, model: str) -> bool:
        """True when ``model`` has the family's provenance and contains its token."""
        return self.provenance.claims(model) and self.token in model.lower()


ANTHROPIC_PROVENANCE: Final = Provenance(
    name="anthropic",
    pattern=r"^(?:anthropic\.|[a-z]{2,8}\.anthropic\.)?claude-",
    foreign_markers=("glm", "qwen", "deepseek", "kimi"),
    provider_bindings=frozenset({"anthropic"}),
)


def _frozen(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


#: The word sets a :class:`VocabularyExtension` may add to, by field name.
WORD_SETS: Final = (
    "roles",
    "capability_classes",
    "provider_bindings",
    "repo_classes",
    "request_faces",
    "transports",
    "legacy_mechanisms",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class VocabularyExtension:
    """Words a plugin adds to the vocabulary (the ``register_vocabulary`` hook's value).

    A word in a set means only "this name exists", so the same word from two plugins is the
    same word. A literal family carries a meaning (token and provenance rule): the same family
    name with another meaning is a conflict, and so is a name that is both a literal family and
    a capability class (a bare requirement string would be ambiguous).
    """

    roles: frozenset[str] = frozenset()
    literal_families: tuple[LiteralFamily, ...] = ()
    capability_classes: frozenset[str] = frozenset()
    provider_bindings: frozenset[str] = frozenset()
    repo_classes: frozenset[str] = frozenset()
    request_faces: frozenset[str] = frozenset()
    transports: frozenset[str] = frozenset()
    legacy_mechanisms: frozenset[str] = frozenset()
    #: ``(alias, provenance)`` pairs: bare model names (``opus``) that carry a provenance, so a
    #: concrete requirement naming one needs that provenance's lane. An alias with another
    #: provenance from another plugin is a conflict.
    model_aliases: tuple[tuple[str, Provenance], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Vocabulary:
    """Every closed set of names the resolver and the parsers check against."""

    roles: frozenset[str]
    literal_families: Mapping[str, LiteralFamily]
    capability_classes: frozenset[str]
    provider_bindings: frozenset[str]
    repo_classes: frozenset[str]
    request_faces: frozenset[str]
    transports: frozenset[str]
    legacy_mechanisms: frozenset[str]
    #: Bare model names that stand for a provenance without matching its pattern: the Claude
    #: CLI accepts ``opus``, ``sonnet`` and ``haiku`` (keys are stripped and lowercased).
    model_aliases: Mapping[str, Provenance] = field(default_factory=lambda: MappingProxyType({}))
    administrative_states: frozenset[str] = frozenset({"active", "disabled", "draining"})
    on_unavailable: frozenset[str] = frozenset({"hold", "reject"})
    selections: frozenset[str] = frozenset({"ordered"})
    #: The families' distinct provenances, in family-name order (what provenance_of tries).
    _provenances: tuple[Provenance, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        distinct: list[Provenance] = []
        for name in sorted(self.literal_families):
            provenance = self.literal_families[name].provenance
            if not any(provenance is seen for seen in distinct):
                distinct.append(provenance)
        object.__setattr__(self, "_provenances", tuple(distinct))

    def as_extension(self) -> VocabularyExtension:
        """Every extensible word of this vocabulary, as one extension (families sorted by name)."""
        return VocabularyExtension(
            roles=self.roles,
            literal_families=tuple(self.literal_families[n] for n in sorted(self.literal_families)),
            capability_classes=self.capability_classes,
            provider_bindings=self.provider_bindings,
            repo_classes=self.repo_classes,
            request_faces=self.request_faces,
            transports=self.transports,
            legacy_mechanisms=self.legacy_mechanisms,
            model_aliases=tuple(sorted(self.model_aliases.items(), key=lambda kv: kv[0])),
        )

    def canonical_worker_role(self, principal: str | None) -> str | None:
        """Strip and lowercase ``principal``; the role it names exactly, else ``None``.

        A loop name such as ``adr_reviewer`` is never guessed into a role.
        """
        if not isinstance(principal, str):
            return None
        candidate = principal.strip().lower()
        return candidate if candidate in self.roles else None

    def provenance_of(self, model: str) -> Provenance | None:
        """The provenance of the first literal family (by name) that claims ``model``, if any."""
        for provenance in self._provenances:
            if provenance.claims(model):
                return provenance
        return None

    def lane_provenance(self, model: str) -> Provenance | None:
        """The provenance whose lanes must serve ``model``: its own (:meth:`provenance_of`), or
        the one a bare alias (``haiku``, stripped and lowercased) stands for; ``None`` if neither.
        """
        provenance = self.provenance_of(model)
        if provenance is None and self.model_aliases:
            provenance = self.model_aliases.get(model.strip().lower())
        return provenance

    def satisfied_by(self, kind: str, value: str, model: str) -> bool:
        """Whether ``model`` satisfies the requirement ``(kind, value)``.

        Literal family: the model has the family's provenance and contains its token.
        Concrete model: equal ignoring case. Capability: always.
        """
        if kind == LITERAL_FAMILY:
            family = self.literal_families.get(value.lower())
            return family is not None and family.satisfied_by(model)
        if kind == CONCRETE_MODEL:
            return model.lower() == value.lower()
        return True

    def extended(
        self,
        *,
        roles: Iterable[str] = (),
        literal_families: Iterable[LiteralFamily] = (),
        capability_classes: Iterable[str] = (),
        provider_bindings: Iterable[str] = (),
        repo_classes: Iterable[str] = (),
        request_faces: Iterable[str] = (),
        transports: Iterable[str] = (),
        legacy_mechanisms: Iterable[str] = (),
        model_aliases: Mapping[str, Provenance] | None = None,
    ) -> Vocabulary:
        """A new vocabulary with these names added. A family name or alias already present is
        an error.

        Raises:
            ConfigurationError: a literal family of the same name, or the same alias, is
                already defined.
        """
        families = dict(self.literal_families)
        for family in literal_families:
            if family.name in families:
                raise ConfigurationError(f"literal family {family.name!r} is already defined")
            families[family.name] = family
        aliases = dict(self.model_aliases)
        for alias, provenance in (model_aliases or {}).items():
            key = alias.strip().lower()
            if key in aliases:
                raise ConfigurationError(f"model alias {key!r} is already defined")
            aliases[key] = provenance
        return replace(
            self,
            roles=self.roles | _frozen(r.lower() for r in roles),
            literal_families=MappingProxyType(families),
            capability_classes=self.capability_classes | _frozen(capability_classes),
            provider_bindings=self.provider_bindings | _frozen(provider_bindings),
            repo_classes=self.repo_classes | _frozen(repo_classes),
            request_faces=self.request_faces | _frozen(request_faces),
            transports=self.transports | _frozen(transports),
            legacy_mechanisms=self.legacy_mechanisms | _frozen(legacy_mechanisms),
            model_aliases=MappingProxyType(aliases),
        )


DEFAULT_VOCABULARY: Final = Vocabulary(
    roles=frozenset(
        {"explorer", "planner", "architect", "implementer", "debugger", "test_adequacy", "reviewer"}
    ),
    literal_families=MappingProxyType(
        {
            "claude-opus": LiteralFamily(
                name="claude-opus", token="opus", provenance=ANTHROPIC_PROVENANCE
            ),
            "claude-sonnet": LiteralFamily(
                name="claude-sonnet", token="sonnet", provenance=ANTHROPIC_PROVENANCE
            ),
        }
    ),
    capability_classes=frozenset({"high-reasoning", "balanced"}),
    model_aliases=MappingProxyType(
        {alias: ANTHROPIC_PROVENANCE for alias in ("opus", "sonnet", "haiku")}
    ),
    provider_bindings=frozenset({"anthropic", "zai-harness"}),
    repo_classes=frozenset({"hydraflow", "client", "personal"}),
    request_faces=frozenset({"agentic", "one-shot", "unknown"}),
    transports=frozenset({"gateway", "harness-direct", "direct-http"}),
    legacy_mechanisms=frozenset(
        {
            "default",
            "role-dial",
            "maintenance-default",
            "repo-provider",
            "fleet-ratchet",
            "credit-failover",
        }
    ),
)


#: No words at all: the base the plugin manager builds the effective vocabulary on.
EMPTY_VOCABULARY: Final = Vocabulary(
    roles=frozenset(),
    literal_families=MappingProxyType({}),
    capability_classes=frozenset(),
    provider_bindings=frozenset(),
    repo_classes=frozenset(),
    request_faces=frozenset(),
    transports=frozenset(),
    legacy_mechanisms=frozenset(),
)


def canonical_worker_role(
    principal: str | None, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> str | None:
    """The worker role ``principal`` names exactly (strip + lowercase), else ``None``."""
    return vocabulary.canonical_worker_role(principal)
