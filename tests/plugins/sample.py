"""A well-behaved sample plugin implementing every hook (the observer keeps what it saw on the
``SampleObserver`` instances, never in module state)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from rensei_routing.plugin import (
    ANTHROPIC_PROVENANCE,
    AuditRecord,
    LiteralFamily,
    RedactionPattern,
    Seam,
    SnapshotValidator,
    Stage,
    VocabularyExtension,
    classify_legacy_mechanism,
    hookimpl,
)

HAIKU = LiteralFamily(name="claude-haiku", token="haiku", provenance=ANTHROPIC_PROVENANCE)
ACME_TOKEN = RedactionPattern(
    "acme-token", re.compile(r"acme_[A-Za-z0-9]{16,}", re.ASCII), ("acme_",)
)


def _classify(stages: Sequence[Stage]) -> Stage:
    return classify_legacy_mechanism(stages)


SEAM = Seam(
    name="sample-batch",
    request_face="one-shot",
    stages=("default", "nightly-window", "credit-failover"),
    classifier=_classify,
    description="a sample seam with a mechanism of its own",
)


def _has_policy_bundle(sections: Mapping[str, Any]) -> list[str]:
    return [] if sections.get("policyBundle") is not None else ["policyBundle is absent"]


@hookimpl
def register_seams(register: Callable[[Seam], None]) -> None:
    register(SEAM)


@hookimpl
def register_vocabulary(register: Callable[[VocabularyExtension], None]) -> None:
    register(
        VocabularyExtension(
            roles=frozenset({"auditor"}),
            literal_families=(HAIKU,),
            capability_classes=frozenset({"long-context"}),
            provider_bindings=frozenset({"acme-cloud"}),
            repo_classes=frozenset({"vendor"}),
            legacy_mechanisms=frozenset({"nightly-window"}),
        )
    )


@hookimpl
def register_redaction_patterns(register: Callable[[RedactionPattern], None]) -> None:
    register(ACME_TOKEN)


@hookimpl
def register_snapshot_validators(register: Callable[[SnapshotValidator], None]) -> None:
    register(SnapshotValidator(name="sample-has-policy-bundle", check=_has_policy_bundle))


@hookimpl
def register_commands(cli: click.Group) -> None:
    @cli.group(name="sample")
    def sample() -> None:
        """Sample plugin commands."""

    @sample.command(name="hello")
    def sample_hello() -> None:
        """Say hello."""
        click.echo("hello from sample")


class SampleObserver:
    """A ``decision_recorded`` observer; ``fail`` makes it raise after noting the record."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.seen: list[tuple[int, str]] = []

    @hookimpl
    def decision_recorded(self, record: AuditRecord) -> None:
        self.seen.append((record.seq, record.record_hash))
        if self.fail:
            raise RuntimeError("observer is down")
