"""Deliberately broken plugins, one class each (registered as instances by the tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click

from rensei_routing.plugin import (
    ANTHROPIC_PROVENANCE,
    LiteralFamily,
    Seam,
    Stage,
    VocabularyExtension,
    hookimpl,
)

from .sample import SEAM


class MisspelledHook:
    @hookimpl
    def register_seam(self, register: Callable[[Seam], None]) -> None:
        """``register_seams`` misspelled."""


class RivalSeam:
    """Claims the sample plugin's seam name."""

    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> None:
        register(Seam(name=SEAM.name, request_face="agentic", stages=("default",)))


class RegistersADict:
    @hookimpl
    def register_seams(self, register: Callable[[object], None]) -> None:
        register({"name": "dict-seam"})


class ReturnsAList:
    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> object:
        return [Seam(name="listed", request_face="agentic", stages=("default",))]


class Raises:
    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> None:
        raise OSError("config file missing")


def _explode(stages: Sequence[Stage]) -> Stage:
    raise ZeroDivisionError("classifier bug")


class RaisingClassifier:
    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> None:
        register(
            Seam(name="fragile", request_face="agentic", stages=("default",), classifier=_explode)
        )


class UnknownFace:
    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> None:
        register(Seam(name="odd", request_face="telepathic", stages=("default",)))


class Vocab:
    """Contributes one vocabulary extension."""

    def __init__(self, extension: VocabularyExtension) -> None:
        self.extension = extension

    @hookimpl
    def register_vocabulary(self, register: Callable[[VocabularyExtension], None]) -> None:
        register(self.extension)


OPUS_AS_HAIKU = LiteralFamily(name="claude-opus", token="haiku", provenance=ANTHROPIC_PROVENANCE)


class ShadowsABuiltinCommand:
    @hookimpl
    def register_commands(self, cli: click.Group) -> None:
        @cli.command(name="init")
        def init() -> None:
            """Not the real init."""


class DirectHttpAsAString:
    @hookimpl
    def register_seams(self, register: Callable[[Seam], None]) -> None:
        register(
            Seam(
                name="stringly",
                request_face="one-shot",
                stages=("default",),
                direct_http_providers="zai",  # type: ignore[arg-type]
            )
        )


class MisnamedArgument:
    @hookimpl
    def register_seams(self, registrar: Callable[[Seam], None]) -> None:
        """``register`` misnamed: pluggy refuses it at registration."""
