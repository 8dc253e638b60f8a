"""How a connection waits for a lock another connection holds: SQLite's own schedule of
retries until the busy timeout, each pause a :func:`time.sleep`, which lets go of the
interpreter lock.

SQLite's built-in handler (``sqlite3_busy_timeout``) sleeps in C, and apsw makes some calls
without releasing the interpreter lock (``with conn:`` begins its transaction that way). A thread
of this process holding the write lock on another connection then cannot run the Python it needs
to commit, and the waiter waits its whole timeout and fails: eight threads appending while one
of them stored an automatic checkpoint stalled their process 30 s at a time. With this handler
the waiter sleeps with the interpreter lock released, and the holder finishes. The handler runs
only when a lock is busy: an uncontended statement never calls it. A Ctrl-C during a wait ends
it at once (SQLite's own wait held it off until the timeout); :func:`.db.store_error` raises it
again where apsw reports it as a busy error.
"""

from __future__ import annotations

import time
import weakref
from typing import Final

import apsw

__all__ = ["busy_timeout_ms", "wait_patiently"]

#: SQLite's default busy handler's pauses before each retry, in milliseconds (the last one
#: repeats), and how long it has waited before each.
PAUSES_MS: Final = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)
_WAITED_MS: Final = tuple(sum(PAUSES_MS[:i]) for i in range(len(PAUSES_MS)))
#: Each connection's busy timeout (read back by :func:`busy_timeout_ms`).
_TIMEOUTS: weakref.WeakKeyDictionary[apsw.Connection, int] = weakref.WeakKeyDictionary()


class Patience:
    """A busy handler: retry after SQLite's pauses until ``timeout_ms`` has passed (the last
    pause cut to end there), sleeping with the interpreter lock released."""

    __slots__ = ("timeout_ms",)

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms

    def __call__(self, count: int) -> bool:
        if count < len(PAUSES_MS):
            pause, waited = PAUSES_MS[count], _WAITED_MS[count]
        else:
            pause = PAUSES_MS[-1]
            waited = _WAITED_MS[-1] + pause * (count - len(PAUSES_MS) + 1)
        pause = min(pause, self.timeout_ms - waited)
        if pause <= 0:
            return False
        time.sleep(pause / 1000)
        return True


def wait_patiently(conn: apsw.Connection, timeout_ms: int) -> None:
    """Make ``conn`` wait up to ``timeout_ms`` for a lock, as :class:`Patience` waits."""
    conn.set_busy_handler(Patience(timeout_ms))
    _TIMEOUTS[conn] = timeout_ms


def busy_timeout_ms(conn: apsw.Connection) -> int:
    """How long ``conn`` waits for a lock, in ms (0: not set by :func:`wait_patiently`)."""
    return _TIMEOUTS.get(conn, 0)
