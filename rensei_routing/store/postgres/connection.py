"""Connections to the control database on PostgreSQL (psycopg 3): the driver imported on first
use, the URL named without its password, failures turned into typed errors, and the schema.

Owns the ``control_*`` tables and their migrations (``rensei_control_schema`` counts the steps
applied; steps run in one transaction under an advisory lock, so racing replicas migrate once).
Must not hold business logic (see :mod:`.control`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from ...errors import (
    DatabaseUnreachableError,
    DriverMissingError,
    SchemaVersionError,
    StoreError,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CHANNEL",
    "MIGRATIONS",
    "connect",
    "describe",
    "driver",
    "pg_error",
]

#: The LISTEN/NOTIFY channel every control write notifies (payload: the org id).
CHANNEL: Final = "rensei_control"
#: Advisory lock class ids (the first key of the two-key form).
SCHEMA_LOCK: Final = 2301
COMPILE_LOCK: Final = 2302
#: Seconds a new connection may take (the URL's own ``connect_timeout`` wins).
CONNECT_TIMEOUT_S: Final = 5

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: one row per org (its signing key and its revision counters), policy revisions, org
    #    data, compiled snapshots and the control side's audit records, all keyed by org.
    """
    CREATE TABLE control_orgs(
        org_id text PRIMARY KEY,
        key_id text NOT NULL,
        policy_rev bigint NOT NULL DEFAULT 0,
        org_rev bigint NOT NULL DEFAULT 0,
        snapshot_rev bigint NOT NULL DEFAULT 0,
        event_seq bigint NOT NULL DEFAULT 0,
        start_after bigint NOT NULL DEFAULT 0
    );
    CREATE TABLE control_policy_revisions(
        org_id text NOT NULL REFERENCES control_orgs(org_id),
        revision bigint NOT NULL CHECK (revision > 0),
        content_hash text NOT NULL,
        body bytea NOT NULL,
        saved_at text NOT NULL,
        PRIMARY KEY (org_id, revision)
    );
    CREATE TABLE control_org_data(
        org_id text NOT NULL REFERENCES control_orgs(org_id),
        revision bigint NOT NULL CHECK (revision > 0),
        content_hash text NOT NULL,
        body bytea NOT NULL,
        saved_at text NOT NULL,
        PRIMARY KEY (org_id, revision)
    );
    CREATE TABLE control_snapshots(
        org_id text NOT NULL REFERENCES control_orgs(org_id),
        revision bigint NOT NULL CHECK (revision > 0),
        ruleset_rev text NOT NULL,
        content_hash text NOT NULL,
        compiled_at text NOT NULL,
        policy_revision bigint NOT NULL,
        org_revision bigint NOT NULL,
        envelope bytea NOT NULL,
        PRIMARY KEY (org_id, revision)
    );
    CREATE TABLE control_events(
        org_id text NOT NULL REFERENCES control_orgs(org_id),
        seq bigint NOT NULL CHECK (seq > 0),
        at text NOT NULL,
        kind text NOT NULL,
        revision bigint NOT NULL,
        content_hash text NOT NULL,
        PRIMARY KEY (org_id, seq)
    );
    """,
    # 2: the audited record of every policy write, one per policy revision, in the
    #    transaction that stores the revision: its payload is the canonical JSON the SQLite
    #    store appends to the home's audit chain (``core.routing.edits.PolicyMutation``).
    """
    CREATE TABLE control_policy_mutations(
        org_id text NOT NULL,
        revision bigint NOT NULL CHECK (revision > 0),
        recorded_at text NOT NULL,
        actor text NOT NULL,
        payload bytea NOT NULL,
        PRIMARY KEY (org_id, revision),
        FOREIGN KEY (org_id, revision) REFERENCES control_policy_revisions(org_id, revision)
    );
    """,
)


def driver() -> Any:
    """The ``psycopg`` module.

    Raises:
        DriverMissingError: psycopg 3 is not installed (the message says how to install it).
    """
    try:
        return importlib.import_module("psycopg")
    except ImportError as e:
        raise DriverMissingError(
            "a postgresql:// store needs psycopg 3, which is not installed: "
            "pip install 'rensei-routing[postgres]'"
        ) from e


def describe(url: str) -> str:
    """``postgresql://user@host:port/dbname`` of ``url``: the database, never its password."""
    try:
        params = driver().conninfo.conninfo_to_dict(url)
    except DriverMissingError:
        raise
    except Exception:  # psycopg.ProgrammingError: an unparseable URL (named without it)
        return "postgresql://<unparseable URL>"
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname') or ''}"


def pg_error(what: str, error: BaseException, where: str) -> StoreError:
    """The typed error for a psycopg failure while doing ``what`` on the database ``where``:
    a lost or refused connection is a :class:`DatabaseUnreachableError` (nothing in flight was
    committed); anything else a :class:`StoreError` with PostgreSQL's message."""
    psycopg = driver()
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return DatabaseUnreachableError(
            f"{what}: the control database {where} is unreachable or the connection was lost "
            f"({message}); nothing in flight was committed, unless the connection broke during "
            "the COMMIT itself (look before writing again)"
        )
    return StoreError(f"{what}: {where}: {message}")


def connect(url: str) -> psycopg.Connection[Any]:
    """A new autocommit connection to ``url`` (every transaction is an explicit
    ``conn.transaction()`` block), its schema migrated to :data:`MIGRATIONS`.

    Raises:
        DriverMissingError: psycopg is not installed.
        StoreError: the URL is not a usable connection string.
        DatabaseUnreachableError: the server cannot be reached or refused the connection.
        SchemaVersionError: the database holds a newer schema than this version knows.
    """
    pg = driver()
    where = describe(url)
    try:
        params = pg.conninfo.conninfo_to_dict(url)
    except pg.ProgrammingError as e:
        raise StoreError(f"{where}: not a usable PostgreSQL URL: {e}") from e
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "rensei")
    try:
        conn = pg.connect(**params, autocommit=True)
    except pg.Error as e:
        raise pg_error("cannot connect", e, where) from e
    try:
        _migrate(conn, where)
    except BaseException:
        conn.close()
        raise
    opened: psycopg.Connection[Any] = conn
    return opened


def _migrate(conn: psycopg.Connection[Any], where: str) -> None:
    psycopg = driver()

    def version() -> int | None:
        row = conn.execute("SELECT to_regclass('rensei_control_schema') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            return None
        found = conn.execute("SELECT version FROM rensei_control_schema").fetchone()
        return None if found is None else int(found[0])

    try:
        with conn.transaction():
            current = version()
        if current == len(MIGRATIONS):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SCHEMA_LOCK,))
            current = version()
            if current is None:
                conn.execute("CREATE TABLE rensei_control_schema(version integer NOT NULL)")
                conn.execute("INSERT INTO rensei_control_schema VALUES (0)")
                current = 0
            if current > len(MIGRATIONS):
                raise SchemaVersionError(
                    f"{where} holds control schema version {current}, newer than this "
                    f"version of rensei-routing knows ({len(MIGRATIONS)}): upgrade it"
                )
            for step in MIGRATIONS[current:]:
                conn.execute(step)
            conn.execute("UPDATE rensei_control_schema SET version = %s", (len(MIGRATIONS),))
    except psycopg.Error as e:
        raise pg_error("cannot prepare the control schema", e, where) from e
