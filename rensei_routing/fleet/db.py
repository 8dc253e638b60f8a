"""The fleet database: connecting to PostgreSQL (psycopg 3, imported only here and only when a
fleet command runs) and its schema. Owns the ``fleet_*`` tables; must not hold the ingest or
report rules (:mod:`.ingest`, :mod:`.report`).

Tables (created on first use, in one transaction under an advisory lock, so concurrent first
ingests create them once; ``fleet_schema`` holds the version):

* ``fleet_hosts``: one row per trusted host: its id, its Ed25519 public key, and what was
  ingested from it (``size`` = records held, the next seq; ``head_hash``; the head's
  ``recorded_at``; the last ingest; the org of its checkpoints; the latest snapshot and policy
  revision its records cite; the seq of a fork, once one was seen; the latest checkpoint of the
  tree-root form ingested, whose successors must come with a consistency proof, see
  :mod:`.consistency`).
* ``fleet_records``: every ingested record, ``(host_id, seq)`` unique, its chain fields as the
  host stored them and its payload as ``jsonb``; the report's facts (record type, seam, repo,
  role, mechanism, transport, outcome, divergence, agreed, the revisions cited) are stored
  generated columns, computed by PostgreSQL from the payload as a row is written. The payload
  is kept out of line (``STORAGE EXTERNAL``), so a report reads narrow rows.
* ``fleet_agreement``: the shadow report's counts per host, repo, role, mechanism and seam,
  added to by each ingest from the records it loaded (in its transaction), so the report sums
  a few rows per group instead of scanning every record. Records leave it with the records: a
  trigger on ``fleet_records`` subtracts the records any ``DELETE`` removes (and a
  ``TRUNCATE`` empties it), in the deleting statement's transaction, so its figures are those
  of the records held however records are removed (``rensei fleet repair``, or SQL).
* ``fleet_ingests``: one row per file ingested (what it added). ``fleet_alarms``: one row per
  refused fork (kind ``fork``: host, seq, file, detail) and per repair (kind ``repair``).

Version 2 added the trigger; a version-1 database is upgraded on first use (in the same
transaction and lock): the trigger is created and ``fleet_agreement`` rebuilt from the records
held, which also corrects counts left behind by a repair done in SQL before it. Version 3 added
``fleet_hosts.checkpoint`` (empty for every host of an upgraded database: the next tree-root
checkpoint ingested is taken as the first, checked by the chain alone).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

from ..core.shadow.compare import DIVERGENCES
from ..core.shadow.report import NO_VALUE
from ..errors import FleetStoreError, InputError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "AGREEMENT_COUNTS",
    "AGREEMENT_KEYS",
    "INSTALL_HINT",
    "SCHEMA_VERSION",
    "agreement_groups",
    "connect",
    "display_url",
    "ensure_schema",
]

INSTALL_HINT: Final = "pip install 'rensei-routing[postgres]'"
SCHEMA_VERSION: Final = 3
_CONNECT_TIMEOUT_S: Final = 10
#: A fixed advisory-lock key: the schema is created by one session at a time.
_SCHEMA_LOCK: Final = 0x7265_6E73_6569_0001

_SHADOW: Final = "payload->>'record_type' = 'shadow-decision'"
_RULESET_REV: Final = "COALESCE(payload->>'rulesetRev', payload#>>'{proposed,rulesetRev}')"
_POLICY_REV: Final = "COALESCE(payload->>'policy_revision', payload#>>'{proposed,policy_revision}')"


#: The per-kind columns of ``fleet_agreement`` (divergence kinds, then direct-HTTP, held,
#: rejected), in the order of the core's shadow report.
AGREEMENT_COUNTS: Final = (
    *(f"divergence_{k.replace('-', '_')}" for k in DIVERGENCES),
    "direct_http",
    "held",
    "rejected",
)


#: The key columns of ``fleet_agreement``, and all its count columns.
AGREEMENT_KEYS: Final = ("host_id", "repo", "role", "mechanism", "seam")
_COUNTS: Final = ("spawns", "agreed", *AGREEMENT_COUNTS)


def agreement_groups(source: str, where: str = "TRUE") -> str:
    """A ``SELECT`` of ``fleet_agreement`` rows (its columns, in order) counting the native
    shadow records of ``source`` (``fleet_records`` or a trigger's transition table) that
    satisfy ``where``: the one definition of what a row of counts holds."""
    return (
        f"SELECT host_id, COALESCE(repo, '{NO_VALUE}') AS repo, "
        f"COALESCE(NULLIF(role, ''), '{NO_VALUE}') AS role, "
        f"COALESCE(mechanism, '{NO_VALUE}') AS mechanism, COALESCE(seam, '{NO_VALUE}') AS seam, "
        "count(*) AS spawns, count(*) FILTER (WHERE agreed) AS agreed, "
        + ", ".join(
            f"count(*) FILTER (WHERE divergence = '{k}') AS divergence_{k.replace('-', '_')}"
            for k in DIVERGENCES
        )
        + ", count(*) FILTER (WHERE transport = 'direct-http') AS direct_http, "
        "count(*) FILTER (WHERE outcome = 'held') AS held, "
        "count(*) FILTER (WHERE outcome = 'rejected') AS rejected "
        f"FROM {source} WHERE record_type = 'shadow-decision' AND ({where}) "
        "GROUP BY 1, 2, 3, 4, 5"
    )


def _shadow_fact(expr: str) -> str:
    return f"CASE WHEN {_SHADOW} THEN {expr} END"


#: A shadow record's deciding mechanism: its ``actual`` route's, or, when the record stores that
#: route as its provider and transport only, its context's legacy route's (no mechanism there
#: is ``unclassified``), as ``core.shadow.compare.stored_actual`` reads it.
_MECHANISM: Final = (
    "CASE WHEN payload->'actual' ? 'provider_binding' THEN payload#>>'{actual,mechanism}' "
    "WHEN jsonb_typeof(payload#>'{proposed,explanation,context,legacy_route}') = 'object' "
    "THEN COALESCE(payload#>>'{proposed,explanation,context,legacy_route,mechanism}', "
    "'unclassified') END"
)


#: Records removed from ``fleet_records`` leave ``fleet_agreement`` in the same statement.
_FORGET: Final = (
    """CREATE FUNCTION fleet_agreement_forget() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        UPDATE fleet_agreement AS a SET """
    + ", ".join(f"{c} = a.{c} - g.{c}" for c in _COUNTS)
    + f" FROM ({agreement_groups('gone')}) AS g WHERE "
    + " AND ".join(f"a.{k} = g.{k}" for k in AGREEMENT_KEYS)
    + """;
        DELETE FROM fleet_agreement AS a
        WHERE a.spawns <= 0 AND a.host_id IN (SELECT DISTINCT host_id FROM gone);
        RETURN NULL;
    END
    $body$""",
    """CREATE TRIGGER fleet_records_forget AFTER DELETE ON fleet_records
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
        EXECUTE FUNCTION fleet_agreement_forget()""",
    """CREATE FUNCTION fleet_agreement_clear() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        DELETE FROM fleet_agreement;
        RETURN NULL;
    END
    $body$""",
    """CREATE TRIGGER fleet_records_clear AFTER TRUNCATE ON fleet_records
        FOR EACH STATEMENT EXECUTE FUNCTION fleet_agreement_clear()""",
)
#: Version 1 -> 2: the trigger, and the counts rebuilt from the records held.
_UPGRADE_FROM_1: Final = (
    *_FORGET,
    "DELETE FROM fleet_agreement",
    f"INSERT INTO fleet_agreement ({', '.join(AGREEMENT_KEYS)}, {', '.join(_COUNTS)}) "
    + agreement_groups("fleet_records"),
    "UPDATE fleet_schema SET version = 2",
)
#: Version 2 -> 3: the checkpoint held per host; the mechanism of a shadow record that stores
#: its route briefly read from its context; the counts rebuilt from the records held.
_UPGRADE_FROM_2: Final = (
    "ALTER TABLE fleet_hosts ADD COLUMN IF NOT EXISTS checkpoint text",
    "ALTER TABLE fleet_records DROP COLUMN mechanism",
    f"ALTER TABLE fleet_records ADD COLUMN mechanism text GENERATED ALWAYS AS "
    f"({_shadow_fact(_MECHANISM)}) STORED",
    "DELETE FROM fleet_agreement",
    f"INSERT INTO fleet_agreement ({', '.join(AGREEMENT_KEYS)}, {', '.join(_COUNTS)}) "
    + agreement_groups("fleet_records"),
    "UPDATE fleet_schema SET version = 3",
)
_UPGRADES: Final = {1: _UPGRADE_FROM_1, 2: _UPGRADE_FROM_2}


_SCHEMA: Final = (
    """CREATE TABLE fleet_schema (version integer NOT NULL)""",
    """CREATE TABLE fleet_hosts (
        host_id text PRIMARY KEY,
        public_key text NOT NULL UNIQUE,
        trusted_at timestamptz NOT NULL DEFAULT now(),
        org text,
        size bigint NOT NULL DEFAULT 0,
        head_hash text NOT NULL,
        head_recorded_at timestamptz,
        last_ingest_at timestamptz,
        ruleset_rev text,
        snapshot_revision bigint,
        policy_revision bigint,
        forked_seq bigint,
        forked_at timestamptz,
        checkpoint text
    )""",
    f"""CREATE TABLE fleet_records (
        host_id text NOT NULL,
        seq bigint NOT NULL,
        recorded_at text NOT NULL,
        prev_hash text NOT NULL,
        payload_hash text NOT NULL,
        record_hash text NOT NULL,
        payload jsonb NOT NULL,
        record_type text GENERATED ALWAYS AS (payload->>'record_type') STORED,
        seam text GENERATED ALWAYS AS ({_shadow_fact("payload->>'seam'")}) STORED,
        repo text GENERATED ALWAYS AS
            ({_shadow_fact("payload#>>'{proposed,explanation,context,repo,value}'")}) STORED,
        role text GENERATED ALWAYS AS
            ({_shadow_fact("payload#>>'{proposed,explanation,context,role}'")}) STORED,
        mechanism text GENERATED ALWAYS AS ({_shadow_fact(_MECHANISM)}) STORED,
        transport text GENERATED ALWAYS AS
            ({_shadow_fact("payload#>>'{actual,transport}'")}) STORED,
        outcome text GENERATED ALWAYS AS
            ({_shadow_fact("payload#>>'{proposed,outcome}'")}) STORED,
        divergence text GENERATED ALWAYS AS ({_shadow_fact("payload->>'divergence'")}) STORED,
        agreed boolean GENERATED ALWAYS AS
            ({_shadow_fact("payload->'agreed' = 'true'::jsonb")}) STORED,
        ruleset_rev text GENERATED ALWAYS AS ({_RULESET_REV}) STORED,
        policy_revision bigint GENERATED ALWAYS AS (CASE WHEN {_POLICY_REV} ~ '^[0-9]{{1,18}}$'
            THEN ({_POLICY_REV})::bigint END) STORED,
        PRIMARY KEY (host_id, seq)
    )""",
    "ALTER TABLE fleet_records ALTER COLUMN payload SET STORAGE EXTERNAL",
    f"""CREATE TABLE fleet_agreement (
        host_id text NOT NULL,
        repo text NOT NULL,
        role text NOT NULL,
        mechanism text NOT NULL,
        seam text NOT NULL,
        spawns bigint NOT NULL,
        agreed bigint NOT NULL,
        {", ".join(f"{c} bigint NOT NULL" for c in AGREEMENT_COUNTS)},
        PRIMARY KEY (host_id, repo, role, mechanism, seam)
    )""",
    """CREATE TABLE fleet_ingests (
        id bigserial PRIMARY KEY,
        host_id text NOT NULL,
        file text NOT NULL,
        first_seq bigint NOT NULL,
        added bigint NOT NULL,
        checkpoint_size bigint NOT NULL,
        head_hash text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE fleet_alarms (
        id bigserial PRIMARY KEY,
        host_id text NOT NULL,
        kind text NOT NULL,
        seq bigint,
        file text NOT NULL,
        detail text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    )""",
    *_FORGET,
)

_SCHEME = re.compile(r"postgres(ql)?://", re.I)


def display_url(url: str) -> str:
    """``url`` without its password (what every message names)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rpartition("@")
        user = (parts.username or "") + ":***"
        return urlunsplit(parts._replace(netloc=f"{user}@{netloc[2]}"))
    except ValueError:
        return "(unparseable URL)"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as e:
        raise FleetStoreError(
            f"the fleet store needs PostgreSQL support (psycopg 3): {INSTALL_HINT}"
        ) from e
    return psycopg


def connect(url: str, *, read_only: bool = False) -> psycopg.Connection[Any]:
    """An autocommit connection to the fleet database at ``url`` (``postgresql://...``), its
    schema ensured (every multi-statement change runs in ``conn.transaction()``); with
    ``read_only`` (the console), the schema is not touched and every transaction of the session
    is read-only (``default_transaction_read_only``), so nothing can be written through it.

    Raises:
        InputError: ``url`` is not a PostgreSQL URL.
        FleetStoreError: psycopg is not installed, the database cannot be reached, or it holds a
            fleet schema of another version (the message names the database).
    """
    if not _SCHEME.match(url):
        raise InputError(f"not a PostgreSQL URL (postgresql://...): {display_url(url)!r}")
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url, connect_timeout=_CONNECT_TIMEOUT_S, autocommit=True)
    except (psycopg.Error, ValueError) as e:
        raise FleetStoreError(
            f"cannot connect to the fleet database {display_url(url)}: {_first_line(e)}"
        ) from e
    try:
        if read_only:
            conn.execute("SET default_transaction_read_only = on")
        else:
            ensure_schema(conn, url)
    except psycopg.Error as e:
        conn.close()
        raise store_error(f"cannot use the fleet database {display_url(url)}", e) from e
    except BaseException:
        conn.close()
        raise
    return conn  # type: ignore[no-any-return]


def ensure_schema(conn: psycopg.Connection[Any], url: str = "") -> None:
    """Create the fleet tables when the database has none (one transaction, under an advisory
    lock); upgrade a database of an earlier version (the same transaction); refuse any other.

    Raises:
        FleetStoreError: a statement failed, or the schema version is not ours.
    """
    psycopg = _psycopg()
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            exists = conn.execute("SELECT to_regclass('fleet_schema') IS NOT NULL").fetchone()
            if exists and exists[0]:
                row = conn.execute("SELECT max(version) FROM fleet_schema").fetchone()
                version = None if row is None else row[0]
                while version in _UPGRADES:
                    for statement in _UPGRADES[version]:
                        conn.execute(statement)
                    version += 1
                if version != SCHEMA_VERSION:
                    raise FleetStoreError(
                        f"the fleet database {display_url(url)} has schema version {version}; "
                        f"this release reads version {SCHEMA_VERSION}"
                    )
                return
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO fleet_schema(version) VALUES (%s)", (SCHEMA_VERSION,))
    except psycopg.Error as e:
        raise store_error(f"cannot prepare the fleet database {display_url(url)}", e) from e


def store_error(what: str, error: BaseException) -> FleetStoreError:
    """A :class:`FleetStoreError` of ``what``, with the database's first line of the reason."""
    return FleetStoreError(f"{what}: {_first_line(error)}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
