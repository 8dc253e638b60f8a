"""apsw's best-practice per-connection settings (``apsw.bestpractice.recommended``), made here
as that module makes them: importing it imports :mod:`apsw.ext` and its dependencies
(``fractions``, ``decimal``, ``tempfile``, ...), the largest single import a short command made.
:data:`BEST_PRACTICE` names each setting's apsw counterpart, and tests hold names, order,
statements and switches equal to apsw's, so a change in apsw shows up as a failing test. Which
connection gets which setting is :mod:`.db`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import apsw

__all__ = [
    "BEST_PRACTICE",
    "foreign_keys",
    "no_double_quoted_strings",
    "optimize",
    "recursive_triggers",
    "wal",
]


def wal(conn: apsw.Connection) -> None:
    """Write-ahead logging (``connection_wal``): a writable main database only."""
    try:
        if not conn.readonly("main"):
            conn.pragma("journal_mode", "wal")
    except apsw.ReadOnlyError:  # the journal or WAL may still be read-only
        pass


def foreign_keys(conn: apsw.Connection) -> None:
    """Foreign key constraints enforced (``connection_enable_foreign_keys``)."""
    conn.pragma("foreign_keys", "ON")


def no_double_quoted_strings(conn: apsw.Connection) -> None:
    """Double quotes name identifiers only, never strings, in DML and DDL (``connection_dqs``)."""
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)


def optimize(conn: apsw.Connection) -> None:
    """The query planner records where statistics would help (``connection_optimize``): a
    writable main database only."""
    try:
        if not conn.readonly("main"):
            conn.pragma("optimize", 0x10002)
    except apsw.ReadOnlyError:  # the journal or WAL may still be read-only
        pass


def recursive_triggers(conn: apsw.Connection) -> None:
    """Recursive triggers on (``connection_recursive_triggers``)."""
    conn.pragma("recursive_triggers", "ON")


#: Each ``connection_*`` setting of ``apsw.bestpractice.recommended`` but its busy timeout (ours
#: is the home's, set before any statement by :func:`.db._connection`), in apsw's order, and the
#: function here that makes it.
BEST_PRACTICE: Final[dict[str, Callable[[apsw.Connection], None]]] = {
    "connection_wal": wal,
    "connection_enable_foreign_keys": foreign_keys,
    "connection_dqs": no_double_quoted_strings,
    "connection_optimize": optimize,
    "connection_recursive_triggers": recursive_triggers,
}
