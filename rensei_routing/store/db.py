"""Opening the home SQLite database with apsw: per-connection settings, identity check, migrations.
Owns the schema; must not hold business logic, and never touches process-wide apsw state.

Every connection is made by :func:`_connection`, which sets its busy handler before any statement
runs, so no first read (WAL recovery, the schema check) fails on a lock without waiting; the
handler waits as SQLite's own does, but with the interpreter lock released (:mod:`.busy` says why).
Each then gets apsw's best-practice ``connection_*`` settings (WAL, foreign keys, no double-quoted
strings, ...) applied to it alone and ``PRAGMA synchronous=FULL`` (a commit that returned survives
power loss, so a lost commit can never look like tampering); writers also get the WAL checkpoint
policy (:data:`WAL_SIZE_LIMIT`). Writer connections begin every ``with conn:`` block with ``BEGIN
IMMEDIATE``, so a transaction that reads the chain head already holds the write lock.

Schema versions are ``PRAGMA user_version`` = number of :data:`MIGRATIONS` applied. The version is
read in one snapshot; migrations identify the file again and run stepwise inside one
``BEGIN IMMEDIATE`` transaction that also stamps :data:`APPLICATION_ID`, so racing writers never
see a half-identified file. A file with another application id, a non-empty file without ours, a
file that is not SQLite, or a newer ``user_version`` raises :class:`SchemaVersionError` before
anything is written to it. :func:`store_error` turns apsw failures into the typed errors
(:class:`DiskFullError`, :class:`BusyTimeoutError` naming the lock holder, :class:`StoreError`).

The best-practice settings are :mod:`.practice`'s, made as :mod:`apsw.bestpractice` makes
them without importing it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import apsw

from ..core.timestamps import format_age
from ..errors import BusyTimeoutError, DiskFullError, SchemaVersionError, StoreError
from . import busy, practice
from .codec import Codec, migrate_dictionaries
from .locks import describe_holders
from .practice import BEST_PRACTICE

__all__ = [
    "APPLICATION_ID",
    "CONFIG_FILE",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SEGMENT_MIN_VERSION",
    "WAL_AUTOCHECKPOINT_PAGES",
    "WAL_SIZE_LIMIT",
    "close_quietly",
    "connect",
    "copy_database",
    "store_error",
]

#: ``PRAGMA application_id`` of a rensei-routing database: ASCII ``RnRt``.
APPLICATION_ID: Final = 0x526E5274

#: Schema steps (SQL, or a function of the connection), applied in order; ``user_version``
#: counts those applied. Only ever append.
MIGRATIONS: Final[tuple[str | Callable[[apsw.Connection], None], ...]] = (
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
    # 3: the zstd dictionaries audit payloads are compressed with (see .codec). Rows
    #    written before stay as they are (canonical bytes) and read the same.
    migrate_dictionaries,
    # 4: admission receipts issued by this host and the sessions running under them (see
    #    .sessions).
    """
    CREATE TABLE receipts(
        receipt_id TEXT PRIMARY KEY,
        pool TEXT NOT NULL,
        project TEXT,
        ruleset_rev TEXT NOT NULL,
        admitted_ms INTEGER NOT NULL,
        lease_ms INTEGER NOT NULL,
        body BLOB NOT NULL
    ) STRICT;
    CREATE TABLE sessions(
        session_id TEXT PRIMARY KEY,
        receipt_id TEXT NOT NULL UNIQUE REFERENCES receipts(receipt_id),
        pool TEXT NOT NULL,
        project TEXT,
        ruleset_rev TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'ended', 'expired')),
        on_revoke TEXT NOT NULL CHECK (on_revoke IN ('finish', 'drain')),
        started_ms INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        lease_ms INTEGER NOT NULL CHECK (lease_ms > 0),
        expires_ms INTEGER NOT NULL,
        ended_ms INTEGER,
        end_reason TEXT,
        revoked_rev TEXT
    ) STRICT;
    CREATE INDEX sessions_by_expiry ON sessions(state, expires_ms);
    CREATE INDEX sessions_by_project ON sessions(project, state);
    """,
    # 5: the sealed (and pruned) segments of the audit chain (see .segments): one
    #    row per segment moved out of ``audit_records`` into ``audit/segments/<first>-<last>.db``,
    #    with its signed seal checkpoint; a pruned segment's row is its anchor.
    """
    CREATE TABLE audit_segments(
        first_seq INTEGER PRIMARY KEY CHECK (first_seq >= 0),
        last_seq INTEGER NOT NULL CHECK (last_seq >= first_seq),
        prev_hash TEXT NOT NULL,
        head_hash TEXT NOT NULL,
        note TEXT NOT NULL,
        pruned INTEGER NOT NULL DEFAULT 0 CHECK (pruned IN (0, 1)),
        export_sha256 TEXT
    ) STRICT;
    """,
    # 6: the lapsed-lease check reads a lower bound of each open session's expiry
    #    (``lapse_floor_ms``), indexed, which a heartbeat rewrites once per half lease, not the
    #    expiry itself, which it rewrites every time (so a heartbeat writes the row's page
    #    only; see .sessions).
    """
    ALTER TABLE sessions ADD COLUMN lapse_floor_ms INTEGER NOT NULL DEFAULT 0
        CHECK (lapse_floor_ms <= expires_ms);
    UPDATE sessions SET lapse_floor_ms = expires_ms;
    DROP INDEX sessions_by_expiry;
    CREATE INDEX sessions_by_lapse_floor ON sessions(state, lapse_floor_ms);
    """,
    # 7: the control side's own audit records: one row per policy save, org load, compile and
    #    re-seal, committed with the write (see .control).
    """
    CREATE TABLE control_events(
        seq INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        revision INTEGER NOT NULL,
        content_hash TEXT NOT NULL
    ) STRICT;
    """,
    # 8: the shadow index the console reads agreement figures from (see
    #    .shadow_index). A chain recorded before starts unindexed: `rensei shadow index`.
    """
    CREATE TABLE shadow_index(
        seq INTEGER PRIMARY KEY,
        at_us INTEGER NOT NULL,
        repo TEXT NOT NULL,
        role TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        seam TEXT NOT NULL,
        transport TEXT NOT NULL,
        divergence TEXT NOT NULL,
        outcome TEXT NOT NULL
    ) STRICT;
    CREATE TABLE shadow_cube(
        hour INTEGER NOT NULL,
        repo TEXT NOT NULL,
        role TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        seam TEXT NOT NULL,
        transport TEXT NOT NULL,
        divergence TEXT NOT NULL,
        outcome TEXT NOT NULL,
        n INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (hour, repo, role, mechanism, seam, transport, divergence, outcome)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE shadow_days(
        day INTEGER NOT NULL,
        repo TEXT NOT NULL,
        role TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        seam TEXT NOT NULL,
        transport TEXT NOT NULL,
        divergence TEXT NOT NULL,
        outcome TEXT NOT NULL,
        n INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (day, repo, role, mechanism, seam, transport, divergence, outcome)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE shadow_totals(
        repo TEXT NOT NULL,
        role TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        seam TEXT NOT NULL,
        transport TEXT NOT NULL,
        divergence TEXT NOT NULL,
        outcome TEXT NOT NULL,
        n INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (repo, role, mechanism, seam, transport, divergence, outcome)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE shadow_index_state(
        id INTEGER PRIMARY KEY CHECK (id = 1),
        next_seq INTEGER NOT NULL
    ) STRICT;
    INSERT INTO shadow_index_state(id, next_seq) VALUES (1, 0);
    """,
    # 9: enforcement canaries, one row per repository ever armed, and one row per enforced
    #    decision of an armed canary (the trip's window), written with its audit record
    #    (see .enforcement).
    """
    CREATE TABLE enforce_canaries(
        repo TEXT PRIMARY KEY,
        armed INTEGER NOT NULL CHECK (armed IN (0, 1)),
        revision INTEGER NOT NULL CHECK (revision >= 1),
        policy_hash TEXT NOT NULL,
        gate_seq INTEGER,
        arm_seq INTEGER NOT NULL,
        override INTEGER NOT NULL CHECK (override IN (0, 1)),
        trip_rate REAL CHECK (trip_rate IS NULL OR (trip_rate >= 0 AND trip_rate < 1)),
        trip_window_s INTEGER CHECK (trip_window_s IS NULL OR trip_window_s > 0),
        armed_at TEXT NOT NULL,
        armed_at_us INTEGER NOT NULL,
        actor TEXT NOT NULL,
        tripped INTEGER NOT NULL DEFAULT 0 CHECK (tripped IN (0, 1)),
        trip_reason TEXT,
        ended_at TEXT,
        ended_seq INTEGER
    ) STRICT;
    CREATE TABLE enforce_decisions(
        seq INTEGER PRIMARY KEY,
        repo TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        refused INTEGER NOT NULL CHECK (refused IN (0, 1))
    ) STRICT;
    CREATE INDEX enforce_decisions_by_repo ON enforce_decisions(repo, at_us);
    """,
    # 10: the Merkle tree under the audit chain (store/audit/tree.py): the stored hashes of
    #     every complete subtree in stored-hash-index order, 32 to a row. It covers every record
    #     of the chain, across the sealed segments, and stays here when they are sealed or
    #     pruned. An existing home's tree is built from its chain by the first writer.
    """
    CREATE TABLE audit_tree(
        chunk INTEGER PRIMARY KEY,
        hashes BLOB NOT NULL
    ) STRICT;
    """,
    # witness: what this home, as a witness of other logs, last cosigned for each origin (its
    #    view, advanced by compare-and-swap: store/witness.py), and the cosignatures witnesses
    #    made of this home's own checkpoints, kept beside the checkpoint body they sign.
    """
    CREATE TABLE witness_views(
        origin TEXT PRIMARY KEY,
        size INTEGER NOT NULL CHECK (size >= 0),
        root BLOB NOT NULL CHECK (length(root) = 32),
        log_key TEXT NOT NULL,
        note TEXT NOT NULL,
        cosigned_at INTEGER NOT NULL,
        advances INTEGER NOT NULL DEFAULT 0
    ) STRICT;
    CREATE TABLE audit_cosignatures(
        size INTEGER NOT NULL,
        body BLOB NOT NULL,
        line TEXT NOT NULL,
        key_name TEXT NOT NULL,
        key_hash BLOB NOT NULL,
        PRIMARY KEY (size, body, line)
    ) STRICT, WITHOUT ROWID;
    """,
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
#: The oldest schema a sealed audit segment file may have: step 5 added segments, and a
#: segment's ``audit_records`` and codec tables have not changed since.
SEGMENT_MIN_VERSION: Final = 5

#: Several processes append to one log; apsw's recommended 100 ms is too short for that. A home
#: sets its own in :data:`CONFIG_FILE` (see :mod:`.home`).
DEFAULT_BUSY_TIMEOUT_MS: Final = 30_000

#: The WAL checkpoint policy. SQLite checkpoints automatically once the WAL holds this many
#: pages (its default), but cannot reset the WAL while a reader still needs old frames, so a
#: long ``audit verify`` beside a writer lets the WAL grow; once the reader is done, the next
#: checkpoint resets it and a writer truncates it back to :data:`WAL_SIZE_LIMIT` bytes
#: (``journal_size_limit``), and the last connection to close removes it.
WAL_AUTOCHECKPOINT_PAGES: Final = 1000
WAL_SIZE_LIMIT: Final = 4 * 1024 * 1024

#: The home's configuration file, beside the database.
CONFIG_FILE: Final = "config.toml"


def _switch_to_wal(conn: apsw.Connection, busy_timeout_ms: int) -> None:
    """``PRAGMA journal_mode=wal`` (apsw's ``connection_wal``), retried while the busy timeout
    lasts. Switching a fresh file out of rollback mode takes an exclusive lock, and when two
    connections each hold a shared lock and want it, SQLite answers one of them BUSY at once,
    without the busy handler, because waiting would deadlock (seen as 1 failure in ~200
    parallel first opens). Each failed attempt has released its locks, so the other finishes
    and the retry finds the file in WAL mode already."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            practice.wal(conn)
            return
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


#: apsw's recommended per-connection settings, except its 100 ms busy timeout (ours is longer and
#: must already hold while ``PRAGMA optimize`` waits for a lock) and its WAL switch (a writer
#: makes it with :func:`_switch_to_wal` first).
_SETUP: Final[tuple[Callable[[apsw.Connection], None], ...]] = tuple(
    f for f in BEST_PRACTICE.values() if f is not practice.wal
)

#: What a read-only connection applies: everything above except ``PRAGMA optimize``, which
#: writes (and the WAL switch, which a writer already made persistent).
_READ_SETUP: Final = tuple(f for f in _SETUP if f is not practice.optimize)


def connect(
    path: Path,
    *,
    write: bool = False,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    vfs: str | None = None,
    min_version: int | None = None,
) -> apsw.Connection:
    """Open the database at ``path``. The caller owns the connection and closes it.

    ``write=True`` creates a missing file, migrates it to this schema, and takes the write lock
    at ``BEGIN``. ``write=False`` opens read-only and changes nothing, so a copy on read-only
    media can be read and verified; a database on a read-only medium with no ``-wal``/``-shm``
    beside it is opened as immutable (nothing can be writing to it). A read-only open refuses a
    schema older than ``min_version`` (``None``: this one, read when called); a sealed audit
    segment, whose records table has not changed since :data:`SEGMENT_MIN_VERSION`, is read at
    any version from there on, so a schema step for other tables never strands a sealed segment.

    Every statement, the very first included, waits up to ``busy_timeout_ms`` for a lock
    (:func:`_connection` is the only place a connection is made). ``vfs`` names a registered
    SQLite VFS (e.g. a test's fault-injecting one); ``None`` is SQLite's default.

    Raises:
        SchemaVersionError: the file is not a rensei-routing database, has a newer schema, or
            (read-only) an older one that a writer must migrate first.
        BusyTimeoutError: another connection held a lock longer than the busy timeout.
        DiskFullError: creating or migrating the database ran out of space.
        StoreError: the file cannot be opened (missing and ``write=False``, unreadable, ...).
    """
    conn = _open(path, write, busy_timeout_ms, vfs)
    try:
        version = _identify_in_snapshot(conn, path)
        if not write:
            for setup in _READ_SETUP:
                setup(conn)
            least = SCHEMA_VERSION if min_version is None else min_version
            if version < least:
                raise SchemaVersionError(
                    f"{path} has schema version {version}, older than {least}: "
                    "open it once with a writer (e.g. `rensei init`) to migrate it"
                )
            Codec.load(conn).register(conn)
            return conn
        _switch_to_wal(conn, busy_timeout_ms)
        for setup in _SETUP:
            setup(conn)
        conn.pragma("synchronous", "FULL")
        conn.pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
        conn.pragma("journal_size_limit", WAL_SIZE_LIMIT)
        conn.transaction_mode = "IMMEDIATE"
        if version < SCHEMA_VERSION:
            _migrate(conn, path)
        Codec.load(conn).register(conn)
    except apsw.NotADBError as e:
        close_quietly(conn)
        raise SchemaVersionError(f"{path} is not a SQLite database") from e
    except apsw.Error as e:
        close_quietly(conn)
        raise _cannot_open(path, e, write) from e
    except BaseException:
        close_quietly(conn)
        raise
    return conn


def _connection(name: str, flags: int, busy_timeout_ms: int, vfs: str | None) -> apsw.Connection:
    """The one place a connection is made: its busy handler (:mod:`.busy`) is set before
    any statement runs, so no first read (WAL recovery, the schema check) ever fails on a lock
    without waiting, and no wait holds the interpreter lock."""
    conn = apsw.Connection(name, flags=flags, vfs=vfs)
    busy.wait_patiently(conn, busy_timeout_ms)
    return conn


def _open(path: Path, write: bool, busy_timeout_ms: int, vfs: str | None) -> apsw.Connection:
    if write:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    else:
        flags = apsw.SQLITE_OPEN_READONLY
    try:
        conn = _connection(str(path), flags, busy_timeout_ms, vfs)
    except apsw.Error as e:
        raise _cannot_open(path, e, write) from e
    if write:
        return conn
    try:
        conn.pragma("schema_version")  # WAL recovery happens here, not at open
        return conn
    except apsw.Error as e:
        close_quietly(conn)
        if not _on_read_only_medium(path):
            raise _cannot_open(path, e, write) from e
    # Read-only medium without the WAL index: nothing can be writing, read the file as is.
    uri = Path(path).resolve().as_uri() + "?immutable=1"
    try:
        return _connection(
            uri, apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI, busy_timeout_ms, vfs
        )
    except apsw.Error as e:
        raise StoreError(f"cannot open database {path}: {e}") from e


def copy_database(
    source: apsw.Connection,
    target: Path,
    *,
    wal: bool,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> None:
    """Copy ``source``'s main database into a new file ``target`` with SQLite's online backup
    API, in one step: the copy is one consistent read snapshot of ``source`` (writers beside it
    keep appending; WAL readers never block them), taken whole or not at all. ``wal=False``
    leaves the copy in rollback-journal mode: one self-contained file that readers open
    without creating ``-wal``/``-shm`` beside it (a backup); ``wal=True`` for a live home.

    Raises:
        StoreError: ``target`` exists, or the copy failed (a partial ``target`` is removed).
    """
    if target.exists():
        raise StoreError(f"refusing to copy the database over {target}: it exists")
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        dest = _connection(str(target), flags, busy_timeout_ms, None)
    except apsw.Error as e:
        raise StoreError(f"cannot create {target}: {e}") from e
    try:
        with dest.backup("main", source, "main") as backup:
            backup.step(-1)  # every page in one read snapshot: consistent, never restarted
        dest.pragma("journal_mode", "wal" if wal else "delete")
    except apsw.Error as e:
        close_quietly(dest)
        for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise store_error("cannot copy the database", e, target) from e
    dest.close()


def close_quietly(conn: apsw.Connection) -> None:
    """Close ``conn``, ignoring an error from the close itself: every transaction has already
    committed or rolled back by then, and SQLite reports a failed checkpoint-on-close (e.g. after
    an I/O error) that loses nothing, since the WAL still holds every commit."""
    with contextlib.suppress(apsw.Error):
        conn.close()


def _cannot_open(path: Path, error: apsw.Error, write: bool) -> StoreError:
    hint = ""
    if write and not os.access(Path(path).parent, os.W_OK):
        hint = " (its directory is read-only: readers work, writers cannot)"
    return store_error(f"cannot open database {path}", error, Path(path), hint=hint)


def store_error(what: str, error: Exception, db_path: Path | str, *, hint: str = "") -> StoreError:
    """The typed error for an apsw failure while doing ``what`` on the database at ``db_path``.

    A full disk is a :class:`DiskFullError` naming the home; a lock held past the busy timeout
    is a :class:`BusyTimeoutError` naming the holder (where the OS can tell) and what to do;
    anything else a :class:`StoreError` with SQLite's message. A wait Ctrl-C ended is raised
    again as its ``KeyboardInterrupt`` (apsw reports it as busy under ``with conn:``).
    """
    path = Path(db_path)
    home = path.parent
    # A failed ROLLBACK after SQLite already rolled back (as it does on SQLITE_FULL and I/O
    # errors) hides the error that matters: report the first apsw error of the chain.
    while isinstance(error.__context__, apsw.Error):
        error = error.__context__
    if isinstance(error, apsw.FullError):
        return DiskFullError(
            f"{what}: disk full: the rensei home {home} has no room left (free space on its "
            "disk, or raise the database size limit, then retry); nothing was written"
        )
    if isinstance(error, apsw.BusyError):
        if isinstance(error.__context__, KeyboardInterrupt):  # Ctrl-C ended the wait
            raise error.__context__
        which = "it" if str(path) in what else str(path)
        return BusyTimeoutError(
            f"{what}: {which} stayed locked longer than the busy timeout"
            f"{describe_holders(path)}; retry when that process is done, stop it if it hangs, "
            f"or raise busy_timeout under [store] in {home / CONFIG_FILE} (default "
            f"{format_age(DEFAULT_BUSY_TIMEOUT_MS)})"
        )
    return StoreError(f"{what}: {error}{hint}")


def _on_read_only_medium(path: Path) -> bool:
    path = Path(path)
    wal = Path(f"{path}-wal")
    return path.is_file() and not os.access(path.parent, os.W_OK) and not wal.exists()


def _identify_in_snapshot(conn: apsw.Connection, path: Path) -> int:
    """:func:`_identify` inside one read transaction, so a writer committing a migration between
    its three reads cannot make a fresh database look like another application's."""
    mode = conn.transaction_mode
    conn.transaction_mode = "DEFERRED"
    try:
        with conn:
            version = _identify(conn, path)
    finally:
        conn.transaction_mode = mode
    return version


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
    """Identify again and apply the missing migrations in one ``BEGIN IMMEDIATE`` transaction:
    another process may have migrated (or be migrating) the file since we looked."""
    with conn:  # the connection's transaction mode is IMMEDIATE
        version = _identify(conn, path)
        for step in range(version, SCHEMA_VERSION):
            migration = MIGRATIONS[step]
            if isinstance(migration, str):
                conn.execute(migration)
            else:
                migration(conn)
        if version < SCHEMA_VERSION:
            conn.pragma("application_id", APPLICATION_ID)
            conn.pragma("user_version", SCHEMA_VERSION)
