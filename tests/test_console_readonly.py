"""The console never writes into the home (issue 29, L2): ``rensei ui`` as a real process,
every page served and every background job run to its end (verification, doctor, a what-if
comparison), and the home's file tree is the same before and after: names, sizes, mtimes and
content hashes. A leftover temporary file of the segments stays (no recovery, no lock taken),
and a missing database is a page saying so, never a new database."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from rensei_routing.console.state import POLL_S
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home

from .console_support import fetch, running_ui, wait_for
from .shadow_support import home_with_policies, registry, spawn

PAGES = [
    "/",
    "/shadow",
    "/shadow?since=7d",
    "/divergences",
    "/whatif",
    "/whatif?revision=1",
    "/policies",
    "/audit",
    "/decision/0",
    "/fleet",
    "/enforce",
    "/static/console.css",
]


def _home(tmp_path: Path) -> Home:
    home = home_with_policies(tmp_path)
    with ShadowRecorder(home, registry(), clock=lambda: "2026-03-01T10:00:00.000000Z") as rec:
        rec.record_many([Spawn.from_dict(spawn()), Spawn.from_dict(spawn(principal_id="planner"))])
    # a rotation that never committed left its temporary file (what `recover` would delete)
    segments = home.path / "audit" / "segments"
    segments.mkdir(parents=True, exist_ok=True)
    (segments / ".0-9.db.tmp").write_bytes(b"junk")
    return home


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every file and directory under ``root``: kind, size, mtime and content hash. The
    ``-shm`` index is left out: every reader of a WAL database writes its read marks there
    (SQLite makes it, and an empty ``-wal``, when a reader opens a home that has none)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        if path.name.endswith("-shm"):
            continue
        st = path.lstat()
        if path.is_dir():
            out[str(path.relative_to(root))] = ("dir", st.st_mtime_ns, st.st_mode)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = ("file", st.st_size, st.st_mtime_ns, digest)
    return out


def _prime(home: Home) -> None:
    """Open and close a reader once, so the ``-wal`` SQLite makes for readers is there."""
    conn = home.connect(write=False)
    conn.close()


def test_serving_every_page_and_job_writes_nothing(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _prime(home)
    before = tree(home.path)
    assert "audit/segments/.0-9.db.tmp" in before
    with running_ui(home.path, tmp_path / "ui.log") as base:

        def settled() -> bool:
            overview = fetch(base + "/")[1]
            whatif = fetch(base + "/whatif?revision=1")[1]
            return (
                b'id="chain-status">ok' in overview
                and b'id="doctor"' in overview
                and b"whatif-running" not in whatif
                and b'http-equiv="refresh"' not in whatif
            )

        wait_for(settled, "verification, doctor and the what-if job")
        for path in PAGES:
            status, _ = fetch(base + path)
            assert status == 200, path
    after = tree(home.path)
    assert after == before
    assert not (home.path / "audit" / "segments" / ".lock").exists()


def test_a_missing_database_is_a_page_not_a_new_database(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _prime(home)
    with running_ui(home.path, tmp_path / "ui.log") as base:
        wait_for(lambda: b'id="chain-status">ok' in fetch(base + "/")[1], "a verification")
        moved = tmp_path / "moved.db"
        os.rename(home.db_path, moved)
        for suffix in ("-wal", "-shm"):
            Path(f"{home.db_path}{suffix}").unlink(missing_ok=True)
        before = tree(home.path)
        for path in ("/audit", "/", "/shadow", "/decision/0", "/policies", "/whatif?revision=1"):
            status, body = fetch(base + path)
            assert status == 503, (path, status)
            assert re.search(rb"rensei\.db is missing: this console only reads", body), path
        # give the background verification a few looks at the missing file: it creates nothing
        time.sleep(3 * POLL_S)
        assert not home.db_path.exists()
        assert tree(home.path) == before
