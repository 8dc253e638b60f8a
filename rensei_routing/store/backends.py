"""Which control store a home uses, opened: :class:`~.control.SqliteControlStore` over the
home's database, or :class:`~.postgres.PgControlStore` when the home's ``config.toml`` names a
PostgreSQL ``[store] url``; and attaching a PostgreSQL database to a home (``init --store``).

This module sits above both implementations of :class:`~.control.ControlStore` (the interface
they share lives in :mod:`.control`), so the two never import each other's module. psycopg is
still imported only when a PostgreSQL store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import HomeError
from .control import ControlStore, SqliteControlStore
from .home import Home

if TYPE_CHECKING:
    from .audit import AuditLog

__all__ = ["attach_postgres", "is_postgres_url", "open_control_store", "open_postgres"]


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(("postgresql://", "postgres://"))


def open_control_store(
    home: Home,
    *,
    write: bool = False,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> ControlStore:
    """The control store ``home`` is configured for: PostgreSQL when ``[store] url`` names one,
    else the home's SQLite database (whose policy writes append their mutation records to the
    home's audit log, redacted with ``redactor``). The caller closes it.

    Raises:
        HomeError: the home is not initialised or its config is unusable.
        StoreError (``PostgresError`` and its kinds): the database cannot be reached or used.
    """
    info = home.info()
    url = home.store_url()
    if url is not None:
        return open_postgres(home, url, vocabulary=vocabulary)
    return SqliteControlStore(
        home.connect(write=write),
        org_id=info.org,
        vocabulary=vocabulary,
        audit=lambda: _audit_log(home, redactor),
    )


def _audit_log(home: Home, redactor: Redactor) -> AuditLog:
    """The home's audit log (imported on a store's first write: reading policies needs none)."""
    from .audit import AuditLog

    return AuditLog.open(home, redactor=redactor)


def open_postgres(
    home: Home, url: str, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> ControlStore:
    """The PostgreSQL control store at ``url`` for ``home``'s org and key (schema migrated,
    org registered), whatever ``home``'s config says.

    Raises:
        DriverMissingError, DatabaseUnreachableError, StoreError, HomeError.
    """
    from .postgres import PgControlStore

    return PgControlStore.connect(
        url, org_id=home.info().org, key_id=home.public_key().key_id, vocabulary=vocabulary
    )


def attach_postgres(home: Home, url: str) -> str:
    """Make ``url`` ``home``'s control database (``init --store``): reached, migrated and the
    org registered first, then ``[store] url`` written; the database named without its
    password is returned. Nothing is written to the config when the database is unusable.

    Raises:
        DriverMissingError, DatabaseUnreachableError, StoreError, HomeError.
    """
    if home.store_url() is None:
        local = SqliteControlStore(home.connect(), org_id=home.info().org)
        try:
            held, mark = local.source_revisions(), local.latest_mark()
        finally:
            local.close()
        if held != (0, 0) or mark is not None:
            raise HomeError(
                f"{home.path} already holds control data in {home.db_path} (policy revision "
                f"{held[0]}, org data revision {held[1]}, snapshot revision "
                f"{0 if mark is None else mark[0]}); a new database starts empty and its hosts "
                "would refuse its lower revisions: init a new home with --store and "
                f"--start-after {0 if mark is None else mark[0]}, then load the data there"
            )
    store = open_postgres(home, url)
    store.close()
    home.set_store_url(url)
    return store.where
