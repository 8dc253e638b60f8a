"""The benchmark runner runs each benchmark in a process of its own: a result read back from the
child's JSON equals the one it wrote (figures, growth, notes, checks, extras), a real benchmark
run that way reports what it measured with its targets marked not applicable at ``--quick``,
and a child that dies before writing a result is reported failed, not silently dropped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_validation, runner
from benchmarks.harness import BenchResult, Config, Figure, Growth, subprocess_env

ROOT = Path(__file__).resolve().parent.parent


def test_a_result_survives_its_json() -> None:
    res = BenchResult(
        name="x",
        title="a title",
        figures=[
            Figure(case="a", value=1.5, unit="us", baseline=2.0, ratio=0.75, ratio_kind="time"),
            Figure(case="b", value=3.0, unit="records/s", target=">= 2x", passed=False),
        ],
        growth=[Growth(what="cost", unit="us", points=[("10", 1.0), ("100", 2.5)])],
        checks=["checked"],
        notes=["a note"],
        extra={"by_size": {"10": [1, 2]}},
        seconds=1.25,
        error=None,
    )
    back = runner._result_of(json.loads(json.dumps(res.to_dict())))
    assert back == res
    assert isinstance(back.growth[0].points[0], tuple)


def test_a_benchmark_runs_in_its_own_process() -> None:
    res = runner._run_isolated(bench_validation, Config(quick=True))
    assert res.error is None, res.error
    assert res.name == bench_validation.NAME and res.figures and res.checks
    assert res.seconds > 0


def test_a_child_without_a_result_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child is asked for a benchmark it does not know: it exits 2 (usage) and writes
    # nothing, and the parent reports the benchmark failed.
    class Unknown:
        NAME = "no-such-benchmark"
        TITLE = "nothing"

    res = runner._run_isolated(Unknown, Config(quick=True))  # type: ignore[arg-type]
    assert res.error is not None and "status 2" in res.error
    assert not res.figures


def test_the_child_refuses_an_unknown_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--child", "nope", str(tmp_path / "r.json")],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no benchmark named 'nope'" in done.stderr
    assert not (tmp_path / "r.json").exists()
