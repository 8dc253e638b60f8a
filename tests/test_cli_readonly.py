"""An operator can read and verify a home copied to read-only media; writers fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli

from .conftest import read_only_view

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def test_every_reader_works_on_a_read_only_home(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "home"
    home = ["--home", str(folder)]
    assert runner.invoke(cli, ["init", *home]).exit_code == 0
    runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *home])
    runner.invoke(cli, ["explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record", *home])
    exported = tmp_path / "cp.txt"
    assert runner.invoke(cli, ["audit", "checkpoint", "-o", str(exported), *home]).exit_code == 0
    before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with read_only_view(folder) as view:
        ro = ["--home", str(view)]
        verify = runner.invoke(cli, ["audit", "verify", "--checkpoint", str(exported), *ro])
        assert verify.exit_code == 0, verify.output
        assert verify.stdout.startswith("intact: 7 records")  # the policy save's, then 6
        show = runner.invoke(cli, ["policy", "show", "--json", *ro])
        assert json.loads(show.stdout)["revision"] == 1
        explained = runner.invoke(cli, ["explain", str(EXAMPLES / "context.json"), "--json", *ro])
        assert json.loads(explained.stdout)["policy_revision"] == 1
        assert runner.invoke(cli, ["audit", "tail", *ro]).exit_code == 0
        saved = runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *ro])
        assert saved.exit_code == 1
        assert "read-only" in saved.stderr and "Traceback" not in saved.stderr
    after = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
