"""Applying an enforced route at the four HydraFlow seams: the agentic seams spawn the Claude CLI
from an argv, so the route's model becomes its ``--model``; the one-shot seam sends a request
mapping, so the route's model becomes its ``model``. Pure: returns new values, never changes
the request it is given, never spawns anything.

Only the model is applied. The provider and account of an enforced route are the governed
transport's (a canary covers gateway spawns only and never moves a spawn onto or off the
gateway), so the argv and the mapping carry nothing else to rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rensei_routing.plugin import ENFORCED, EnforcedRoute, SeamRequestError

__all__ = ["ARGV_SEAMS", "MAPPING_SEAMS", "MODEL_FLAG", "apply_model", "rewrite_argv", "set_model"]

#: The seams that spawn a child process from an argv.
ARGV_SEAMS: Final = frozenset({"agentic-runner", "subprocess-runner", "streaming-agent"})
#: The seams that send a request mapping (the one-shot call).
MAPPING_SEAMS: Final = frozenset({"lightweight-agent"})
MODEL_FLAG: Final = "--model"
#: Where an argv's options end: tokens after it are operands, never rewritten.
_END_OF_OPTIONS: Final = "--"


def _checked_argv(seam: str, argv: object) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise SeamRequestError(
            f"seam {seam!r} spawns from an argv (a list of str), not {type(argv).__name__}"
        )
    if not argv:
        raise SeamRequestError(f"seam {seam!r}: the argv is empty (it names no program)")
    for i, token in enumerate(argv):
        if not isinstance(token, str):
            raise SeamRequestError(f"seam {seam!r}: argv[{i}] is {type(token).__name__}, not str")
    return list(argv)


def _missing_value(token: str | None) -> bool:
    return token is None or not token or token.startswith("-")


def rewrite_argv(seam: str, argv: object, model: str) -> list[str]:
    """A new argv whose ``--model`` is ``model``: every ``--model X`` and ``--model=X`` before
    the end of options (``--``) rewritten in place, or ``--model model`` added just before it
    (at the end when there is none). ``argv[0]`` is the program and never read as an option.

    Raises:
        SeamRequestError: ``argv`` is not a non-empty list of str, or a ``--model`` has no
            value (last token, empty, or followed by another option).
    """
    out = _checked_argv(seam, argv)
    end = out.index(_END_OF_OPTIONS, 1) if _END_OF_OPTIONS in out[1:] else len(out)
    found = False
    i = 1
    while i < end:
        token = out[i]
        if token == MODEL_FLAG:
            value = out[i + 1] if i + 1 < end else None
            if _missing_value(value):
                raise SeamRequestError(f"seam {seam!r}: {MODEL_FLAG} at argv[{i}] has no value")
            out[i + 1] = model
            found = True
            i += 2
            continue
        if token.startswith(MODEL_FLAG + "="):
            if _missing_value(token.partition("=")[2]):
                raise SeamRequestError(f"seam {seam!r}: {token!r} at argv[{i}] has no value")
            out[i] = f"{MODEL_FLAG}={model}"
            found = True
        i += 1
    if not found:
        out[end:end] = [MODEL_FLAG, model]
    return out


def set_model(seam: str, request: object, model: str | None) -> dict[str, Any]:
    """A new mapping: ``request`` with its ``model`` set to ``model`` (kept when ``None``).

    Raises:
        SeamRequestError: ``request`` is not a mapping with str keys, or has no ``model`` that
            is a non-empty str.
    """
    if not isinstance(request, Mapping):
        raise SeamRequestError(
            f"seam {seam!r} sends a request mapping, not {type(request).__name__}"
        )
    if not all(isinstance(k, str) for k in request):
        raise SeamRequestError(f"seam {seam!r}: the request's keys must be str")
    current = request.get("model")
    if not isinstance(current, str) or not current:
        raise SeamRequestError(
            f"seam {seam!r}: the request names no model (a non-empty str under 'model')"
        )
    return {**request, "model": current if model is None else model}


def apply_model(seam: str, route: EnforcedRoute, request: object) -> list[str] | dict[str, Any]:
    """``request`` rewritten for ``route`` at one of the four seams. A ``legacy-compatible``
    route, or one naming no model, keeps the request's model (the request is still checked:
    a spawn whose request the seam could not rewrite is refused the same way enforced or not).

    Raises:
        SeamRequestError: the request is not the seam's shape (see :func:`rewrite_argv`,
            :func:`set_model`).
        KeyError: ``seam`` is not one of the four (the hook answers ``None`` before this).
    """
    model = route.model if route.kind == ENFORCED else None
    if model is not None and (not model.strip() or model.startswith("-")):
        raise SeamRequestError(f"seam {seam!r}: the route's model {model!r} is not a model name")
    if seam in MAPPING_SEAMS:
        return set_model(seam, request, model)
    if seam not in ARGV_SEAMS:
        raise KeyError(seam)
    if model is None:
        argv = _checked_argv(seam, request)
        rewrite_argv(seam, argv, "checked")  # the same refusals as an enforced route
        return argv
    return rewrite_argv(seam, request, model)
