"""Make ``tests/data/v2_home/``: a home written by the schema-2 release (before issue 11), kept so
the tests can check that a home made before page-size and payload-compression changes still
opens, migrates (through ``user_version``) and verifies, and that its decision ids are unchanged.

Run from the repository root with the release to freeze (it was run once, on the base commit
``acb098f``): ``python tests/data/make_v2_home.py``. It writes a few dozen audit records (the
example contexts resolved three times), the example policies and org data, one compiled signed
snapshot and a stored checkpoint, plus ``v2_home.expected.json`` (the decision ids and payload
hashes the release recorded).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "rensei_routing" / "examples"
HOME = HERE / "v2_home"


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--home", str(HOME)], catch_exceptions=False)
    if result.exit_code != 0:
        sys.exit(f"{args}: {result.output}")
    return result.stdout


def main() -> None:
    if HOME.exists():
        shutil.rmtree(HOME)
    _run("init", "--org", "org_v2home")
    _run("policy", "save", str(EXAMPLES / "policies.json"))
    _run("org", "load", str(EXAMPLES / "org.json"))
    _run("snapshot", "compile")
    for _ in range(3):
        _run("explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record")
    _run("audit", "checkpoint")
    _run("explain-batch", str(EXAMPLES / "contexts.jsonl"), "--record")  # past the checkpoint
    with AuditLog.open(Home(HOME)) as log:
        records = list(log.records())
    expected = {
        "records": len(records),
        "head_hash": records[-1].record_hash,
        "decision_ids": [r.payload["decision_id"] for r in records],
        "payload_hashes": [r.payload_hash for r in records],
    }
    (HERE / "v2_home.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    for leftover in ("rensei.db-wal", "rensei.db-shm"):
        (HOME / leftover).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
