"""The README says how long its command 2 (the test suite) takes (issue 22, edge 1): a test count
and a duration on 2 idle cores, measured (docs/performance.md, "The test suite's duration")."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
PERFORMANCE = README.parent / "docs" / "performance.md"


def test_the_readme_says_how_long_command_2_takes() -> None:
    text = " ".join(README.read_text().split())
    found = re.search(
        r"Command 2 runs about ([\d,]+) tests in about (\d+) minutes on 2 idle cores", text
    )
    assert found, "README: say how long command 2 takes"
    tests, minutes = int(found.group(1).replace(",", "")), int(found.group(2))
    assert tests >= 1_000 and 1 <= minutes <= 30
    assert "The test suite's duration" in PERFORMANCE.read_text()  # where it was measured
