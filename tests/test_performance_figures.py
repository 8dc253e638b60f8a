"""``scripts/performance-figures`` fills the figure blocks of a document from a benchmarks results
file: run on a made-up results file and a temporary copy of a document, it replaces each block
with that benchmark's table and the run's machine line, leaves every other line as it was, is
idempotent, refuses a block naming no benchmark, and keeps a block whose benchmark the results
do not hold or where it measured nothing. The real docs' blocks are checked to name real
benchmarks."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "performance-figures"


def _figure(case: str, value: float, **kw: Any) -> dict[str, Any]:
    fig: dict[str, Any] = {
        "case": case,
        "value": value,
        "unit": "decisions/s",
        "baseline": None,
        "baseline_label": "",
        "ratio": None,
        "ratio_kind": "speed",
        "target": "",
        "passed": None,
        "note": "",
        "applicable": True,
    }
    fig.update(kw)
    return fig


RESULTS: dict[str, Any] = {
    "format": 1,
    "command": "python -m benchmarks --only live-path cli-start --out /tmp/x.json",
    "mode": "full",
    "machine": {
        "timestamp": "2031-04-05T06:07:08+00:00",
        "cpu": "Test CPU",
        "cpu_count": 4,
        "python": "3.12.1",
        "sqlite": "3.99.0",
        "git_commit": "abc1234",
        "library_tree_dirty": False,
        "loadavg_start": [0.52, 0.4, 0.3],
        "loadavg_end": [3.46, 2.0, 1.0],
    },
    "seconds": 12.5,
    "ok": True,
    "targets": [],
    "benchmarks": [
        {
            "name": "live-path",
            "title": "t",
            "figures": [
                _figure(
                    "decide only, 10 policies, p50",
                    17.25,
                    unit="us",
                    baseline=8.5,
                    baseline_label="its id",
                    ratio=2.0294,
                    ratio_kind="time",
                    target="<= 2x time",
                    passed=False,
                    note="20,000 requests",
                ),
                _figure("decide only, 1,000 policies, p99", 123456.0, unit="us"),
            ],
            "growth": [{"what": "p50", "unit": "us", "points": [["10", 17.25], ["1,000", 34.5]]}],
            "checks": [],
            "notes": [],
            "extra": {},
            "seconds": 3.0,
            "error": None,
        },
        {
            "name": "cli-start",
            "title": "t",
            "figures": [
                _figure("rensei --help", 0.0971, unit="s", target="< 0.25 s wall", passed=True)
            ],
            "growth": [],
            "checks": [],
            "notes": [],
            "extra": {},
            "seconds": 2.0,
            "error": None,
        },
        {
            "name": "fleet",
            "title": "t",
            "figures": [],
            "growth": [],
            "checks": [],
            "notes": ["skipped: no PostgreSQL"],
            "extra": {},
            "seconds": 0.1,
            "error": None,
        },
    ],
}

DOC = """# Title

Prose before, with a | pipe and <!-- a comment -->.

<!-- figures: live-path -->
old figures, to be replaced
<!-- /figures -->

Between the blocks.

<!-- figures: cli-start live-path targets -->
<!-- /figures -->

<!-- figures: fleet -->
kept: this run skipped fleet
<!-- /figures -->

<!-- figures: ui -->
kept: this run has no ui figures
<!-- /figures -->

Prose after.
"""


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS), "utf-8")
    doc = tmp_path / "performance.md"
    doc.write_text(DOC, "utf-8")
    return results, doc


def _outside(text: str) -> list[str]:
    """The lines outside the blocks (markers included)."""
    kept, inside = [], False
    for line in text.split("\n"):
        if line.startswith("<!-- figures:"):
            inside = True
            kept.append(line)
        elif line == "<!-- /figures -->":
            inside = False
            kept.append(line)
        elif not inside:
            kept.append(line)
    return kept


def test_the_blocks_are_filled(files: tuple[Path, Path]) -> None:
    results, doc = files
    done = _run(results, doc)
    assert done.returncode == 0, done.stderr
    text = doc.read_text("utf-8")
    first = text.split("<!-- figures: live-path -->", 1)[1].split("<!-- /figures -->", 1)[0]
    assert "old figures" not in first
    assert "| case | value | unit | baseline | ratio | target | met |" in first
    row = "| decide only, 10 policies, p50 | 17.2 | us | 8.50 us (its id) | 2.03x time |"
    assert row + " <= 2x time | **no** |" in first
    assert "| decide only, 1,000 policies, p99 | 123,456 | us |" in first
    assert "- p50 [us]: 10: 17.2 -> 1,000: 34.5 (2.00x)" in first
    assert "- decide only, 10 policies, p50: 20,000 requests" in first
    machine = (
        "Measured 2031-04-05 at commit `abc1234`, `python -m benchmarks --only live-path "
        "cli-start` (full run), on Test CPU, 4 CPUs, Python 3.12.1, SQLite 3.99.0, load average "
        "0.5 at the start and 3.5 at the end."
    )
    assert machine in first
    second = text.split("<!-- figures: cli-start live-path targets -->", 1)[1]
    second = second.split("<!-- /figures -->", 1)[0]
    assert "| benchmark | case |" in second
    assert "| cli-start | rensei --help | 0.0971 | s |  |  | < 0.25 s wall | yes |" in second
    assert "decide only, 10 policies, p50" in second
    assert "1,000 policies, p99" not in second  # no target: left out of a targets block
    assert "kept: this run skipped fleet" in text
    assert "fleet has no figures in that run (skipped)" in done.stderr
    assert "kept: this run has no ui figures" in text
    assert "ui not in the results" in done.stderr


def test_text_outside_the_blocks_is_untouched(files: tuple[Path, Path]) -> None:
    results, doc = files
    assert _run(results, doc).returncode == 0
    assert _outside(doc.read_text("utf-8")) == _outside(DOC)


def test_running_twice_changes_nothing(files: tuple[Path, Path]) -> None:
    results, doc = files
    assert _run(results, doc).returncode == 0
    once = doc.read_text("utf-8")
    assert _run(results, doc, "--check").returncode == 0
    assert _run(results, doc).returncode == 0
    assert doc.read_text("utf-8") == once


def test_check_finds_a_stale_doc(files: tuple[Path, Path]) -> None:
    results, doc = files
    done = _run(results, doc, "--check")
    assert done.returncode == 1 and "stale" in done.stderr
    assert doc.read_text("utf-8") == DOC  # --check writes nothing


def test_an_unknown_benchmark_is_an_error(files: tuple[Path, Path]) -> None:
    results, doc = files
    doc.write_text(DOC.replace("figures: cli-start", "figures: cli-strat"), "utf-8")
    before = doc.read_text("utf-8")
    done = _run(results, doc)
    assert done.returncode == 2
    assert "performance.md:11: unknown benchmark 'cli-strat'" in done.stderr
    assert "Traceback" not in done.stderr
    assert doc.read_text("utf-8") == before


@pytest.mark.parametrize(
    "broken",
    [
        "<!-- figures: live-path -->\nno end\n",
        "<!-- /figures -->\n",
        "<!-- figures: live-path -->\n<!-- figures: cli-start -->\n<!-- /figures -->\n",
    ],
    ids=["unterminated", "stray-end", "nested"],
)
def test_a_malformed_block_is_an_error(files: tuple[Path, Path], broken: str) -> None:
    results, doc = files
    doc.write_text(broken, "utf-8")
    done = _run(results, doc)
    assert done.returncode == 2 and done.stderr.startswith("error: ")
    assert doc.read_text("utf-8") == broken


def test_a_file_that_is_not_results_is_an_error(files: tuple[Path, Path]) -> None:
    results, doc = files
    results.write_text('{"format": 2}', "utf-8")
    done = _run(results, doc)
    assert done.returncode == 2 and "not a results file" in done.stderr


def test_the_real_docs_have_a_block_per_benchmark(tmp_path: Path) -> None:
    """docs/performance.md has one block for each benchmark, and every block of the shipped docs
    names real benchmarks: with a results file holding none, every block is kept (exit 0, not
    the unknown-name error)."""
    script = runpy.run_path(str(SCRIPT))
    known = script["benchmark_names"]()
    assert len(known) == 18
    text = (ROOT / "docs" / "performance.md").read_text("utf-8")
    blocks = [line.split()[2] for line in text.splitlines() if line.startswith("<!-- figures: ")]
    assert sorted(blocks) == sorted(known)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({**RESULTS, "benchmarks": []}), "utf-8")
    done = _run(empty, ROOT / "docs" / "performance.md", ROOT / "README.md", "--check")
    assert done.returncode == 0, done.stderr
