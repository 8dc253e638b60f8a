"""Make ``tests/data/v8_segments_home/``: a home whose audit chain was rotated and pruned by the
release before issue 29 (schema 8), whose catalogue rows carry only a checkpoint of their head
(no seal or prune statement), kept so the tests can check the upgrade path: such rows verify as
``segment-unattested`` until ``rensei audit reattest`` re-signs them, never silently trusted.

Run from the repository root with the release to freeze (it was run once, on the base commit
``e145637``): ``python tests/data/make_v8_segments_home.py``. It writes 23 records: seqs 0..9
sealed and then pruned (``v8_segments_home.export.jsonl`` is the export that pruned them),
10..14 and 15..19 sealed, 20..22 live.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

HERE = Path(__file__).resolve().parent
HOME = HERE / "v8_segments_home"
EXPORT = HERE / "v8_segments_home.export.jsonl"
T = "2026-12-01T12:00:00.000000Z"


def _run(*args: str) -> str:
    result = CliRunner().invoke(
        cli, ["--no-plugins", *args, "--home", str(HOME)], catch_exceptions=False
    )
    if result.exit_code != 0:
        sys.exit(f"{args}: {result.output}")
    return result.stdout


def _append(start: int, stop: int) -> None:
    with AuditLog.open(Home(HOME)) as log:
        log.append_many([{"n": i, "pad": "x" * 40} for i in range(start, stop)], recorded_at=T)


def main() -> None:
    if HOME.exists():
        shutil.rmtree(HOME)
    _run("init", "--org", "acme")
    _append(0, 10)
    _run("audit", "rotate")
    _append(10, 15)
    _run("audit", "rotate")
    _append(15, 20)
    _run("audit", "rotate")
    _append(20, 23)
    _run("audit", "export", str(EXPORT))
    _run("audit", "prune", "--before", "10", "--exported", str(EXPORT))
    for leftover in ("rensei.db-wal", "rensei.db-shm", "audit/segments/.lock"):
        (HOME / leftover).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
