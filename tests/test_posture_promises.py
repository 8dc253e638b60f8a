"""Every posture promise of document 000 has a named test (issue 19): the table in
docs/snapshots.md lists each promise below with at least one test, and every test it names
exists (tests/test_docs.py::test_every_test_the_docs_name_exists checks the names)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "snapshots.md"

#: The promises, by id, as document 000 makes them (P20 is ours: rollback refusal).
PROMISES = {
    "P1": "authorization fails closed",
    "P2": "declared default-permit",
    "P3": "placement fails static",
    "P4": "rulesetRev, snapshotAgeMs and degraded",
    "P5": "budget",
    "P6": "bandit",
    "P7": "monotonic",
    "P8": "deterministic",
    "P9": "verifies the signature",
    "P10": "validator-gated",
    "P11": "on demand",
    "P12": "X-Ruleset-Rev",
    "P13": "temp-file-then-rename",
    "P14": "restart reloads",
    "P15": "three ages",
    "P16": "re-checks permission",
    "P17": "host status",
    "P18": "restore is not a manual intervention",
    "P19": "does not stop admitted work",
    "P20": "never holds an older revision",
}


def _rows() -> dict[str, tuple[str, list[str]]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Document 000's promises and the tests that hold them", 1)[1]
    rows = {}
    for line in section.splitlines():
        found = re.match(r"^\| (P\d+) (.+?) \| (.+) \|$", line)
        if found:
            tests = re.findall(r"`(tests/[\w/]+\.py::\w+)`", found.group(3))
            rows[found.group(1)] = (found.group(2), tests)
    return rows


def test_every_promise_has_a_row_with_a_test() -> None:
    rows = _rows()
    assert set(rows) == set(PROMISES)
    for pid, words in PROMISES.items():
        text, tests = rows[pid]
        assert words in text, (pid, text)
        assert tests, f"{pid} names no test"


def test_every_named_test_exists() -> None:
    for pid, (_, tests) in _rows().items():
        for ref in tests:
            path, name = ref.split("::")
            source = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, re.M), (pid, ref)
