"""A sealed audit segment is read at any schema version from the one that introduced segments:
a schema step for other tables (the live database migrates, sealed files are never written
again) must not strand the records a rotation sealed. An older file is still refused."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.errors import SchemaVersionError
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.audit.recovery import catalog_of
from rensei_routing.store.audit.segments import segments_dir
from rensei_routing.store.db import SCHEMA_VERSION, SEGMENT_MIN_VERSION, connect
from rensei_routing.store.home import Home

T = "2026-12-02T00:00:00.000000Z"


def _sealed_home(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("[audit]\nrotate_at_records = 10\n")
    with AuditLog.open(home) as log:
        for lo in range(0, 25, 5):
            log.append_many([{"n": i} for i in range(lo, lo + 5)], recorded_at=T)
        assert catalog_of(log), "the rotation sealed no segment"
    files = sorted(segments_dir(home.db_path).glob("*.db"))
    assert files
    return home, files[0]


def _set_version(path: Path, version: int) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.pragma("user_version", version)
    finally:
        conn.close()


def _verify(home: Home) -> tuple[int, str]:
    done = CliRunner().invoke(
        cli, ["--no-plugins", "--home", str(home.path), "audit", "verify", "--json"]
    )
    assert "Traceback" not in done.output
    return done.exit_code, done.output


def test_a_segment_sealed_under_an_older_schema_still_reads_and_verifies(tmp_path: Path) -> None:
    home, seg = _sealed_home(tmp_path)
    _set_version(seg, SEGMENT_MIN_VERSION)
    assert SEGMENT_MIN_VERSION < SCHEMA_VERSION
    with AuditLog.open(home, read_only=True) as log:
        assert log.get(0).payload == {"n": 0}
    code, out = _verify(home)
    assert code == 0, out
    assert json.loads(out)["ok"] is True
    # the live database itself still refuses to be read below the current schema
    with pytest.raises(SchemaVersionError):
        connect(seg, write=False)


def test_a_segment_older_than_segments_themselves_is_refused(tmp_path: Path) -> None:
    home, seg = _sealed_home(tmp_path)
    _set_version(seg, SEGMENT_MIN_VERSION - 1)
    code, out = _verify(home)
    assert code != 0
    assert f"schema version {SEGMENT_MIN_VERSION - 1}" in out, out
