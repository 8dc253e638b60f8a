"""A failed command leaves no state (issue 29, new user 8): ``init --store URL`` against a
database nothing answers for, or without psycopg, and ``host sync`` run before anything exists,
fail with one line and leave the directory tree byte for byte (and mode for mode) as it was; so
``doctor`` says afterwards what it said before.

Real processes: the CLI in a subprocess, a free loopback port nothing listens on, an interpreter
whose ``import psycopg`` fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
#: The CLI with ``psycopg`` unimportable (as on a machine without the postgres extra).
WITHOUT_PSYCOPG = (
    "import sys; sys.modules['psycopg'] = None; "
    "from rensei_routing.cli import cli; cli(prog_name='rensei')"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unreachable() -> str:
    return f"postgresql://rensei:pw@127.0.0.1:{_free_port()}/control"


def rensei(*args: str, without_psycopg: bool = False) -> subprocess.CompletedProcess[str]:
    head = ["-c", WITHOUT_PSYCOPG] if without_psycopg else ["-m", "rensei_routing.cli"]
    return subprocess.run(
        [sys.executable, *head, "--no-plugins", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every entry under ``root`` (itself included): its mode and a digest of its bytes."""
    out: dict[str, tuple[int, str]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        what = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(root))] = (st.st_mode, what)
    return out


def _one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    for word in words:
        assert word in lines[0], lines


def _doctor(home: Path) -> dict[str, tuple[str, str]]:
    done = rensei("doctor", "--json", "--home", str(home))
    checks = json.loads(done.stdout)["checks"]
    return {c["check"]: (c["status"], c["detail"]) for c in checks}


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """Where a home could be asked for: a new path (its parents missing too), an empty
    directory open to others (init would tighten it to 0700), and a host-only home (a
    trusted key, never init)."""
    work = tmp_path / "work"
    work.mkdir()
    empty = work / "empty"
    empty.mkdir()
    os.chmod(empty, 0o755)
    host_only = work / "host-only"
    ctl = tmp_path / "ctl"
    runner = CliRunner()
    for args in (["init", "--home", str(ctl)], ["host", "trust", "--from-home", str(ctl)]):
        done = runner.invoke(cli, [*args, "--home", str(host_only)] if "trust" in args else args)
        assert done.exit_code == 0, done.output
    return {"new": work / "new" / "nested" / "home", "empty": empty, "host-only": host_only}


@pytest.mark.parametrize("place", ["new", "empty", "host-only"])
def test_init_store_against_an_unreachable_database_leaves_nothing(
    places: dict[str, Path], place: str
) -> None:
    home, work = places[place], places["empty"].parent
    before = _tree(work)
    url = _unreachable()
    done = rensei("init", "--home", str(home), "--org", "acme", "--store", url)
    _one_error_line(done, "unreachable", url.replace("rensei:pw@", "rensei@"))
    assert "pw@" not in done.stderr
    assert _tree(work) == before  # no keys/, no rensei.db, no config.toml, no mode changed


@pytest.mark.parametrize("place", ["new", "empty", "host-only"])
def test_init_store_without_psycopg_leaves_nothing(places: dict[str, Path], place: str) -> None:
    home, work = places[place], places["empty"].parent
    before = _tree(work)
    done = rensei(
        "init", "--home", str(home), "--store", _unreachable(), without_psycopg=True
    )  # fmt: skip
    _one_error_line(done, "psycopg", "pip install 'rensei-routing[postgres]'")
    assert _tree(work) == before


def test_init_with_a_bad_key_id_leaves_no_home(places: dict[str, Path]) -> None:
    # --key-id is checked after the home is made: the new home goes again
    work = places["empty"].parent
    before = _tree(work)
    _one_error_line(
        rensei("init", "--home", str(places["new"]), "--key-id", "no spaces"), "--key-id"
    )
    assert _tree(work) == before


def test_init_that_succeeds_still_writes_its_home(places: dict[str, Path]) -> None:
    done = rensei("init", "--home", str(places["empty"]))
    assert done.returncode == 0, done.stderr
    assert (places["empty"] / "rensei.db").is_file()
    assert (places["empty"] / "keys" / "host.key").is_file()
    assert places["empty"].stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("source", ["untrusted", "missing"])
def test_host_sync_before_init_leaves_no_host_state(tmp_path: Path, source: str) -> None:
    runner = CliRunner()
    ctl = tmp_path / "ctl"
    for args in (
        ["init", "--org", "acme"],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["snapshot", "compile"],
        ["snapshot", "export", str(tmp_path / "s1.json")],
    ):
        done = runner.invoke(cli, [*args, "--home", str(ctl)])
        assert done.exit_code == 0, done.output
    work = tmp_path / "work"
    work.mkdir()
    home = work / "home"
    before, said = _tree(work), _doctor(home)
    assert said["home"][0] == "fail" and "rensei init" in said["home"][1]
    snapshot = tmp_path / ("s1.json" if source == "untrusted" else "absent.json")
    done = rensei("host", "sync", "--from", str(snapshot), "--home", str(home))
    _one_error_line(done, "not trusted" if source == "untrusted" else "cannot read")
    assert _tree(work) == before  # no home, no host/config.json, no host/status.json
    assert _doctor(home) == said  # so doctor says what it said (no "host-only home")
    # the same on an initialised home: no host/ appears, the host cache line is unchanged
    assert rensei("init", "--home", str(home)).returncode == 0
    before, said = _tree(work), _doctor(home)
    _one_error_line(rensei("host", "sync", "--from", str(snapshot), "--home", str(home)))
    assert _tree(work) == before and _doctor(home) == said
