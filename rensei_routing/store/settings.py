"""The home's configuration switches: a few ``setting.<name>`` rows in the ``meta`` table.

Adapter: reads and writes those rows and nothing else; it decides no defaults (callers do) and
never prints. A switch that was never set reads as ``None``.
"""

from __future__ import annotations

from typing import Final

import apsw

from ..errors import MalformedError, StoreError

__all__ = [
    "QUICKSTART_CANDIDATE",
    "QUICKSTART_ID",
    "SHADOW_ENABLED",
    "SNAPSHOT_KEY_ID",
    "START_AFTER",
    "read_flag",
    "read_text",
    "write_flag",
    "write_text",
]

_PREFIX: Final = "setting."
#: Shadow recording's kill switch (document 001, Consequences); unset means on.
SHADOW_ENABLED: Final = "shadow_enabled"
#: The random id ``rensei quickstart`` gave the home it made (also in its marker file).
QUICKSTART_ID: Final = "quickstart_id"
#: The candidate policy file ``rensei quickstart`` evaluated in its what-if (JSON: the file's
#: name and its policies), so the console's what-if page can offer it.
QUICKSTART_CANDIDATE: Final = "quickstart_candidate"
#: The snapshot revision a control home's first snapshot follows (``init --start-after``).
START_AFTER: Final = "snapshot_start_after"
#: The key id this home's snapshots carry as ``signingKeyId`` (``init --key-id``; unset: the
#: key's derived id).
SNAPSHOT_KEY_ID: Final = "snapshot_key_id"
_TRUE: Final = "true"
_FALSE: Final = "false"


def read_flag(conn: apsw.Connection, name: str) -> bool | None:
    """The stored value of switch ``name``, or ``None`` when it was never set.

    Raises:
        MalformedError: the stored value is neither ``true`` nor ``false`` (a hand edit).
        StoreError: the database cannot be read.
    """
    value = read_text(conn, name)
    if value is None:
        return None
    if value not in (_TRUE, _FALSE):
        raise MalformedError(f"setting {name}", f"expected true or false, got {value!r}")
    return value == _TRUE


def write_flag(conn: apsw.Connection, name: str, value: bool) -> None:
    """Store switch ``name`` (a writer connection; one transaction).

    Raises:
        StoreError: the database cannot be written.
    """
    write_text(conn, name, _TRUE if value else _FALSE)


def read_text(conn: apsw.Connection, name: str) -> str | None:
    """The stored text of setting ``name``, or ``None`` when it was never set.

    Raises:
        StoreError: the database cannot be read.
    """
    try:
        value = conn.execute("SELECT value FROM meta WHERE key = ?", (_PREFIX + name,)).fetchone()
    except apsw.Error as e:
        raise StoreError(f"cannot read setting {name}: {e}") from e
    return None if value is None else str(value[0])


def write_text(conn: apsw.Connection, name: str, value: str) -> None:
    """Store setting ``name`` as ``value`` (a writer connection; one transaction).

    Raises:
        StoreError: the database cannot be written.
    """
    try:
        with conn:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (_PREFIX + name, value),
            )
    except apsw.Error as e:
        raise StoreError(f"cannot write setting {name}: {e}") from e
