"""Who holds a lock on a database: the hint a busy-timeout error carries. Owns reading the
operating system's lock table; must not open the database or change anything.

SQLite cannot say which process holds a lock, but Linux can: ``/proc/locks`` lists every POSIX
lock with its process id, file inode and byte range, and SQLite's lock bytes say what the holder
is doing (the WAL write lock, a checkpoint, WAL recovery, or an exclusive lock on the database
file while the last connection closes it). Elsewhere, or when the table cannot be read, the hint
is empty and the error says only what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["LockHolder", "describe_holders", "lock_holders", "parse_proc_locks"]

_PROC_LOCKS: Final = Path("/proc/locks")

#: Byte offsets SQLite locks in the ``-shm`` file (os_unix.c: WAL_WRITE_LOCK and friends).
_SHM_ROLES: Final = {
    120: "a writer (write transaction)",
    121: "a WAL checkpoint",
    122: "WAL recovery",
}
#: The database file's PENDING byte; a write lock at or above it is an exclusive lock.
_PENDING_BYTE: Final = 0x40000000


@dataclass(frozen=True, slots=True, kw_only=True)
class LockHolder:
    """One process holding a write lock that blocks others, and what that lock means."""

    pid: int
    role: str
    command: str

    def describe(self) -> str:
        """``pid 123 (rensei audit checkpoint): a WAL checkpoint``."""
        what = f" ({self.command})" if self.command else ""
        return f"pid {self.pid}{what}: {self.role}"


def parse_proc_locks(text: str, inodes: dict[int, str]) -> list[tuple[int, str, int]]:
    """``(pid, file kind, start offset)`` of every granted POSIX write lock on one of ``inodes``
    (inode -> ``"db"`` or ``"shm"``), in the order listed. Pure: takes the table's text."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->" or fields[1] != "POSIX" or fields[3] != "WRITE":
            continue
        try:
            pid = int(fields[4])
            inode = int(fields[5].rsplit(":", 1)[1])
            start = int(fields[6])
        except (ValueError, IndexError):
            continue
        if inode in inodes:
            out.append((pid, inodes[inode], start))
    return out


def _role(kind: str, start: int) -> str | None:
    if kind == "shm":
        return _SHM_ROLES.get(start)
    if start >= _PENDING_BYTE:
        return "an exclusive lock on the database file (a connection closing it, or a writer)"
    return None


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    args = [" ".join(a.decode("utf-8", "replace").split()) for a in raw.split(b"\0") if a]
    # ``python .../rensei audit verify`` -> ``rensei audit verify``
    for i, arg in enumerate(args):
        if os.path.basename(arg) == "rensei":
            args = ["rensei", *args[i + 1 : i + 4]]
            break
    text = " ".join(args[:4])
    return text if len(text) <= 80 else text[:77] + "..."


def lock_holders(db_path: Path) -> list[LockHolder]:
    """The processes holding a blocking lock on ``db_path`` or its ``-shm`` file (Linux only;
    empty when the lock table cannot be read)."""
    inodes: dict[int, str] = {}
    for kind, path in (("db", Path(db_path)), ("shm", Path(f"{db_path}-shm"))):
        try:
            inodes[os.stat(path).st_ino] = kind
        except OSError:
            continue
    try:
        table = _PROC_LOCKS.read_text("ascii", "replace")
    except OSError:
        return []
    seen: dict[int, LockHolder] = {}
    for pid, kind, start in parse_proc_locks(table, inodes):
        role = _role(kind, start)
        if role is not None and pid not in seen:
            seen[pid] = LockHolder(pid=pid, role=role, command=_command(pid))
    return list(seen.values())


def describe_holders(db_path: Path) -> str:
    """``"; held by pid 123 (...): ..."`` for the error message, or ``""`` if nobody can tell."""
    holders = lock_holders(db_path)
    if not holders:
        return ""
    return "; held by " + ", ".join(h.describe() for h in holders)
