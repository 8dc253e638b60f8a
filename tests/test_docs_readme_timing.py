"""The README says how long its command 2 (the test suite) takes (issue 22, edge 1), with the
figures docs/performance.md measured ("The test suite's duration"): the test count of the timed
run, its duration on 2 idle cores and its wall time on a loaded machine, each equal to the
measurement, so a figure edited in one place and not the other (or not measured) fails."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
PERFORMANCE = README.parent / "docs" / "performance.md"


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def _measured() -> tuple[int, int, int, int]:
    """(tests, idle minutes, loaded minutes, loaded seconds) of performance.md's timed run."""
    section = _flat(PERFORMANCE).split("## The test suite's duration", 1)[1].split("## ", 1)[0]
    found = re.search(
        r"([\d,]+) tests \([^)]*\), \*\*(\d+) m (\d+) s\*\* of wall time .*?"
        r"about (\d+) minutes on 2 idle cores",
        section,
    )
    assert found, "performance.md: the timed run's tests, wall time and idle minutes"
    tests, loaded_m, loaded_s, idle = found.groups()
    return int(tests.replace(",", "")), int(idle), int(loaded_m), int(loaded_s)


def test_the_readme_gives_the_measured_figures() -> None:
    found = re.search(
        r"Command 2 runs about ([\d,]+) tests; when it was last timed, at ([\d,]+) tests, it took "
        r"about (\d+) minutes on 2 idle cores and (\d+) m (\d+) s on a loaded machine "
        r"\(\[measured\]\(docs/performance\.md#the-test-suites-duration\)\)",
        _flat(README),
    )
    assert found, "README: say how long command 2 takes, with the measured figures"
    now, timed, idle, loaded_m, loaded_s = (int(g.replace(",", "")) for g in found.groups())
    assert (timed, idle, loaded_m, loaded_s) == _measured()
    assert now >= timed  # the suite only grew since it was timed


def test_the_measurement_is_one_a_person_can_read() -> None:
    tests, idle, loaded_m, _ = _measured()
    assert tests >= 1_000 and 1 <= idle <= loaded_m  # idle is never slower than loaded
