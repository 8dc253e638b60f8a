"""Opening the home SQLite database with apsw: per-connection settings, identity check, migrations.
Owns the schema; must not hold business logic, and never touches process-wide apsw state.

Every connection gets apsw's best-practice ``connection_*`` settings (WAL, foreign keys, no
double-quoted strings, ...) applied to it alone, a longer busy timeout, and
``PRAGMA synchronous=FULL`` (a commit that returned survives power loss, so a lost commit can
never look like tampering). Writer connections begin every ``with conn:`` block with
``BEGIN IMMEDIATE``, so a transaction that reads the chain head already holds the write lock.

Schema versions are ``PRAGMA user_version`` = number of :data:`MIGRATIONS` applied; migrations
run stepwise inside one transaction that also stamps :data:`APPLICATION_ID`. A file with another
application id, a non-empty file without ours, a file that is not SQLite, or a newer
``user_version`` raises :class:`SchemaVersionError` before anything is written to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

import apsw
import apsw.bestpractice

from ..errors import SchemaVersionError, StoreError

__all__ = ["APPLICATION_ID", "DEFAULT_BUSY_TIMEOUT_MS", "MIGRATIONS", "SCHEMA_VERSION", "connect"]

#: ``PRAGMA application_id`` of a rensei-routing database: ASCII ``RnRt``.
APPLICATION_ID: Final = 0x526E5274

#: Schema steps, applied in order; ``user_version`` counts those applied. Only ever append.
MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: meta, policy revisions, the audit chain and its checkpoints.
    """
    CREATE TABLE meta(
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE policy_revisions(
        revision INTEGER PRIMARY KEY,
        content_hash TEXT NOT NULL,
        body BLOB NOT NULL,
        saved_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE audit_records(
        seq INTEGER PRIMARY KEY,
        recorded_at TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        payload_hash TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        payload BLOB NOT NULL
    ) STRICT;
    CREATE TABLE audit_checkpoints(
        id INTEGER PRIMARY KEY,
        size INTEGER NOT NULL,
        head_hash TEXT NOT NULL,
        note TEXT NOT NULL
    ) STRICT;
    """,
    # 2: the org's live data, the compiled, signed ruleset snapshots (document 000), and the
    #    per-project local caps of the budget posture.
    """
    CREATE TABLE org_data(
        revision INTEGER PRIMARY KEY,
        content_hash TEXT NOT NULL,
        body BLOB NOT NULL,
        saved_at TEXT NOT NULL
    ) STRICT;
    CREATE TABLE ruleset_snapshots(
        revision INTEGER PRIMARY KEY,
        ruleset_rev TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        compiled_at TEXT NOT NULL,
        policy_revision INTEGER NOT NULL,
        org_revision INTEGER NOT NULL,
        envelope BLOB NOT NULL
    ) STRICT;
    CREATE TABLE local_caps(
        project TEXT PRIMARY KEY,
        inflight INTEGER NOT NULL CHECK (inflight >= 0)
    ) STRICT;
    """,
)
SCHEMA_VERSION: Final = len(MIGRATIONS)

#: Several processes append to one log; apsw's recommended 100 ms is too short for that.
DEFAULT_BUSY_TIMEOUT_MS: Final = 30_000

#: apsw's recommended per-connection settings, except its 100 ms busy timeout (ours is longer and
#: must already hold while ``PRAGMA optimize`` and the WAL switch wait for a lock).
_SETUP: Final[tuple[Callable[[apsw.Connection], None], ...]] = tuple(
    f
    for f in apsw.bestpractice.recommended
    if f.__name__.startswith("connection_") and f is not apsw.bestpractice.connection_busy_timeout
)

#: What a read-only connection applies: everything above except the settings that write to the
#: file (switching to WAL, which a writer already made persistent, and ``PRAGMA optimize``).
_READ_SETUP: Final = tuple(
    f
    for f in _SETUP
    if f not in (apsw.bestpractice.connection_wal, apsw.bestpractice.connection_optimize)
)


def connect(
    path: Path, *, write: bool = False, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> apsw.Connection:
    """Open the database at ``path``. The caller owns the connection and closes it.

    ``write=True`` creates a missing file, migrates it to this schema, and takes the write lock
    at ``BEGIN``. ``write=False`` opens read-only and changes nothing, so a copy on read-only
    media can be read and verified; a database on a read-only medium with no ``-wal``/``-shm``
    beside it is opened as immutable (nothing can be writing to it).

    Raises:
        SchemaVersionError: the file is not a rensei-routing database, has a newer schema, or
            (read-only) an older one that a writer must migrate first.
        StoreError: the file cannot be opened (missing and ``write=False``, unreadable, locked
            longer than the busy timeout, ...).
    """
    conn = _open(path, write)
    try:
        conn.set_busy_timeout(busy_timeout_ms)
        version = _identify(conn, path)
        if not write:
            for setup in _READ_SETUP:
                setup(conn)
            if version < SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{path} has schema version {version}, older than {SCHEMA_VERSION}: "
                    "open it once with a writer (e.g. `rensei init`) to migrate it"
                )
            return conn
        for setup in _SETUP:
            setup(conn)
        conn.pragma("synchronous", "FULL")
        if version < SCHEMA_VERSION:
            _migrate(conn, path)
        conn.transaction_mode = "IMMEDIATE"
    except apsw.NotADBError as e:
        conn.close()
        raise SchemaVersionError(f"{path} is not a SQLite database") from e
    except apsw.Error as e:
        conn.close()
        raise _cannot_open(path, e, write) from e
    except BaseException:
        conn.close()
        raise
    return conn


def _open(path: Path, write: bool) -> apsw.Connection:
    if write:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    else:
        flags = apsw.SQLITE_OPEN_READONLY
    try:
        conn = apsw.Connection(str(path), flags=flags)
        if not write:
            conn.pragma("schema_version")  # WAL recovery happens here, not at open
        return conn
    except apsw.Error as e:
        if write or not _on_read_only_medium(path):
            raise _cannot_open(path, e, write) from e
    # Read-only medium without the WAL index: nothing can be writing, read the file as is.
    uri = Path(path).resolve().as_uri() + "?immutable=1"
    try:
        return apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error as e:
        raise StoreError(f"cannot open database {path}: {e}") from e


def _cannot_open(path: Path, error: apsw.Error, write: bool) -> StoreError:
    hint = ""
    if write and not os.access(Path(path).parent, os.W_OK):
        hint = " (its directory is read-only: readers work, writers cannot)"
    return StoreError(f"cannot open database {path}: {error}{hint}")


def _on_read_only_medium(path: Path) -> bool:
    path = Path(path)
    wal = Path(f"{path}-wal")
    return path.is_file() and not os.access(path.parent, os.W_OK) and not wal.exists()


def _identify(conn: apsw.Connection, path: Path) -> int:
    """The schema version of an existing rensei-routing database (0 for an empty file)."""
    app_id = conn.pragma("application_id")
    version = conn.pragma("user_version")
    if app_id == 0:
        has_tables = conn.execute("SELECT count(*) FROM sqlite_schema").get
        if version != 0 or has_tables:
            raise SchemaVersionError(f"{path} is a SQLite database of another application")
        return 0
    if app_id != APPLICATION_ID:
        raise SchemaVersionError(
            f"{path} is a SQLite database of another application (application_id {app_id:#x})"
        )
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}; this rensei-routing knows up to "
            f"{SCHEMA_VERSION}: upgrade rensei-routing"
        )
    return version


def _migrate(conn: apsw.Connection, path: Path) -> None:
    """Apply the missing migrations in one immediate transaction (another process may race us)."""
    mode = conn.transaction_mode
    conn.transaction_mode = "IMMEDIATE"
    try:
        with conn:
            version = _identify(conn, path)
            for step in range(version, SCHEMA_VERSION):
                conn.execute(MIGRATIONS[step])
            if version < SCHEMA_VERSION:
                conn.pragma("application_id", APPLICATION_ID)
                conn.pragma("user_version", SCHEMA_VERSION)
    finally:
        conn.transaction_mode = mode
