"""The README's five-minute tour, run as printed in bash against a home that is not the default
(``RENSEI_HOME`` with a space in its path), with ``rensei`` on PATH as ``. .venv/bin/activate``
puts it. Two changes only, both for a shared test machine: the port is a free one instead of
8787, and after the ``serve ... &`` line the script waits (bounded) for the port to listen,
where a person typing needs no wait. It proves that no line of the tour hard-codes a path in
the default home (issue 22 #2), and that nothing is written to ``./.rensei``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def tour_lines() -> list[str]:
    """The command lines of the README's tour block (comments and blank lines dropped)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("## A five-minute tour", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_tour_line_names_a_path_in_the_home() -> None:
    for line in tour_lines():
        command = line.split("#", 1)[0]
        assert ".rensei" not in command and "keys/" not in command, line


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_tour_runs_as_printed_with_any_home(tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    if not (bindir / "rensei").exists():
        pytest.skip("the rensei console script is not installed beside this python")
    pytest.importorskip("rensei_seams_hydraflow")
    port = _free_port()
    script = ["set -eu", f"cd {ROOT}"]
    for line in tour_lines():
        script.append(line.replace("8787", str(port)))
        if line.startswith("rensei serve"):
            script.append(
                f"for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null "
                "&& break; sleep 0.05; done"
            )
    home = tmp_path / "a home"
    user = tmp_path / "user"
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_ROUTING_LOAD_PLUGINS"}
    env.update(
        RENSEI_HOME=str(home), HOME=str(user), PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    )
    default_home = ROOT / ".rensei"
    existed = default_home.exists()
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Ruleset snapshot: acme@1" in done.stdout
    assert (home / "rensei.db").is_file() and (home / "host" / "snapshot.json").is_file()
    assert (user / "acme-checkpoint.txt").is_file()
    backups = list(user.glob("rensei-backup-*"))
    assert len(backups) == 1 and (backups[0] / "rensei-backup.json").is_file()
    assert default_home.exists() == existed  # the default home was never touched


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_tour_backup_gets_a_new_name_on_a_second_run_the_same_day(tmp_path: Path) -> None:
    """``backup DEST`` refuses an existing DEST, so a second run of the tour must not name the
    first run's backup (``$(date +%F)`` did, all day)."""
    (line,) = [line for line in tour_lines() if line.startswith("rensei backup ")]
    dest = line.split("#", 1)[0].removeprefix("rensei backup ").strip()
    env = {**os.environ, "HOME": str(tmp_path)}
    names = []
    for _ in range(2):
        done = subprocess.run(
            ["bash", "-c", f'printf "%s" {dest}'], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        names.append(done.stdout)
        time.sleep(1.1)  # a second run of the tour, however soon after the first
    first, second = names
    assert first.startswith(f"{tmp_path}/rensei-backup-"), first
    assert first != second
