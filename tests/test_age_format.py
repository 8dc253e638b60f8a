"""One human form for ages and durations in text (issue 22, edge 18): ``13m52s`` from the one
helper, :func:`rensei_routing.core.timestamps.format_age`, in every text output and message;
JSON keeps milliseconds. A scan of the source keeps anyone from formatting one by hand again."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rensei_routing.core.snapshot.freshness import FreshnessPolicy
from rensei_routing.core.timestamps import format_age
from rensei_routing.errors import ConfigurationError, ExpiredError, FutureSnapshotError

PACKAGE = Path(__file__).resolve().parent.parent / "rensei_routing"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

#: ``{expr}`` of an f-string followed by a unit of time, where ``expr`` computes a duration.
_BY_HAND = re.compile(r"\{([^{}]*(?:_ms|1000|total_seconds|_s\b)[^{}]*)\}(\s?m?s)\b")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (999, "0s"),
        (45_000, "45s"),
        (833_706, "13m53s"),
        (3_720_000, "1h02m"),
        (-5, "0s"),
    ],
)
def test_format_age(ms: int, text: str) -> None:
    assert format_age(ms) == text


def test_no_text_output_formats_an_age_by_hand() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _BY_HAND.finditer(line):
                expr = match.group(1)
                # a configured timeout printed as given (``{deadline_s:g}s``) is not an age
                if "format_age" not in expr and not expr.endswith(":g"):
                    found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_the_expiry_and_skew_messages_use_the_one_form() -> None:
    policy = FreshnessPolicy()
    with pytest.raises(ExpiredError) as expired:
        policy.judge("org@1", T0, T0 + timedelta(minutes=31, seconds=5))
    assert "is 31m05s old, past RefuseAfter (30m00s)" in str(expired.value)
    assert (expired.value.age_ms, expired.value.refuse_after_ms) == (1_865_000, 1_800_000)
    with pytest.raises(
        FutureSnapshotError, match=r"compiled 2m00s in the future \(allowed skew 1m00s\)"
    ):
        policy.judge("org@1", T0 + timedelta(minutes=2), T0)
    with pytest.raises(
        ConfigurationError, match=r"RefuseAfter \(1m00s\) is shorter than DegradedAfter \(5m00s\)"
    ):
        FreshnessPolicy(refuse_after=timedelta(minutes=1))
