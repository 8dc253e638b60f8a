"""``rensei quickstart``: the whole main job on a fresh home from the shipped inputs (real SQLite,
real signatures, a real HTTP endpoint on loopback), repeatable, refusing a home it did not make,
and clear when the seam plugin is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli.quickstart import CANDIDATE_FILE, POLICIES_FILE, SPAWNS_FILE
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.ops.quickstart import MARKER
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .shadow_support import installed_seams

__all__ = ["installed_seams"]

SAMPLES = Path(__file__).resolve().parent.parent / "plugins" / "rensei-seams-hydraflow" / "samples"


@pytest.mark.parametrize(
    ("shipped", "sample"),
    [
        (SPAWNS_FILE, "hydraflow-spawns.jsonl"),
        (POLICIES_FILE, "policies.json"),
        (CANDIDATE_FILE, "candidate-policies.json"),
    ],
    ids=["spawns", "policies", "candidate"],
)
def test_the_packaged_inputs_equal_the_plugin_samples(shipped: Path, sample: str) -> None:
    assert shipped.read_bytes() == (SAMPLES / sample).read_bytes()


@pytest.mark.usefixtures("installed_seams")
def test_quickstart_runs_the_main_job_and_twice(tmp_path: Path, runner: CliRunner) -> None:
    home = tmp_path / "qs"
    for _ in range(2):  # the second run recreates the home: same output, same seqs
        done = runner.invoke(cli, ["quickstart", "--home", str(home)])
        assert done.exit_code == 0, done.output
        out = done.stdout
        assert "Ruleset snapshot: quickstart@1 (age " in out
        assert "3,000 sample spawns replayed" in out and "seqs 0..2999" in out
        rows = {line.split()[0] for line in out.splitlines() if line[:1].isalpha()}
        assert DEFAULT_VOCABULARY.legacy_mechanisms <= rows
        assert "What-if: 3,000 recorded contexts" in out and "would move provider" in out
        assert "Audit verify: intact: 3,000 records" in out and "1 checkpoint(s) checked" in out
        assert out.count(f"rensei --home {home} ") == 3
        assert (home / MARKER).is_file()
    with AuditLog.open(Home(home)) as log:
        assert log.count() == 3_000 and log.verify()
    # the host cache was synced over HTTP from the home's own endpoint
    status = runner.invoke(cli, ["host", "status", "--json", "--home", str(home)])
    doc = json.loads(status.stdout)
    assert doc["snapshot"]["rulesetRev"] == "quickstart@1"
    assert doc["lastFetch"]["ok"] is True
    # ... whose endpoint is stopped: no dead source is left for `host run` to poll
    assert doc["source"]["endpoint"] is None and doc["source"]["configured"] is False
    # ... and `host status` names what it cached (no `Ruleset snapshot:` line without a
    # source: document 000), with what renews it; never "nothing is cached" (issue 29)
    text = runner.invoke(cli, ["host", "status", "--home", str(home)])
    assert "http://127." not in text.output and text.stdout == ""
    assert "nothing renews the cached quickstart@1 (age " in text.stderr
    assert "rensei host sync" in text.stderr and "nothing is cached" not in text.output
    # the suggested explain works
    line = next(x for x in out.splitlines() if "explain --snapshot" in x)
    context = line.split("--snapshot ", 1)[1].strip("'")
    explained = runner.invoke(cli, ["--home", str(home), "explain", "--snapshot", context])
    assert explained.exit_code == 0 and explained.stdout.startswith("selected:")


def test_default_home_ignores_rensei_home(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    real = tmp_path / "home"  # RENSEI_HOME (conftest): must never be recreated
    assert runner.invoke(cli, ["init"]).exit_code == 0
    before = sorted(p.name for p in real.iterdir())
    done = runner.invoke(cli, ["quickstart"])
    assert (tmp_path / ".rensei-quickstart" / MARKER).is_file()
    assert sorted(p.name for p in real.iterdir()) == before
    assert "rensei --home .rensei-quickstart " in done.stdout


def test_refuses_a_directory_it_did_not_make(tmp_path: Path, runner: CliRunner) -> None:
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    done = runner.invoke(cli, ["quickstart", "--home", str(other)])
    assert done.exit_code == 1
    assert "was not made by `rensei quickstart`" in done.stderr
    assert "Traceback" not in done.output
    assert (other / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_without_the_seam_plugin_it_says_so(tmp_path: Path, runner: CliRunner) -> None:
    done = runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(tmp_path / "qs")])
    assert done.exit_code == 1
    assert "shadow replay needs the seam plugin rensei-seams-hydraflow" in done.stderr
    assert done.stderr.count("\n") == 1
    assert "Ruleset snapshot: quickstart@1" in done.stdout  # every other step ran
    assert "Audit verify: intact: 0 records" in done.stdout


def test_a_progress_bar_on_a_terminal_and_plain_text_when_piped(tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    code = "from rensei_routing.cli import cli; cli()"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                "--no-plugins",
                "quickstart",
                "--home",
                str(tmp_path / "q"),
            ],
            stdout=subprocess.PIPE,
            stderr=follower,
            check=False,
            timeout=120,
        )
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert done.returncode == 1  # no seam plugin: said on stderr
    assert b"quickstart: compile, serve, sync" in drawn and b"rensei-seams-hydraflow" in drawn
    out = done.stdout.decode()
    assert "Ruleset snapshot: quickstart@1" in out
    assert "\r" not in out and "\x1b" not in out  # stdout (piped) is plain text


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: a file's bytes, a directory's ``None``."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _real_home(tmp_path: Path, runner: CliRunner, org: str = "acme") -> Path:
    real = tmp_path / "real"
    examples = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
    for args in (
        ["init", "--org", org],
        ["org", "load", str(examples / "org.json")],
        ["policy", "save", str(examples / "policies.json")],
        ["snapshot", "compile"],
        ["audit", "checkpoint"],
    ):
        assert runner.invoke(cli, [*args, "--home", str(real)]).exit_code == 0, args
    return real


@pytest.mark.parametrize("marker", ["text", "random-id", "key-id", "org-quickstart"])
def test_a_planted_marker_does_not_get_a_real_home_wiped(
    tmp_path: Path, runner: CliRunner, marker: str
) -> None:
    real = _real_home(tmp_path, runner, "quickstart" if marker == "org-quickstart" else "acme")
    key_id = Home(real).info().key_id
    if marker == "text":  # an older run's marker, copied into a real home
        content = "made by `rensei quickstart`; recreated on every run\n"
    else:
        home_id = key_id if marker == "key-id" else "ab" * 16
        content = json.dumps({"madeBy": "rensei quickstart", "homeId": home_id})
    (real / MARKER).write_text(content)
    before = _tree(real)
    done = runner.invoke(cli, ["quickstart", "--home", str(real)])
    assert done.exit_code == 1, done.output
    assert "was not made by `rensei quickstart`" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.output
    assert _tree(real) == before
    assert Home(real).info().key_id == key_id  # not re-keyed


def test_a_quickstart_home_holding_anything_else_is_refused(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "qs"
    assert runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(home)]).exit_code == 1
    for extra in ("notes.txt", "keys/bk", "config.toml"):
        (home / extra).write_text("keep me")
        before = _tree(home)
        done = runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(home)])
        assert done.exit_code == 1 and "was not made by `rensei quickstart`" in done.stderr
        assert _tree(home) == before
        (home / extra).unlink()
    # as made, it is recreated: a new key
    key_id = Home(home).info().key_id
    done = runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(home)])
    assert "Ruleset snapshot: quickstart@1" in done.stdout
    assert Home(home).info().key_id != key_id


def test_a_directory_holding_only_its_marker_is_recreated(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "qs"
    home.mkdir()
    (home / MARKER).write_text(json.dumps({"madeBy": "rensei quickstart", "homeId": "c" * 32}))
    done = runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(home)])
    assert "Ruleset snapshot: quickstart@1" in done.stdout, done.output


@pytest.mark.parametrize("points_to", ["quickstart-home", "real-dir", "nothing"])
def test_a_symlinked_home_is_one_line(tmp_path: Path, runner: CliRunner, points_to: str) -> None:
    target = tmp_path / "target"
    if points_to == "quickstart-home":
        runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(target)])
    elif points_to == "real-dir":
        target.mkdir()
        (target / "notes.txt").write_text("keep me")
    link = tmp_path / "link"
    link.symlink_to(target)
    before = _tree(target) if target.exists() else None
    done = runner.invoke(cli, ["--no-plugins", "quickstart", "--home", str(link)])
    assert done.exit_code == 1, done.output
    assert "is a symbolic link" in done.stderr and done.stderr.count("\n") == 1
    assert "Traceback" not in done.output
    assert link.is_symlink()
    assert (_tree(target) if target.exists() else None) == before
