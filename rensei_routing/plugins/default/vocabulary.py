"""The built-in vocabulary plugin: contributes the shipped words (roles, literal families and
their provenance rule, capability classes, bindings, repo classes, faces, transports, legacy
mechanisms of the design sources) through the same hook a third-party plugin uses."""

from __future__ import annotations

from collections.abc import Callable

from ...plugin import DEFAULT_VOCABULARY, VocabularyExtension, hookimpl


@hookimpl
def register_vocabulary(register: Callable[[VocabularyExtension], None]) -> None:
    register(DEFAULT_VOCABULARY.as_extension())
