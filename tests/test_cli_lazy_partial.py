"""A built-in group attached early (one of its modules imported on its own) still gets every
subcommand: importing ``cli.audit_import`` first used to leave ``audit replay`` unknown."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import rensei_routing.cli.audit_import  # attaches the audit group before its other modules
from click.testing import CliRunner
from rensei_routing.cli import cli
result = CliRunner().invoke(cli, ["audit", "replay", "--help"])
print(result.exit_code)
print(result.output)
"""


def test_audit_replay_found_after_audit_import_was_imported_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    code, _, text = out.partition("\n")
    assert code == "0", text
    assert "replay" in text.lower()
