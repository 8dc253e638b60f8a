"""Opening the database: per-connection settings, identity, migrations, typed refusals."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import rensei_routing
from rensei_routing.errors import SchemaVersionError, StoreError
from rensei_routing.store import busy, db, practice

from .conftest import read_only_view


def _columns(conn: apsw.Connection, table: str) -> list[tuple[str, str, int, int]]:
    return [(r[1], r[2], r[3], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]


@pytest.mark.parametrize("write", [True, False], ids=["writer", "reader"])
def test_every_connection_gets_wal_full_sync_and_best_practice(tmp_path: Path, write: bool) -> None:
    path = tmp_path / "r.db"
    db.connect(path, write=True).close()
    conn = db.connect(path, write=write)
    try:
        assert conn.pragma("journal_mode") == "wal"
        assert conn.pragma("synchronous") == 2  # FULL
        assert conn.pragma("foreign_keys") == 1
        assert conn.pragma("recursive_triggers") == 1
        assert busy.busy_timeout_ms(conn) == db.DEFAULT_BUSY_TIMEOUT_MS  # not apsw's 100 ms
        assert conn.pragma("application_id") == db.APPLICATION_ID
        assert conn.pragma("user_version") == db.SCHEMA_VERSION
        assert conn.transaction_mode == ("IMMEDIATE" if write else "DEFERRED")
        with pytest.raises(apsw.SQLError):  # double-quoted strings are identifiers only
            conn.execute('SELECT "no such column"').fetchall()
    finally:
        conn.close()


def test_connect_never_touches_process_wide_hooks(tmp_path: Path) -> None:
    before = list(apsw.connection_hooks)
    db.connect(tmp_path / "r.db", write=True).close()
    assert apsw.connection_hooks == before


def test_schema_has_the_shared_tables(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "r.db", write=True)
    try:
        assert _columns(conn, "policy_revisions") == [
            ("revision", "INTEGER", 0, 1),
            ("content_hash", "TEXT", 1, 0),
            ("body", "BLOB", 1, 0),
            ("saved_at", "TEXT", 1, 0),
        ]
        assert _columns(conn, "meta") == [("key", "TEXT", 0, 1), ("value", "TEXT", 1, 0)]
        assert [c[0] for c in _columns(conn, "audit_records")] == [
            "seq",
            "recorded_at",
            "prev_hash",
            "payload_hash",
            "record_hash",
            "payload",
        ]
        assert [c[0] for c in _columns(conn, "audit_checkpoints")] == [
            "id",
            "size",
            "head_hash",
            "note",
        ]
    finally:
        conn.close()


def test_writers_take_the_lock_at_begin(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    first = db.connect(path, write=True)
    second = db.connect(path, write=True, busy_timeout_ms=0)
    try:
        with first, pytest.raises(apsw.BusyError), second:
            pass
    finally:
        first.close()
        second.close()


def test_reopening_does_not_rerun_migrations(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    conn = db.connect(path, write=True)
    with conn:
        conn.execute("INSERT INTO meta VALUES ('k', 'v')")
    conn.close()
    conn = db.connect(path, write=True)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key = 'k'").get == "v"
    finally:
        conn.close()


def test_appended_migrations_step_an_existing_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.db"
    db.connect(path, write=True).close()
    monkeypatch.setattr(db, "MIGRATIONS", (*db.MIGRATIONS, "CREATE TABLE later(x INTEGER);"))
    monkeypatch.setattr(db, "SCHEMA_VERSION", len(db.MIGRATIONS))
    # A reader never changes the file: it asks for a writer to migrate first.
    # (``min_version`` given: its default was bound when ``connect`` was defined, before the patch)
    with pytest.raises(SchemaVersionError, match="older"):
        db.connect(path, min_version=db.SCHEMA_VERSION)
    db.connect(path, write=True).close()
    conn = db.connect(path)
    try:
        assert conn.pragma("user_version") == db.SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM later").get == 0
    finally:
        conn.close()


def test_newer_schema_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    conn = db.connect(path, write=True)
    conn.pragma("user_version", db.SCHEMA_VERSION + 1)
    conn.close()
    with pytest.raises(SchemaVersionError, match="upgrade"):
        db.connect(path, write=True)


# -- our settings stay apsw's best practice -------------------------------------------------------


def test_our_settings_are_apsw_best_practice_connection_settings_in_its_order() -> None:
    # apsw.bestpractice is not imported by the store (it imports apsw.ext, slow to start): a
    # setting apsw adds, drops or renames must show up here, not silently go missing.
    import apsw.bestpractice

    theirs = [
        f.__name__
        for f in apsw.bestpractice.recommended
        if f.__name__.startswith("connection_") and f.__name__ != "connection_busy_timeout"
    ]
    assert list(practice.BEST_PRACTICE) == theirs
    assert tuple(f for n, f in practice.BEST_PRACTICE.items() if n != "connection_wal") == db._SETUP


def _applied(
    conn: apsw.Connection, setting: Callable[[apsw.Connection], None]
) -> tuple[list[str], tuple[int, int]]:
    """The statements ``setting`` runs on ``conn`` and the double-quoted-string switches after."""
    ran: list[str] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
        ran.append(sql)
        return True

    conn.exec_trace = trace
    setting(conn)
    conn.exec_trace = None
    dqs = (
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, -1),
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, -1),
    )
    return ran, dqs


@pytest.mark.parametrize("name", sorted(practice.BEST_PRACTICE))
@pytest.mark.parametrize("write", [True, False], ids=["writer", "reader"])
def test_each_setting_does_what_apsw_best_practice_does(
    tmp_path: Path, name: str, write: bool
) -> None:
    import apsw.bestpractice

    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE if write else 0
    for side in ("ours", "theirs"):
        made = apsw.Connection(str(tmp_path / f"{side}.db"))
        made.execute("CREATE TABLE t(x)")
        made.close()
    ours = apsw.Connection(str(tmp_path / "ours.db"), flags=flags or apsw.SQLITE_OPEN_READONLY)
    theirs = apsw.Connection(str(tmp_path / "theirs.db"), flags=flags or apsw.SQLITE_OPEN_READONLY)
    try:
        want = _applied(theirs, getattr(apsw.bestpractice, name))
        got = _applied(ours, practice.BEST_PRACTICE[name])
        assert got == want
        assert ours.pragma("journal_mode") == theirs.pragma("journal_mode")
    finally:
        ours.close()
        theirs.close()


def _foreign(path: Path, app_id: int) -> bytes:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE theirs(x); INSERT INTO theirs VALUES (1);")
    if app_id:
        conn.pragma("application_id", app_id)
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("app_id", [0, 0x12345678], ids=["no-application-id", "other-application"])
def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path, app_id: int) -> None:
    path = tmp_path / "theirs.db"
    before = _foreign(path, app_id)
    with pytest.raises(SchemaVersionError, match="another application"):
        db.connect(path, write=True)
    assert path.read_bytes() == before
    assert not (tmp_path / "theirs.db-wal").exists()


def test_non_database_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the pages you are looking for\n" * 200)
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match="not a SQLite database"):
        db.connect(path, write=True)
    assert path.read_bytes() == before


def test_missing_database_for_reading_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        db.connect(tmp_path / "absent.db")
    assert not isinstance(info.value, SchemaVersionError)
    assert isinstance(info.value.__cause__, apsw.Error)
    assert not (tmp_path / "absent.db").exists()


def test_nothing_imports_the_stdlib_sqlite3_module() -> None:
    root = Path(rensei_routing.__file__).parent
    pattern = re.compile(r"^\s*(import\s+sqlite3|from\s+sqlite3\b)", re.MULTILINE)
    offenders = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text("utf-8"))]
    assert offenders == []


def test_a_reader_changes_nothing_and_works_on_read_only_media(tmp_path: Path) -> None:
    folder = tmp_path / "evidence"
    folder.mkdir()
    path = folder / "r.db"
    writer = db.connect(path, write=True)
    with writer:
        writer.execute("INSERT INTO meta(key, value) VALUES ('k', 'v')")
    writer.close()  # the last close checkpoints the WAL away: no -wal, no -shm
    before = path.read_bytes()
    with read_only_view(folder) as view:
        conn = db.connect(view / "r.db")
        try:
            assert conn.execute("SELECT value FROM meta WHERE key = 'k'").get == "v"
            with pytest.raises(apsw.ReadOnlyError):
                conn.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")
        finally:
            conn.close()
        with pytest.raises(StoreError):
            db.connect(view / "r.db", write=True)
    assert path.read_bytes() == before


def test_a_reader_never_creates_or_migrates(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(SchemaVersionError):
        db.connect(empty)
    assert empty.read_bytes() == b""
    with pytest.raises(StoreError):
        db.connect(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
