"""The quick reader of a stored policy revision: its body, exactly as ``to_dict`` wrote it, read
back into the policies ``RoutingPolicy.from_dict`` would build, without the general reader's cost.

Pure: no I/O. A revision's body is the canonical array of ``to_dict()`` of policies that
``from_dict`` built, so every value in it is already in the form ``from_dict`` normalises to:
strings stripped (and lowercased where it lowercases), sets sorted and unique, every field
present. Such a value is a fixed point: ``from_dict`` returns it unchanged. This reader checks
that each value *is* such a fixed point (cheap type, length and form checks, no field paths) and
builds the objects directly; at the first value that is not (a hand edit, another writer, a body
that is not even a list), it answers ``None`` and the caller reads the body with ``from_dict``,
which alone decides what the body is and reports what is wrong. So for every body the result is
``from_dict``'s result or ``None``, never something else: it is a shortcut, not a second reader.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import orjson

from .members import MAX_ID as _MAX_ID
from .members import ModelRequirement
from .policy import (
    ACTION_FIELDS,
    MATCH_DIMENSIONS,
    MAX_PRIORITY,
    POLICY_FIELDS,
    RequirementMapping,
    RoutingAction,
    RoutingMatch,
    RoutingPolicy,
)
from .vocabulary import CAPABILITY, CONCRETE_MODEL, LITERAL_FAMILY, Vocabulary

__all__ = ["read_stored"]

_REQUIREMENT_KEYS: Final = frozenset(("kind", "value"))
_MAPPING_KEYS: Final = frozenset(("requirement", "model"))
#: The length bounds ``from_dict`` holds these strings to (ids: ``members.MAX_ID``).
_MAX_TEXT: Final = 4096
_MAX_CONCRETE: Final = 64
_MAX_CHOICE: Final = 256


# -- trusted construction -----------------------------------------------------------------------
#
# The public constructors pay one ``object.__setattr__`` call per slot (the classes refuse
# assignment), twelve for an action. The values here are already checked, so these fill the
# slots directly through their descriptors: the same objects (every slot, in declaration order,
# the cached ones ``None`` as ``__init__`` leaves them), at about a third of the cost. Tests hold
# the slot lists to the classes'.

_new: Final = object.__new__
_MATCH_SLOTS: Final = (*MATCH_DIMENSIONS, "_keys")
_ACTION_SLOTS: Final = (
    *ACTION_FIELDS,
    "_canonical",
    "_allowed",
    "_maps",
    "_order",
)


def _setters(cls: type, slots: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(getattr(cls, name).__set__ for name in slots)


_P_ID, _P_ENABLED, _P_PRIORITY, _P_SAFETY, _P_DESCRIPTION, _P_MATCH, _P_ACTION = _setters(
    RoutingPolicy, POLICY_FIELDS
)
_M_REPOS, _M_CLASSES, _M_ROLES, _M_PRINCIPALS, _M_REQUIREMENTS, _M_FACES, _M_KEYS = _setters(
    RoutingMatch, _MATCH_SLOTS
)
(
    _A_LOCK,
    _A_POOL,
    _A_MAP,
    _A_ALLOWED,
    _A_BYPASS,
    _A_SELECTION,
    _A_UNAVAILABLE,
    _A_FALLBACK,
    _A_CANONICAL,
    _A_REGEX,
    _A_MAPS,
    _A_ORDER,
) = _setters(RoutingAction, _ACTION_SLOTS)
_EMPTY: Final[frozenset[str]] = frozenset()
#: The fields ``to_dict`` writes (all of them, always).
_POLICY_KEYS: Final = frozenset(POLICY_FIELDS)
_MATCH_KEYS: Final = frozenset(MATCH_DIMENSIONS)
_ACTION_KEYS: Final = frozenset(ACTION_FIELDS)


def _fixed(allowed: Collection[str]) -> frozenset[str]:
    """The names of a closed set that ``_parse.choice`` returns unchanged: stripped, lowercased,
    1..256 characters, valid Unicode. A stored name outside it sends the body to ``from_dict``."""
    out = set()
    for name in allowed:
        if (
            type(name) is str
            and 1 <= len(name) <= _MAX_CHOICE
            and name == name.strip()
            and name == name.lower()
        ):
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                continue
            out.add(name)
    return frozenset(out)


class _Reader:
    """One body's read: the vocabulary's fixed names and the values already built, so a
    requirement, a requirement map or a whole action that many policies share is checked and
    built once (the values are frozen, and their caches depend on their fields alone, so
    sharing one is invisible but for ``is``)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.repo_classes = _fixed(vocabulary.repo_classes)
        self.roles = _fixed(vocabulary.roles)
        self.request_faces = _fixed(vocabulary.request_faces)
        self.provider_bindings = _fixed(vocabulary.provider_bindings)
        self.selections = _fixed(vocabulary.selections)
        self.on_unavailable = _fixed(vocabulary.on_unavailable)
        self.closed = {
            LITERAL_FAMILY: _fixed(vocabulary.literal_families),
            CAPABILITY: _fixed(vocabulary.capability_classes),
        }
        self.lowered: set[str] = set()  # strings already seen to be stripped and lowercased
        self.stripped: set[str] = set()  # ... stripped (1..256 characters, both sets)
        self.requirements: dict[tuple[str, str], ModelRequirement] = {}
        self.maps: dict[tuple[tuple[str, str, str], ...], tuple[RequirementMapping, ...]] = {}
        self.actions: dict[bytes, RoutingAction] = {}

    def lower_id(self, value: Any) -> bool:
        """Whether ``value`` is a string ``_str_set`` returns unchanged."""
        if type(value) is not str:
            return False
        if value in self.lowered:
            return True
        if 1 <= len(value) <= _MAX_ID and value == value.strip() and value == value.lower():
            self.lowered.add(value)
            return True
        return False

    def stripped_id(self, value: Any) -> bool:
        """Whether ``value`` is a string ``_parse.string(max_len=256)`` returns unchanged."""
        if type(value) is not str:
            return False
        if value in self.stripped:
            return True
        if 1 <= len(value) <= _MAX_ID and value == value.strip():
            self.stripped.add(value)
            return True
        return False

    def lower_set(self, value: Any) -> frozenset[str] | None:
        """``_str_set(value)`` for a stored list of such strings, else None."""
        if type(value) is not list:
            return None
        if not value:
            return _EMPTY
        for item in value:
            if not self.lower_id(item):
                return None
        return frozenset(value)

    def sorted_set(self, value: Any) -> tuple[str, ...] | None:
        """``tuple(sorted(_str_set(value)))`` for a stored list, else None."""
        items = self.lower_set(value)
        if items is None:
            return None
        return tuple(sorted(items)) if items else ()

    def choice_set(self, value: Any, fixed: frozenset[str]) -> frozenset[str] | None:
        """``_choice_set(value, ...)`` for a stored list of names in ``fixed``, else None."""
        if type(value) is not list:
            return None
        if not value:
            return _EMPTY
        for item in value:
            if type(item) is not str or item not in fixed:
                return None
        return frozenset(value)

    def requirement(self, value: Any) -> tuple[str, str] | None:
        """``(kind, value)`` of a stored requirement whose value is already lowercased."""
        if type(value) is not dict or value.keys() != _REQUIREMENT_KEYS:
            return None
        kind, text = value["kind"], value["value"]
        if type(kind) is not str or type(text) is not str:
            return None
        if kind == CONCRETE_MODEL:
            if not (
                1 <= len(text) <= _MAX_CONCRETE and text == text.strip() and text == text.lower()
            ):
                return None
        else:
            fixed = self.closed.get(kind)
            if fixed is None or text not in fixed:
                return None
        return (kind, text)

    def built_requirement(self, key: tuple[str, str]) -> ModelRequirement:
        req = self.requirements.get(key)
        if req is None:
            req = self.requirements[key] = ModelRequirement(kind=key[0], value=key[1])
        return req

    def match(self, value: Any) -> RoutingMatch | None:
        if type(value) is not dict or value.keys() != _MATCH_KEYS:
            return None
        repo_ids = self.lower_set(value["repo_ids"])
        principal_ids = self.lower_set(value["principal_ids"])
        repo_classes = self.choice_set(value["repo_classes"], self.repo_classes)
        roles = self.choice_set(value["roles"], self.roles)
        request_faces = self.choice_set(value["request_faces"], self.request_faces)
        raw = value["model_requirements"]
        if (
            repo_ids is None
            or principal_ids is None
            or repo_classes is None
            or roles is None
            or request_faces is None
            or type(raw) is not list
        ):
            return None
        requirements = []
        for item in raw:
            key = self.requirement(item)
            if key is None:
                return None
            requirements.append(self.built_requirement(key))
        # A stored repo id is lowercased and stripped, which is what ``canonicalize_repo``
        # returns for a canonical one and what ``from_dict`` keeps for any other: unchanged.
        m = _new(RoutingMatch)
        _M_REPOS(m, repo_ids)
        _M_CLASSES(m, repo_classes)
        _M_ROLES(m, roles)
        _M_PRINCIPALS(m, principal_ids)
        _M_REQUIREMENTS(m, frozenset(requirements) if requirements else _EMPTY)
        _M_FACES(m, request_faces)
        _M_KEYS(m, None)
        return m

    def requirement_map(self, value: Any) -> tuple[RequirementMapping, ...] | None:
        if type(value) is not list:
            return None
        entries = []
        for item in value:
            if type(item) is not dict or item.keys() != _MAPPING_KEYS:
                return None
            key = self.requirement(item["requirement"])
            model = item["model"]
            if key is None or not self.stripped_id(model):
                return None
            entries.append((key[0], key[1], model))
        # ``from_dict`` sorts by (requirement key, model): the same order as these triples.
        entries.sort()
        triples = tuple(entries)
        built = self.maps.get(triples)
        if built is None:
            built = self.maps[triples] = tuple(
                RequirementMapping(requirement=self.built_requirement((kind, text)), model=model)
                for kind, text, model in triples
            )
        return built

    def action(self, value: Any) -> RoutingAction | None:
        if type(value) is not dict:
            return None
        # Policies share actions (a few dozen distinct among thousands of policies): the same
        # JSON text is the same value, so it reads the same, once.
        text = orjson.dumps(value)
        built = self.actions.get(text)
        if built is None:
            built = self._action(value)
            if built is not None:
                self.actions[text] = built
        return built

    def _action(self, value: dict[str, Any]) -> RoutingAction | None:
        if value.keys() != _ACTION_KEYS:
            return None
        lock = value["provider_lock"]
        pool = value["account_pool"]
        bypass = value["forbid_direct_bypass"]
        selection = value["selection"]
        on_unavailable = value["on_unavailable"]
        if lock is not None and (type(lock) is not str or lock not in self.provider_bindings):
            return None
        if type(pool) is not list or type(bypass) is not bool:
            return None
        if type(selection) is not str or selection not in self.selections:
            return None
        if type(on_unavailable) is not str or on_unavailable not in self.on_unavailable:
            return None
        for account in pool:
            if not self.stripped_id(account):
                return None
        if len(set(pool)) != len(pool):  # ``from_dict`` refuses an account listed twice
            return None
        requirement_map = self.requirement_map(value["requirement_map"])
        allowed = self.sorted_set(value["allowed_patterns"])
        fallback_on = self.sorted_set(value["fallback_on"])
        if requirement_map is None or allowed is None or fallback_on is None:
            return None
        a = _new(RoutingAction)
        _A_LOCK(a, lock)
        _A_POOL(a, tuple(pool))
        _A_MAP(a, requirement_map)
        _A_ALLOWED(a, allowed)
        _A_BYPASS(a, bypass)
        _A_SELECTION(a, selection)
        _A_UNAVAILABLE(a, on_unavailable)
        _A_FALLBACK(a, fallback_on)
        _A_CANONICAL(a, None)
        _A_REGEX(a, None)
        _A_MAPS(a, None)
        _A_ORDER(a, None)
        return a

    def policy(self, value: Any) -> RoutingPolicy | None:
        if type(value) is not dict or value.keys() != _POLICY_KEYS:
            return None
        pid = value["id"]
        enabled = value["enabled"]
        priority = value["priority"]
        safety = value["system_safety"]
        description = value["description"]
        if type(pid) is not str or len(pid) > _MAX_TEXT:  # verbatim, may be empty
            return None
        if type(enabled) is not bool or type(safety) is not bool:
            return None
        if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
            return None
        if description is not None and (
            type(description) is not str
            or not 1 <= len(description) <= _MAX_TEXT
            or description != description.strip()
        ):
            return None
        match = self.match(value["match"])
        action = self.action(value["action"])
        if match is None or action is None:
            return None
        pol = _new(RoutingPolicy)
        _P_ID(pol, pid)
        _P_ENABLED(pol, enabled)
        _P_PRIORITY(pol, priority)
        _P_SAFETY(pol, safety)
        _P_DESCRIPTION(pol, description)
        _P_MATCH(pol, match)
        _P_ACTION(pol, action)
        return pol


def _json_value(body: bytes) -> Any:
    """The value ``json.loads(body.decode("utf-8"))`` reads, when ``body`` is exactly what
    orjson writes for the value orjson reads from it; else ``None``.

    Such a body is one compact JSON value of strings (valid Unicode: orjson refuses a lone
    surrogate), 64-bit integers, finite floats, booleans, nulls, lists and objects with unique
    keys, which the standard library reads as that same value (the argument of
    ``_parse.is_strict_json``). ``canonical_bytes`` writes every string and every integer the
    saved form holds as orjson does (checked for every code point), so a saved body is one.
    """
    try:
        doc = orjson.loads(body)
        if orjson.dumps(doc) == body:
            return doc
    except (ValueError, TypeError):  # orjson.JSONDecodeError, orjson.JSONEncodeError
        pass
    return None


def read_stored(body: bytes, *, vocabulary: Vocabulary) -> tuple[RoutingPolicy, ...] | None:
    """The policies of a stored revision body, exactly what ``RoutingPolicy.from_dict`` builds
    from each element of ``json.loads(body)`` (equal, element for element), when the body is a
    JSON array of policies every value of which is already in ``to_dict``'s form; else ``None``,
    and the caller reads the body with ``from_dict`` (the authority on any other body).
    """
    doc = _json_value(body)
    if type(doc) is not list:
        return None
    reader = _Reader(vocabulary)
    out = []
    for i in range(len(doc)):
        policy = reader.policy(doc[i])
        if policy is None:
            return None
        # Each parsed policy is freed as soon as it is read, while its ~20 containers are
        # still in the CPU's cache (freeing the whole document at the end costs ~15% more).
        doc[i] = None
        out.append(policy)
    return tuple(out)
