"""Benchmark cli-start: wall time of ``rensei --help``, ``rensei host status`` (a synced host
cache), ``rensei explain`` on one context and ``rensei policy show`` (against an initialised home
holding a saved revision) as subprocesses, beside ``python -c "import click"``.

Runs are interleaved (one of each command per round, after an untimed warm-up round) and the
median is reported. Each command runs as an installed one does, its bytecode compiled (the
warm-up round writes it where the environment forbids writing bytecode:
``harness.as_installed_env``). The console script next to the running interpreter is used, as
a user's shell would find it in the same environment, with whatever plugins are installed there (the
notes list them). Targets: ``rensei --help`` under 0.3 s; ``--help``, ``host status``
and ``explain`` each under 0.25 s; ``rensei --help`` with both shipped plugins
installed within 2x of ``python -c "import click"`` (plugins load lazily, so listing
the commands imports no plugin), ``--no-plugins --help`` beside it for reference.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .harness import BenchResult, Config, Figure, as_installed_env, progress
from .workload import policy_set

NAME = "cli-start"
TITLE = "CLI start-up vs import click"

TARGET_START_S = 0.25
#: ``rensei --help`` with both shipped plugins at most this many times ``import click``.
TARGET_HELP_RATIO = 2.0
SHIPPED_PLUGINS = ("cedar", "hydraflow")
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
SHOWN_POLICIES = 100


def _rensei() -> tuple[list[str], str]:
    """The command that starts the CLI, and how it was found."""
    beside = Path(sys.executable).with_name("rensei")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)], str(beside)
    found = shutil.which("rensei")
    if found:
        return [found], found
    code = "from rensei_routing.cli import cli; cli()"
    return [sys.executable, "-c", code], "python -c (no console script installed)"


def _run(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=as_installed_env())
    return time.perf_counter() - start, done


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    rounds = 3 if cfg.quick else 9
    rensei, where = _rensei()
    with tempfile.TemporaryDirectory(prefix="rensei-bench-cli-") as tmp:
        home = Home(Path(tmp, "home"))
        home.init(org="bench")
        with closing(home.connect(write=True)) as conn:
            PolicyStore(conn).save(
                policy_set(SHOWN_POLICIES).policies, saved_at="2025-06-01T12:00:00.000000Z"
            )
        at = ["--home", str(home.path)]
        exported = str(Path(tmp, "snapshot.json"))
        for setup in (
            ["snapshot", "compile"],
            ["snapshot", "export", exported],
            ["host", "trust", str(home.public_key_path)],
            ["host", "sync", "--from", exported],
        ):
            done = _run([*rensei, *at, *setup])[1]
            res.check(done.returncode == 0, f"rensei {' '.join(setup)}: {done.stderr.strip()}")
        plugins = _run([*rensei, "plugins", "list"])[1].stdout.split("\n")
        commands = {
            "help": [*rensei, "--help"],
            "help-bare": [*rensei, "--no-plugins", "--help"],
            "status": [*rensei, *at, "host", "status"],
            "explain": [*rensei, *at, "explain", str(EXAMPLES / "context.json")],
            "show": [*rensei, "policy", "show", "--home", str(home.path)],
            "click": [sys.executable, "-c", "import click"],
            "python": [sys.executable, "-c", "pass"],
        }
        progress(f"{NAME}: {rounds} interleaved rounds of {len(commands)} commands")
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for i in range(rounds + 1):
            for key, argv in commands.items():
                seconds, done = _run(argv)
                if done.returncode != 0:
                    res.check(False, f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
                if i:
                    samples[key].append(seconds)
                elif key == "help":
                    res.check("Usage:" in done.stdout, "rensei --help prints its usage")
                elif key == "status":
                    res.check(
                        done.stdout.startswith("Ruleset snapshot: bench@1"),
                        "rensei host status prints the Ruleset snapshot line",
                    )
                elif key == "explain":
                    res.check(
                        done.stdout.split(":")[0] in {"selected", "held", "rejected"},
                        "rensei explain prints a decision",
                    )
                elif key == "show":
                    res.check(
                        done.stdout.startswith("state ok, revision 1")
                        and done.stdout.count("\n") == SHOWN_POLICIES + 1,
                        f"rensei policy show lists the saved revision ({SHOWN_POLICIES} policies)",
                    )
    med = {k: statistics.median(v) for k, v in samples.items()}
    res.figures.append(
        Figure(
            case="rensei --help",
            value=med["help"],
            unit="s",
            baseline=med["click"],
            baseline_label="import click",
            ratio=med["help"] / med["click"],
            ratio_kind="time",
            target=f"< {TARGET_START_S} s wall",
            passed=med["help"] < TARGET_START_S,
        )
    )
    installed = [line.split()[0] for line in plugins if line.strip() and "built-in" not in line]
    both = all(p in installed for p in SHIPPED_PLUGINS)
    ratio = med["help"] / med["click"]
    res.figures.append(
        Figure(
            case="rensei --help, both shipped plugins installed",
            value=med["help"],
            unit="s",
            baseline=med["click"],
            baseline_label="import click",
            ratio=ratio,
            ratio_kind="time",
            target=f"<= {TARGET_HELP_RATIO:g}x import click",
            passed=ratio <= TARGET_HELP_RATIO if both else None,
            note="" if both else f"not measured as such: installed are {installed or 'none'}",
        )
    )
    res.figures.append(
        Figure(
            case="rensei --no-plugins --help (reference)",
            value=med["help-bare"],
            unit="s",
            baseline=med["click"],
            baseline_label="import click",
            ratio=med["help-bare"] / med["click"],
            ratio_kind="time",
        )
    )
    for key, case in (
        ("status", "rensei host status"),
        ("explain", "rensei explain (one context)"),
    ):
        res.figures.append(
            Figure(
                case=case,
                value=med[key],
                unit="s",
                baseline=med["click"],
                baseline_label="import click",
                ratio=med[key] / med["click"],
                ratio_kind="time",
                target=f"< {TARGET_START_S} s wall",
                passed=med[key] < TARGET_START_S,
            )
        )
    res.figures.append(
        Figure(
            case=f"rensei policy show ({SHOWN_POLICIES} policies)",
            value=med["show"],
            unit="s",
            baseline=med["click"],
            baseline_label="import click",
            ratio=med["show"] / med["click"],
            ratio_kind="time",
        )
    )
    res.figures.append(
        Figure(case="python -c pass (interpreter floor, info)", value=med["python"], unit="s")
    )
    res.notes.append(f"medians of {rounds} interleaved runs; CLI started as {where}")
    res.notes.append(f"installed plugins: {', '.join(installed) or 'none'}")
    res.extra["samples"] = samples
    return res
