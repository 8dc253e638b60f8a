"""Quickstart's "explore next" lines run exactly as printed, in a shell, whether ``rensei`` was
called by its path (``.venv/bin/rensei quickstart``, README command 1, before any activate) or
by name from an activated venv; and the README says how ``rensei`` gets on PATH before its
tour uses the bare name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_ROUTING_LOAD_PLUGINS"}
    env["PATH"] = path
    return env


def _next_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.split("Explore next:\n", 1)[1].splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("called", ["by-path", "by-name"])
def test_explore_next_lines_run_as_printed(tmp_path: Path, called: str) -> None:
    if not (BIN / "rensei").is_file():
        pytest.skip("the rensei console script is not installed beside this python")
    pytest.importorskip("rensei_seams_hydraflow")
    # PATH without the venv (as before `. .venv/bin/activate`), or with it first (after)
    bare = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if Path(p).resolve() != BIN.resolve() and p
    )
    if called == "by-path":
        program, path = [str(BIN / "rensei")], bare or "/usr/bin:/bin"
    else:
        program, path = ["rensei"], f"{BIN}{os.pathsep}{bare}"
    env = _env(path)
    done = subprocess.run(
        [*program, "quickstart"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused 30m00s after its compile" in done.stdout  # issue 22 #4: it says when
    lines = _next_lines(done.stdout)
    assert len(lines) == 3
    for line in lines:
        assert line.startswith(f"{program[0]} --home .rensei-quickstart "), line
        ran = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, (line, ran.stderr[-2000:])
        assert ran.stdout.strip(), line


def test_the_readme_puts_rensei_on_path_before_the_tour() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = text.index("## A five-minute tour")
    activate = text.find(". .venv/bin/activate")
    assert 0 <= activate < tour
    assert text.index(".venv/bin/rensei quickstart") < tour
