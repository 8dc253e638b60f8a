"""Deep read-only copies of snapshot sections, for the plugins that are shown them.

A snapshot validator (at compile) and an authorizer's ``prepare`` (on a host) get the sections
as plain JSON values; a plugin that mutated them would change what is signed and published, or
what the next plugin and the built-in grant check see. :func:`read_only` gives each plugin a
deep copy in which every object is a :class:`ReadOnlyDict` and every array a
:class:`ReadOnlyList`: still a ``dict`` and a ``list`` (so ``isinstance`` checks, ``json.dumps``
and iteration work as before), but every mutator raises ``TypeError``. Being a copy, even a
plugin that goes around the guard (``dict.__setitem__(view, ...)``) changes only its own view.
``copy()`` and ``copy.deepcopy`` give plain, mutable values.

Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["ReadOnlyDict", "ReadOnlyList", "read_only", "thaw"]

_MESSAGE = "snapshot sections are read-only (copy them to change a copy)"


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError(_MESSAGE)


class ReadOnlyDict(dict[str, Any]):
    """A JSON object that refuses every change."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class ReadOnlyList(list[Any]):
    """A JSON array that refuses every change."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def read_only(value: Any) -> Any:
    """A deep read-only copy of a JSON value (objects and any other mappings become
    :class:`ReadOnlyDict`, arrays and tuples :class:`ReadOnlyList`; scalars as they are).

    Raises:
        RecursionError: nested deeper than the interpreter's recursion limit allows.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if kind is dict or isinstance(value, Mapping):
        return ReadOnlyDict({k: read_only(v) for k, v in value.items()})
    if kind is list or isinstance(value, list | tuple):
        return ReadOnlyList([read_only(v) for v in value])
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a (read-only) JSON value."""
    return copy.deepcopy(value)
