"""Snapshot validators as data: a named check over a ruleset snapshot's sections, and the runner
that turns every validator's answer (or failure) into a result.

Pure: no I/O, no plugin manager. Plugins contribute :class:`SnapshotValidator` values through
the ``register_snapshot_validators`` hook;
:func:`rensei_routing.plugins.manager.snapshot_validators`
collects them (sorted by name) and the snapshot code calls :func:`run_validators`.

Posture: a validator that raises, or answers anything but a list or tuple of strings, counts as
a *failed* validation (never as a pass, and never as an exception escaping to the caller); it
is shown a deep read-only copy of the sections, so it cannot change what is published.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .readonly import read_only

__all__ = ["SnapshotCheck", "SnapshotValidator", "ValidatorResult", "run_validators"]

#: A validator's check: the snapshot's sections (section name -> decoded JSON value, an absent
#: section is ``None``) -> the problems found, one readable string each (empty = valid).
SnapshotCheck = Callable[[Mapping[str, Any]], Sequence[str]]

_MAX_PROBLEM: Final = 1024
_CHANGED: Final = "ChangedSections: changed the read-only sections it was shown"


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotValidator:
    """A named check over a snapshot's sections. ``plugin`` is filled in by the collector with
    the name of the plugin that registered it (leave it empty when constructing one)."""

    name: str
    check: SnapshotCheck
    description: str = ""
    plugin: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidatorResult:
    """One validator's verdict. Truthy when it passed: no problems and no error.

    ``error`` is set (``"<ErrorType>: message"``) when the validator raised or answered the
    wrong type; the validation then failed.
    """

    name: str
    plugin: str
    problems: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.error is None

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "plugin": self.plugin,
            "ok": self.ok,
            "problems": list(self.problems),
            "error": self.error,
        }


def _run_one(validator: SnapshotValidator, sections: Mapping[str, Any]) -> ValidatorResult:
    name, plugin = validator.name, validator.plugin
    try:
        answer: object = validator.check(sections)
    except Exception as e:  # a raising validator is a failed validation, never a crash
        return ValidatorResult(name=name, plugin=plugin, error=f"{type(e).__name__}: {e}")
    if not isinstance(answer, (list, tuple)) or not all(isinstance(x, str) for x in answer):
        return ValidatorResult(
            name=name,
            plugin=plugin,
            error=f"WrongReturnType: returned {type(answer).__name__}, not a list of strings",
        )
    return ValidatorResult(
        name=name, plugin=plugin, problems=tuple(x[:_MAX_PROBLEM] for x in answer)
    )


def run_validators(
    validators: Iterable[SnapshotValidator], sections: Mapping[str, Any]
) -> tuple[ValidatorResult, ...]:
    """Run every validator over ``sections``, in the order given; one result each.

    The validators see a deep read-only copy of the sections (:func:`.readonly.read_only`,
    made once per call): a validator that tries to change them fails (``TypeError``, a failed
    validation, so nothing is published). One that goes around the guard changes only the
    copy, never ``sections`` (what the caller signs and publishes); the copy is compared with
    the sections after each validator, and a validator that changed it fails and the next
    ones get a fresh copy, so no validator changes another's verdict.

    Raises:
        Nothing: a validator that raises or answers the wrong type yields a failed result.
    """
    chosen = tuple(validators)
    try:
        view = read_only(dict(sections))
        reference: Any = sections if view == sections else read_only(dict(sections))
    except RecursionError:  # deeper than a read-only copy can go: nothing may pass
        error = "RecursionError: the sections are nested too deeply to show them read-only"
        return tuple(ValidatorResult(name=v.name, plugin=v.plugin, error=error) for v in chosen)
    out: list[ValidatorResult] = []
    for v in chosen:
        result = _run_one(v, view)
        if view != reference:  # changed around the guard: it fails, the others see the truth
            result = ValidatorResult(
                name=v.name, plugin=v.plugin, problems=result.problems, error=_CHANGED
            )
            view = read_only(dict(sections))
        out.append(result)
    return tuple(out)
