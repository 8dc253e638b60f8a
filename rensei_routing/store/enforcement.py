"""Enforcement state in the home: the canaries (``enforce_canaries``: one row per repository
ever armed: armed or not, the pinned revision and its hash, the gate verdict's seq, the trip
rule, how it ended) and the armed canaries' decisions (``enforce_decisions``: one row per
enforced decision, the trip's window), both written inside the audit append that records the
change (so a row and its record commit together, or neither does); and the **hint file**
``enforce.state``, which lets a seam answer "nothing is armed" without touching the database.

The hint file (16 bytes, changed in place and never replaced, so a reader's map stays live):
byte 0 is 1 when something may be armed; bytes 8..16 are a little-endian change counter. The
database is the truth; the hint may only err towards 1 (a set hint costs the reader one
database read). An arm sets it to 1 (fsynced) inside its write transaction, before its commit;
a disarm or a trip clears it afterwards, in a transaction of its own that holds the write lock
and finds no armed canary, so a committed arm can never leave it at 0.

SQL over connections the caller owns; file I/O on the hint only. Decides nothing.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any, Final

import apsw

from ..core.enforce.bound import Canary
from ..files import create_new
from .db import close_quietly, store_error
from .home import Home

__all__ = [
    "HINT_FILE",
    "HINT_SIZE",
    "armed",
    "canaries",
    "canary",
    "clear_hint_if_idle",
    "end",
    "ensure_hint",
    "map_hint",
    "note_decision",
    "put_armed",
    "read_hint",
    "set_hint",
    "window_counts",
]

HINT_FILE: Final = "enforce.state"
HINT_SIZE: Final = 16
_COUNTER: Final = struct.Struct("<Q")

_COLUMNS: Final = (
    "repo, armed, revision, policy_hash, gate_seq, arm_seq, override, trip_rate, trip_window_s, "
    "armed_at, armed_at_us, actor, tripped, trip_reason, ended_at, ended_seq"
)


def _canary(row: Any) -> Canary:
    return Canary(
        repo=str(row[0]),
        armed=bool(row[1]),
        revision=int(row[2]),
        policy_hash=str(row[3]),
        gate_seq=None if row[4] is None else int(row[4]),
        arm_seq=int(row[5]),
        override=bool(row[6]),
        trip_rate=None if row[7] is None else float(row[7]),
        trip_window_s=None if row[8] is None else int(row[8]),
        armed_at=str(row[9]),
        armed_at_us=int(row[10]),
        actor=str(row[11]),
        tripped=bool(row[12]),
        trip_reason=None if row[13] is None else str(row[13]),
        ended_at=None if row[14] is None else str(row[14]),
        ended_seq=None if row[15] is None else int(row[15]),
    )


# -- canaries -------------------------------------------------------------------------------------


def armed(conn: apsw.Connection) -> dict[str, Canary]:
    """The armed canaries by repository."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM enforce_canaries WHERE armed = 1").fetchall()
    return {str(r[0]): _canary(r) for r in rows}


def canaries(conn: apsw.Connection) -> list[Canary]:
    """Every canary ever armed, by repository."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM enforce_canaries ORDER BY repo").fetchall()
    return [_canary(r) for r in rows]


def canary(conn: apsw.Connection, repo: str) -> Canary | None:
    """The canary of ``repo`` (armed or not), or ``None`` when it was never armed."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM enforce_canaries WHERE repo = ?", (repo,)
    ).fetchone()
    return None if row is None else _canary(row)


def put_armed(conn: apsw.Connection, c: Canary) -> None:
    """Store ``c`` as its repository's armed canary (replacing any earlier row), and start its
    trip window afresh. Inside the caller's write transaction."""
    conn.execute(
        f"INSERT OR REPLACE INTO enforce_canaries({_COLUMNS}) "
        "VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, NULL)",
        (
            c.repo,
            c.revision,
            c.policy_hash,
            c.gate_seq,
            c.arm_seq,
            int(c.override),
            c.trip_rate,
            c.trip_window_s,
            c.armed_at,
            c.armed_at_us,
            c.actor,
        ),
    )
    conn.execute("DELETE FROM enforce_decisions WHERE repo = ?", (c.repo,))


def end(
    conn: apsw.Connection, repo: str, *, at: str, seq: int, trip_reason: str | None = None
) -> None:
    """Disarm ``repo``'s canary (tripped when ``trip_reason`` is given), recording when and the
    seq of the record that says so. Inside the caller's write transaction."""
    conn.execute(
        "UPDATE enforce_canaries SET armed = 0, tripped = ?, trip_reason = ?, ended_at = ?, "
        "ended_seq = ? WHERE repo = ?",
        (int(trip_reason is not None), trip_reason, at, seq, repo),
    )
    conn.execute("DELETE FROM enforce_decisions WHERE repo = ?", (repo,))


# -- the trip window ------------------------------------------------------------------------------


def note_decision(
    conn: apsw.Connection,
    repo: str,
    seq: int,
    at_us: int,
    refused: bool,
    keep_since_us: int | None,
    *,
    arm_seq: int,
) -> bool:
    """Count one enforced decision of ``repo`` (the record at ``seq``) if its canary is still
    armed by the arm at ``arm_seq``, and then, unless ``keep_since_us`` is ``None``, forget the
    ones before it (outside any window still asked about; rows left there are never counted:
    :func:`window_counts` reads only a window). Returns whether it was counted (``False``: the
    canary was disarmed or re-armed, nothing written). Inside the append's write transaction."""
    conn.execute(
        "INSERT INTO enforce_decisions(seq, repo, at_us, refused) SELECT ?, ?, ?, ? "
        "WHERE EXISTS (SELECT 1 FROM enforce_canaries WHERE repo = ? AND armed = 1 "
        "AND arm_seq = ?)",
        (seq, repo, at_us, int(refused), repo, arm_seq),
    )
    if not conn.changes():
        return False
    if keep_since_us is not None:
        conn.execute(
            "DELETE FROM enforce_decisions WHERE repo = ? AND at_us < ?", (repo, keep_since_us)
        )
    return True


def window_counts(conn: apsw.Connection, repo: str, since_us: int) -> tuple[int, int]:
    """``(decisions, refusals)`` of ``repo``'s canary at or after ``since_us``."""
    row = conn.execute(
        "SELECT count(*), coalesce(sum(refused), 0) FROM enforce_decisions "
        "WHERE repo = ? AND at_us >= ?",
        (repo, since_us),
    ).fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


# -- the hint file --------------------------------------------------------------------------------


def _hint_path(home: Home) -> Path:
    return home.path / HINT_FILE


def ensure_hint(home: Home, *, initial: bool) -> Path:
    """The hint file, created (whole, with hint ``initial``) when missing: written to a temporary
    file and linked into place, which never replaces one another process created meanwhile.

    Raises:
        OSError: the home cannot be written.
    """
    path = _hint_path(home)
    if path.exists():
        return path
    create_new(path, bytes([1 if initial else 0]) + bytes(HINT_SIZE - 1), mode=0o644)
    return path


def read_hint(home: Home) -> tuple[bool, int]:
    """``(something may be armed, change counter)`` as the file holds them; ``(False, 0)`` when
    there is no hint file (nothing was ever armed in this home)."""
    try:
        data = _hint_path(home).read_bytes()
    except FileNotFoundError:
        return False, 0
    if len(data) < HINT_SIZE:
        return True, 0  # a file nobody wrote whole: assume armed, the database decides
    return bool(data[0]), _COUNTER.unpack_from(data, 8)[0]


def set_hint(home: Home, value: bool, *, durable: bool) -> None:
    """Write the hint in place and bump the change counter (``durable``: fsync it first)."""
    path = ensure_hint(home, initial=value)
    fd = os.open(path, os.O_RDWR)
    try:
        raw = os.pread(fd, HINT_SIZE, 0).ljust(HINT_SIZE, b"\0")
        counter = (_COUNTER.unpack_from(raw, 8)[0] + 1) % 2**64
        os.pwrite(fd, bytes([1 if value else 0]) + raw[1:8] + _COUNTER.pack(counter), 0)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def map_hint(home: Home, *, armed_now: bool) -> mmap.mmap:
    """A read-only map of the hint file (created with ``armed_now`` when missing): byte 0 is
    read at every call and follows every later write, by this process or another.

    Raises:
        OSError: the file cannot be created or mapped.
    """
    path = ensure_hint(home, initial=armed_now)
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), HINT_SIZE, access=mmap.ACCESS_READ)


def clear_hint_if_idle(home: Home) -> bool:
    """Clear the hint when no canary is armed, deciding under the home's write lock (so no arm
    can commit between the check and the write); returns whether it was cleared.

    Raises:
        HomeError, StoreError: the database cannot be used (the hint stays as it was).
    """
    conn = home.connect(write=True)
    try:
        with conn:
            row = conn.execute("SELECT 1 FROM enforce_canaries WHERE armed = 1 LIMIT 1").fetchone()
            if row is not None:
                return False
            set_hint(home, False, durable=False)
            return True
    except apsw.Error as e:
        raise store_error("cannot read the enforcement state", e, home.db_path) from e
    finally:
        close_quietly(conn)
    return False  # unreachable: for the type checker
