"""A large HydraFlow import in bounded transactions (issue 29, L4; the review's
``import_lock.sh``): another writer of the home gets in while the import runs, and an import
killed with SIGKILL halfway leaves a recognisable, verified prefix that importing the file again
completes to exactly what one uninterrupted import gives. The imports run in their own process
with small batches (``import_chain(batch_records=...)``), on real SQLite, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.errors import ImportRefusedError
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.hydraflow import import_chain

from . import hydraflow_ref as ref

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
RECORDS = 6_000
BATCH = 50
STAMP = "2026-08-22T10:00:00.000000Z"

#: The import, in a process of its own: HOME FILE BATCH.
_IMPORTER = """
import sys
from pathlib import Path
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.hydraflow import import_chain
home, file, batch = Home(Path(sys.argv[1])), sys.argv[2], int(sys.argv[3])
with AuditLog.open(home) as log:
    import_chain(log, lambda: open(file, encoding="utf-8"), file=file, batch_records=batch)
"""


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    payloads = ({"kind": "note", "n": i, "repo": "acme/widgets"} for i in range(RECORDS))
    path = tmp_path_factory.mktemp("chain") / "shadow-decisions.jsonl"
    return ref.write_chain(path, ref.chain_lines(payloads))


def _home(runner: CliRunner, path: Path, *, busy_timeout_s: float = 30) -> Path:
    assert runner.invoke(cli, ["init", "--org", "acme", "--home", str(path)]).exit_code == 0
    (path / "config.toml").write_text(f"[store]\nbusy_timeout = {busy_timeout_s}\n")
    return path


def _meta(home: Path) -> dict[str, Any] | None:
    """The chain's import row, read without waiting for any lock (WAL readers never do)."""
    conn = apsw.Connection(str(Home(home).db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key LIKE 'hydraflow.chain.%'").fetchone()
        return None if row is None else dict(json.loads(row[0]))
    finally:
        conn.close()


def _start(home: Path, chain: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _IMPORTER, str(home), str(chain), str(BATCH)],
        stderr=subprocess.PIPE,
    )


def _halfway(home: Path, proc: subprocess.Popen[bytes], patience_s: float = 120) -> bool:
    """Wait until the import has committed some batches, at most half: ``False`` when it ended
    first (one transaction for the whole file shows no such state) or patience ran out."""
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline and proc.poll() is None:
        state = _meta(home)
        if state is not None and 0 < state["count"] <= RECORDS // 2:
            return True
        time.sleep(0.005)
    return False


def _chain_of(home: Path) -> list[tuple[int, str, str, bytes]]:
    with AuditLog.open(Home(home)) as log:
        return [(r.seq, r.record_hash, r.recorded_at, r.payload_bytes) for r in log.records()]


def test_another_writer_gets_in_while_a_large_import_runs(
    runner: CliRunner, tmp_path: Path, chain: Path
) -> None:
    # a busy timeout far shorter than the import: one transaction for the file would outlast it
    home = _home(runner, tmp_path / "h", busy_timeout_s=2)
    importer = _start(home, chain)
    try:
        seen = _halfway(home, importer)
        with AuditLog.open(Home(home)) as log:  # this process: a writer the moment it is seen
            appended = log.append({"record_type": "note", "what": "mid-import"}, recorded_at=STAMP)
        writer = subprocess.run(  # and a real command, through the CLI
            [
                str(Path(sys.executable).parent / "rensei"),
                "--no-plugins",
                "--home",
                str(home),
                "explain",
                "--record",
                str(EXAMPLES / "context.json"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        _, err = importer.communicate(timeout=300)
    assert importer.returncode == 0, err.decode()
    assert seen  # the import was under way, some batches committed
    assert writer.returncode == 0, writer.stderr
    records = _chain_of(home)
    assert len(records) == RECORDS + 2
    ours = [seq for seq, _, _, data in records if b'"record_type":"hydraflow-import"' not in data]
    assert ours[0] == appended.seq and 0 < appended.seq < RECORDS  # between two batches
    state = _meta(home)
    assert state is not None and "importing" not in state and state["count"] == RECORDS
    assert state["blocks"][0][:2] == [0, appended.seq]  # the run split around it
    assert sum(b[1] for b in state["blocks"]) == RECORDS
    assert runner.invoke(cli, ["audit", "verify", "--home", str(home)]).exit_code == 0


def test_a_killed_import_resumes_to_what_one_import_gives(
    runner: CliRunner, tmp_path: Path, chain: Path
) -> None:
    whole = _home(runner, tmp_path / "whole")
    done = runner.invoke(
        cli, ["audit", "import", str(chain), "--format", "hydraflow", "--home", str(whole)]
    )
    assert done.exit_code == 0, done.output

    home = _home(runner, tmp_path / "killed")
    importer = _start(home, chain)
    seen = _halfway(home, importer)
    if not seen:
        importer.communicate(timeout=300)
    assert seen, "the import finished before any state in between could be seen"
    os.kill(importer.pid, signal.SIGKILL)
    importer.communicate(timeout=60)
    assert importer.returncode == -signal.SIGKILL
    # what the row says is what the chain holds: a verified prefix, marked unfinished
    state = _meta(home)
    assert state is not None and 0 < state["count"] < RECORDS
    assert state["importing"]["records"] == RECORDS
    held = _chain_of(home)
    assert len(held) == state["count"]
    assert held == _chain_of(whole)[: state["count"]]
    assert runner.invoke(cli, ["audit", "verify", "--home", str(home)]).exit_code == 0

    again = runner.invoke(
        cli,
        ["audit", "import", str(chain), "--format", "hydraflow", "--home", str(home), "--json"],
    )
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert (doc["resumed"], doc["already_imported"], doc["imported"]) == (
        True,
        state["count"],
        RECORDS - state["count"],
    )
    assert _chain_of(home) == _chain_of(whole)
    assert (
        _meta(home)
        == _meta(whole)
        == {
            "count": RECORDS,
            "head": json.loads(chain.read_text().splitlines()[-1])["record_hash"],
            "blocks": [[0, RECORDS, 0]],
        }
    )
    # and once complete, the import is idempotent again
    third = runner.invoke(
        cli,
        ["audit", "import", str(chain), "--format", "hydraflow", "--home", str(home), "--json"],
    )
    assert json.loads(third.stdout)["imported"] == 0 and _chain_of(home) == _chain_of(whole)


def test_a_file_changed_between_the_passes_stops_at_a_verified_batch(tmp_path: Path) -> None:
    """The second pass writes only what the first verified: a source that reads differently
    the second time stops at the last batch that still matches, recognisably unfinished."""
    runner = CliRunner()
    home = _home(runner, tmp_path / "h")
    first = ref.chain_lines([{"n": i} for i in range(300)])
    second = ref.chain_lines([{"n": i} for i in range(150)] + [{"n": -i} for i in range(150)])
    reads = iter([first, second])
    with (
        AuditLog.open(Home(home)) as log,
        pytest.raises(ImportRefusedError, match="changed while it was imported"),
    ):
        import_chain(log, lambda: next(reads), file="f", batch_records=BATCH)
    state = _meta(home)
    assert state is not None and state["count"] == 150 and "importing" in state
    assert len(_chain_of(home)) == 150


def test_a_fifo_is_imported_like_the_file_it_carries(runner: CliRunner, tmp_path: Path) -> None:
    """The import reads its source twice: a FIFO (read once) is copied aside first."""
    import threading

    lines = ref.chain_lines([{"n": i} for i in range(120)])
    fifo = tmp_path / "chain.fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_text("".join(lines)))
    feeder.start()
    home = _home(runner, tmp_path / "h")
    done = runner.invoke(
        cli, ["audit", "import", str(fifo), "--format", "hydraflow", "--home", str(home), "--json"]
    )
    feeder.join(timeout=60)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["imported"] == 120
    whole = _home(runner, tmp_path / "w")
    plain = ref.write_chain(tmp_path / "chain.jsonl", lines)
    assert (
        runner.invoke(
            cli, ["audit", "import", str(plain), "--format", "hydraflow", "--home", str(whole)]
        ).exit_code
        == 0
    )
    # the same records (the origin names the file given: the FIFO's path, not the copy's)
    fifo_records = [(t, d) for _, _, t, d in _chain_of(home)]
    assert b"rensei-import-" not in b"".join(d for _, d in fifo_records)
    assert fifo_records == [
        (t, d.replace(str(plain).encode(), str(fifo).encode())) for _, _, t, d in _chain_of(whole)
    ]
