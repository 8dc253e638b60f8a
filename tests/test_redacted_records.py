"""Records whose stored form holds redaction markers (a repo name the AWS access-key pattern
matches is redacted when recorded) are read back in the mode that accepts the markers, by every
reader of stored records: ``shadow report`` and ``policy whatif`` count every recorded spawn
(issue 19 #9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.redact import MARKER_PREFIX
from rensei_routing.store.audit import AuditLog

from .shadow_support import home_with_policies, installed_seams, spawn, write_lines
from .test_cli_whatif import CANDIDATE

__all__ = ["installed_seams"]

pytestmark = pytest.mark.usefixtures("installed_seams")

#: A repo name the AWS access-key pattern matches (``ASIA`` + 16 upper-case letters or digits).
REPO = "globex/asiapacificbilling01"


def test_redacted_spawns_count_in_report_and_whatif(tmp_path: Path, runner: CliRunner) -> None:
    home = home_with_policies(tmp_path)
    spawns = write_lines(
        tmp_path / "s.jsonl", [spawn(repo=REPO), spawn(repo=REPO), spawn(repo="acme/widgets")]
    )
    recorded = runner.invoke(cli, ["shadow", "record", str(spawns)])
    assert recorded.exit_code == 0, recorded.output
    with AuditLog.open(home) as log:
        stored = [r.payload_bytes for r in log.records()]
    assert sum(MARKER_PREFIX.encode() in b for b in stored) == 2  # the name was redacted
    before = list(stored)

    report = runner.invoke(cli, ["shadow", "report", "--by", "repo", "--json"])
    assert report.exit_code == 0, report.output
    doc = json.loads(report.stdout)
    assert doc["unreadable_records"] == 0 and doc["total"]["spawns"] == 3
    assert "could not be read" not in report.stderr

    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(CANDIDATE))
    whatif = runner.invoke(cli, ["policy", "whatif", str(candidate), "--json"])
    assert whatif.exit_code == 0, whatif.output
    doc = json.loads(whatif.stdout)
    assert doc["contexts"] == 3 and doc["skipped_records"] == 0
    assert "no readable context" not in whatif.stderr

    with AuditLog.open(home) as log:  # reading wrote nothing
        assert [r.payload_bytes for r in log.records()] == before
    assert runner.invoke(cli, ["audit", "verify"]).exit_code == 0
