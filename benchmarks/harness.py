"""What every benchmark shares: its result record, correctness checks, timers, machine facts and
the printed table. Owns no measurement itself.

A figure is one measured number beside its in-run baseline. ``ratio`` is always stated with its
direction: ``speed`` (our rate / baseline rate, higher is better) or ``time`` (our time /
baseline time, lower is better). A target is a stated threshold on a figure; ``passed`` is
``None`` for figures without one. Missing a target never fails a run; a failed check (a wrong
answer) or a crash does.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "BenchResult",
    "CheckError",
    "Config",
    "Figure",
    "Growth",
    "flat_memory",
    "format_table",
    "machine_info",
    "progress",
    "run_module",
    "subprocess_env",
    "timed",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Config:
    """How big to run: ``quick`` is the CI smoke size, ``large`` adds the optional big sizes."""

    quick: bool = False
    large: bool = False


class CheckError(Exception):
    """A benchmark produced a wrong answer; its numbers are worthless."""


@dataclass(slots=True, kw_only=True)
class Figure:
    """One measured figure with its baseline, ratio and (optional) target."""

    case: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    ratio: float | None = None
    ratio_kind: str = "speed"
    target: str = ""
    passed: bool | None = None
    note: str = ""
    #: ``False`` when the run was not one the target is stated for (``--quick`` smoke sizes):
    #: the target is printed as not applicable, and neither passed nor missed.
    applicable: bool = True

    def not_applicable(self) -> None:
        """Mark a target as not stated for this run (kept in the table, neither met nor missed)."""
        if self.target:
            self.applicable = False
            self.passed = None


@dataclass(slots=True, kw_only=True)
class Growth:
    """How one cost grows with size: ``points`` are ``(size label, cost)`` in ``unit``."""

    what: str
    unit: str
    points: list[tuple[str, float]]

    def render(self) -> str:
        first = self.points[0][1] if self.points else 0.0
        parts = []
        for label, cost in self.points:
            factor = f" ({cost / first:.2f}x)" if first and label != self.points[0][0] else ""
            parts.append(f"{label}: {_num(cost)}{factor}")
        return f"{self.what} [{self.unit}]  " + "  ->  ".join(parts)


@dataclass(slots=True, kw_only=True)
class BenchResult:
    """Everything one benchmark reports."""

    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    growth: list[Growth] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def check(self, ok: bool, what: str) -> None:
        """Record a correctness check; a failed one stops the benchmark.

        Raises:
            CheckError: ``ok`` is false.
        """
        if not ok:
            raise CheckError(what)
        self.checks.append(what)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def subprocess_env() -> dict[str, str]:
    """This environment with the repository first on ``PYTHONPATH``, for a measuring process
    (``python -m benchmarks._worker ...``) started from anywhere."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    return env


def as_installed_env(**extra: str) -> dict[str, str]:
    """This environment for a CLI process timed as a user runs it, plus ``extra``.

    An installed wheel carries its compiled bytecode (pip compiles it at install), so a timed
    command must not recompile every module it imports on each start. Where the environment sets
    ``PYTHONDONTWRITEBYTECODE`` (some CI images do), an editable checkout would recompile on every
    run, about 0.15 s of a ``rensei explain``; without it, the untimed warm-up run writes the
    bytecode that an install would have written.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def run_module(module: str, *args: str) -> dict[str, Any]:
    """``python -m module args...`` in a fresh process, and the one JSON object it prints.

    Raises:
        RuntimeError: the process failed.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{module} {' '.join(args[:1])} failed ({done.returncode}): {done.stderr.strip()}"
        )
    out: dict[str, Any] = json.loads(done.stdout)
    return out


#: Memory counts as flat when the peak at the largest size is at most this many times the peak
#: at the smallest plus this slack (page cache and allocator noise).
FLAT_FACTOR = 1.25
FLAT_SLACK_MIB = 8.0


def flat_memory(what: str, peaks: Sequence[tuple[str, float]]) -> Figure:
    """The target figure "peak memory is flat" from ``(size, peak MiB)`` at growing sizes."""
    (small, small_peak), (large, large_peak) = peaks[0], peaks[-1]
    return Figure(
        case=f"{what} {small} -> {large} records",
        value=large_peak,
        unit="MiB",
        baseline=small_peak,
        baseline_label=f"at {small}",
        ratio=large_peak / small_peak if small_peak else None,
        ratio_kind="growth",
        target="flat",
        passed=large_peak <= small_peak * FLAT_FACTOR + FLAT_SLACK_MIB,
        note=f"flat = at most {FLAT_FACTOR}x the smaller peak + {FLAT_SLACK_MIB:.0f} MiB",
    )


def progress(message: str) -> None:
    """One progress line on stderr (the table goes to stdout)."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(*, collect: bool = True) -> Iterator[list[float]]:
    """``with timed() as t: ...`` then ``t[0]`` is the wall time in seconds.

    With ``collect`` (the default) garbage is collected first, so one measurement does not pay
    for the last one's objects; the collector stays on during the measurement, as in real use.
    """
    if collect:
        gc.collect()
    out: list[float] = []
    start = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - start)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Platform, CPU, Python, apsw/SQLite and package versions, commit, time and load."""
    import apsw

    try:
        from importlib.metadata import version

        package = version("rensei-routing")
    except Exception:  # not installed as a distribution: report what we can
        package = None
    status = _git("status", "--porcelain", "--", "rensei_routing")
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "apsw": apsw.apswversion(),
        "sqlite": apsw.sqlite_lib_version(),
        "rensei_routing": package,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "library_tree_dirty": None if status is None else bool(status),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _figure_text(value: float | None, unit: str) -> str:
    return "" if value is None else f"{_num(value)} {unit}"


def _ratio_text(fig: Figure) -> str:
    if fig.ratio is None:
        return ""
    return f"{fig.ratio:.2f}x {fig.ratio_kind}"


def _status(fig: Figure) -> str:
    if not fig.applicable:
        return "n/a (full run)"
    return "" if fig.passed is None else ("PASS" if fig.passed else "MISS")


def format_table(results: Sequence[BenchResult]) -> str:
    """The run as plain text: one row per figure, then growth lines and notes."""
    header = ("benchmark", "case", "figure", "baseline", "ratio", "target", "")
    rows: list[tuple[str, ...]] = []
    for res in results:
        if res.error is not None:
            rows.append((res.name, "FAILED", res.error.splitlines()[-1][:60], "", "", "", "ERROR"))
            continue
        for i, fig in enumerate(res.figures):
            baseline = _figure_text(fig.baseline, fig.unit)
            if baseline and fig.baseline_label:
                baseline = f"{baseline} ({fig.baseline_label})"
            rows.append(
                (
                    res.name if i == 0 else "",
                    fig.case,
                    _figure_text(fig.value, fig.unit),
                    baseline,
                    _ratio_text(fig),
                    fig.target,
                    _status(fig),
                )
            )
    widths = [max(len(r[c]) for r in (header, *rows)) for c in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), line(tuple("-" * w for w in widths))]
    out.extend(line(r) for r in rows)
    growth = [(res.name, g) for res in results for g in res.growth]
    if growth:
        out.append("")
        out.append("Cost growth with size")
        out.extend(f"  {name}: {g.render()}" for name, g in growth)
    notes = [(res.name, f"{f.case}: {f.note}") for res in results for f in res.figures if f.note]
    notes += [(res.name, n) for res in results for n in res.notes]
    if notes:
        out.append("")
        out.append("Notes")
        out.extend(f"  {name}: {n}" for name, n in notes)
    return "\n".join(out)
