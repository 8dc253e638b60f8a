"""The Prometheus text exposition format (version 0.0.4), written by hand: metric families as
values and their rendering (``HELP`` and ``TYPE`` lines, escaped label values, one sample a
line). No dependency: the core stays light on air-gapped hosts (docs/operations.md "Metrics").

Pure: no I/O, no clock; the collectors (:mod:`.metrics`) give the values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["CONTENT_TYPE", "Family", "Sample", "label_value", "render"]

#: The ``Content-Type`` of a scrape's answer.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: A label value taken from stored data (a reason code) is kept only in this shape.
_CODE: Final = re.compile(r"[a-z][a-z0-9_.-]{0,47}")
_KINDS: Final = ("counter", "gauge")


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of a family: its labels (name, value pairs, in order) and its value."""

    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """A metric family: ``name`` (a counter's ends in ``_total``), ``kind`` (``counter`` or
    ``gauge``), a one-line ``help`` and its samples.

    Raises:
        ValueError: a malformed name or label name, an unknown kind, a counter not named
            ``..._total``, or a negative counter value (a bug in a collector).
    """

    name: str
    kind: str
    help: str
    samples: tuple[Sample, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or self.kind not in _KINDS:
            raise ValueError(f"bad metric family {self.name!r} ({self.kind})")
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name!r} must end in _total")
        for sample in self.samples:
            for label, _ in sample.labels:
                if not _LABEL.fullmatch(label) or label.startswith("__"):
                    raise ValueError(f"bad label name {label!r} in {self.name}")
            if self.kind == "counter" and not sample.value >= 0:
                raise ValueError(f"counter {self.name} has value {sample.value}")

    @classmethod
    def single(cls, name: str, kind: str, help: str, value: float) -> Family:
        """A family of one unlabelled sample."""
        return cls(name=name, kind=kind, help=help, samples=(Sample((), value),))

    @classmethod
    def by(cls, name: str, kind: str, help: str, label: str, values: Mapping[str, float]) -> Family:
        """A family with one sample per value of ``label`` (sorted by that value)."""
        samples = tuple(Sample(((label, k),), values[k]) for k in sorted(values))
        return cls(name=name, kind=kind, help=help, samples=samples)


def label_value(text: str, *, other: str = "other") -> str:
    """``text`` when it has the shape of a reason code (lower-case letters, digits, ``-``,
    ``_``, ``.``; at most 48 characters), else ``other``: a value read from stored data never
    becomes an unbounded or hostile label."""
    return text if isinstance(text, str) and _CODE.fullmatch(text) else other


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The exposition text of ``families``, in the order given; each family once.

    Raises:
        ValueError: a family name given twice (a bug in a collector).
    """
    lines: list[str] = []
    seen: set[str] = set()
    for family in families:
        if family.name in seen:
            raise ValueError(f"metric family {family.name} given twice")
        seen.add(family.name)
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sample.labels)
            where = f"{{{labels}}}" if labels else ""
            lines.append(f"{family.name}{where} {_number(sample.value)}")
    return "".join(f"{line}\n" for line in lines)
