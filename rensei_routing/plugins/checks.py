"""Checks a plugin author (``rensei_routing.plugins.testing``) and an operator (``rensei plugins
check NAME``) run on one plugin: it loads, its hooks answer with the right types and clash with
nothing, and every seam classifier it ships is total over generated stage sequences.

Adapter over :mod:`rensei_routing.plugins.manager`; no I/O beyond loading the plugin, no printing.
The stage-sequence generator is a seeded :class:`random.Random`, so the property check needs no
test dependency at runtime (``rensei_routing.plugins.testing`` adds a hypothesis strategy when
hypothesis is installed).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterator
from typing import Final

import pluggy

from ..core.shadow.compare import Seam, Stage
from ..errors import ClassifierError, PluginError
from .manager import (
    authorizers,
    classifier_problem,
    get_plugin_manager,
    plugin_commands,
    redactor,
    seam_registry,
    snapshot_validators,
    vocabulary,
)

__all__ = [
    "PROVIDERS",
    "check_classifier_total",
    "check_plugin",
    "check_plugin_manager",
    "stage_sequences",
]

#: Legacy provider names the generator draws from, with case and space variants (a classifier
#: must treat `` ZAI `` as ``zai``).
PROVIDERS: Final = (
    "claude",
    "anthropic",
    "zai",
    "gateway",
    "kimi",
    "openrouter",
    " ZAI ",
    "Gateway",
    "CLAUDE",
)


def stage_sequences(
    seam: Seam, *, count: int = 200, seed: int = 0, providers: tuple[str, ...] = PROVIDERS
) -> Iterator[tuple[Stage, ...]]:
    """``count`` stage sequences a spawn at ``seam`` could report: non-empty subsequences of
    ``seam.stages`` in the seam's order, each stage on a provider from ``providers``, with and
    without a ``provider=...`` detail. Deterministic for a given ``seed``; every single-stage
    sequence comes first."""
    rng = random.Random(seed)
    names = seam.stages
    emitted = 0
    for name in names:
        if emitted >= count:
            return
        yield (Stage(mechanism=name, provider=rng.choice(providers)),)
        emitted += 1
    while emitted < count:
        k = rng.randint(1, len(names))
        picked = sorted(rng.sample(range(len(names)), k))
        stages = []
        for i in picked:
            provider = rng.choice(providers)
            detail = f"provider={provider.strip().lower()}" if rng.random() < 0.5 else ""
            stages.append(Stage(mechanism=names[i], provider=provider, detail=detail))
        yield tuple(stages)
        emitted += 1


def check_classifier_total(
    seam: Seam, *, plugin: str = "?", count: int = 200, seed: int = 0
) -> int:
    """Run ``seam``'s classifier over :func:`stage_sequences`; returns how many were checked.

    Raises:
        ClassifierError: naming the plugin, the seam and the first sequence on which the
            classifier raised, returned a non-Stage, or named a stage it was not given.
    """
    checked = 0
    for stages in stage_sequences(seam, count=count, seed=seed):
        _, problem = classifier_problem(seam, stages)
        if problem is not None:
            shown = ", ".join(f"{s.mechanism}:{s.provider.strip()}" for s in stages)
            raise ClassifierError(
                f"plugin {plugin!r}: seam {seam.name!r} classifier is not total: on [{shown}] "
                f"{problem}"
            )
        checked += 1
    return checked


def _attempt(problems: list[str], what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except PluginError as e:
        problems.append(f"{what}: {e}")


def check_plugin_manager(
    pm: pluggy.PluginManager,
    name: str,
    *,
    reserved_commands: Collection[str] = (),
    count: int = 200,
    seed: int = 0,
) -> tuple[str, ...]:
    """Every problem of plugin ``name`` (already registered in ``pm`` beside the built-ins),
    one line each; empty when it passes. ``reserved_commands`` are the CLI's own command names
    (a plugin command may not take one)."""
    if not pm.has_plugin(name):
        return (f"plugin {name!r} is not registered",)
    problems: list[str] = []
    _attempt(problems, "vocabulary", lambda: vocabulary(pm))
    _attempt(problems, "redaction patterns", lambda: redactor(pm))
    _attempt(problems, "snapshot validators", lambda: snapshot_validators(pm))
    _attempt(problems, "authorizers", lambda: authorizers(pm))
    _attempt(problems, "commands", lambda: plugin_commands(pm, reserved=reserved_commands))
    try:
        registry = seam_registry(pm)
    except PluginError as e:
        problems.append(f"seams: {e}")
        return tuple(problems)
    for seam_name, owner in registry.owners.items():
        if owner != name:
            continue
        try:
            check_classifier_total(registry.seams[seam_name], plugin=name, count=count, seed=seed)
        except ClassifierError as e:
            problems.append(f"seam {seam_name}: {e}")
    return tuple(problems)


def check_plugin(
    name: str, *, reserved_commands: Collection[str] = (), count: int = 200, seed: int = 0
) -> tuple[str, ...]:
    """Load the installed plugin ``name`` (only it, beside the built-ins, whatever
    ``RENSEI_ROUTING_LOAD_PLUGINS`` says) and return its problems, one line each."""
    try:
        pm = get_plugin_manager(names=(name,))
    except PluginError as e:
        return (f"load: {e}",)
    if not pm.has_plugin(name):
        return (f"no installed plugin named {name!r} (entry point group rensei_routing)",)
    return check_plugin_manager(
        pm, name, reserved_commands=reserved_commands, count=count, seed=seed
    )
