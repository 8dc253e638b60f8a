"""Group commit: the appends of one process to one database file share write transactions.
Owns the per-process queue of each database file and the write transaction that links and
inserts the records; the checks before it and the work after it (timestamps, encoding, the
automatic checkpoint, the rotation) stay :class:`.log.AuditLog`'s.

Every append of a process (whatever :class:`.log.AuditLog` object it goes through, in whatever
thread) becomes a :class:`Job` handed to the :class:`Committer` of its database file (keyed by
the file's resolved path and the VFS). The first caller to find no commit running becomes the
**leader**: it takes every job queued at that moment, its own included, and on its own log's
writer connection runs them in one ``BEGIN IMMEDIATE`` transaction, in queue order, each inside
its own ``SAVEPOINT``: a job that raises is rolled back alone (its caller gets its error, typed
as before), the others go on from the head the last good job left. (A transaction's first job,
when it is the only one, runs without a savepoint: its failure rolls the transaction back.) Then
one ``COMMIT`` (one sync, under ``synchronous=FULL``) makes them all durable, and each caller is
woken with its own result. Callers that queue while the leader's jobs run join its transaction:
before it commits, the leader takes every job queued meanwhile (up to :data:`MAX_JOBS` in all)
and runs them too; only those queued during the ``COMMIT`` itself wait for the next leader,
which takes them all. So a call still returns only once its own record is durable, and N callers
waiting at once cost one sync, not N. When the last transaction held the jobs of several threads
and the queue is empty before the ``COMMIT``, the leader first waits for those of them this
transaction does not hold yet (each is likely deciding its next request), at most half as long
as the last transaction took and never more than :data:`MAX_PAUSE_S`: without it, threads
appending at once split into two alternating half-size groups and pay twice the syncs. One
thread appending alone (or threads taking turns, one append at a time) never waits.

What holds as before: seqs are given in queue order, each job's records are contiguous and
linked to the one before; the head is known inside the write transaction, so other processes
still append through SQLite's lock and the chain stays one; a job's builder writes its index
rows through the connection it is given and they commit with its records or not at all; the
Merkle tree grows in the same transaction. When the transaction as a whole fails (the commit,
an I/O error, a full disk: SQLite rolls back everything), every job of it gets the typed error
and nothing of any of them is written, and the leader's writer connection is dropped as before.

The leader's head and tree edge are kept between transactions: each committer remembers the
head (next seq, head hash) and the tree's right edge its last commit left, with the writer
connection that made it and that connection's ``PRAGMA data_version``. A leader on the same
connection whose ``data_version`` (read inside its ``BEGIN IMMEDIATE``, so under the write lock)
is unchanged knows no other connection (of this process or another) has committed since, and
links after the remembered head without reading it or the tree's edge again; any other leader,
any change by another connection, a failed job or a failed transaction, reads both from the
database as before. So a second process appending between two of ours is always chained after.

A builder runs on the leader's thread: it must use only the connection it is given and never
wait for anything its own caller holds. An append from inside a builder (this process's commit
of the same file) is refused with :class:`StoreError` instead of waiting for itself.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import apsw

from ...core.audit.chain import GENESIS_HASH, encode_payload, link_rows, link_stamped
from ...core.redact import DEFAULT_REDACTOR, Redactor
from ...errors import StoreError
from ..db import store_error
from . import segments, tree
from .handle import LogHandle

__all__ = [
    "APPEND_CHUNK",
    "MAX_JOBS",
    "MAX_PAUSE_S",
    "Committer",
    "Job",
    "committer_of",
    "queue_of",
]

#: Rows linked and inserted per ``executemany`` by a streaming append.
APPEND_CHUNK: Final = 1_000
#: The most jobs one transaction takes (callers queued past it wait for the next).
MAX_JOBS: Final = 1_024
#: The longest a leader waits for the callers of the last transaction (and at most half as
#: long as that transaction took, its own waits aside).
MAX_PAUSE_S: Final = 0.005

_INSERT: Final = (
    "INSERT INTO audit_records(seq, recorded_at, prev_hash, payload_hash, record_hash, payload) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_HEAD: Final = "SELECT seq, record_hash FROM audit_records ORDER BY seq DESC LIMIT 1"
_DATA_VERSION: Final = "PRAGMA data_version"

#: The apsw errors that fail one job alone (its statement was refused; the transaction and the
#: connection are sound). Any other (I/O, a full disk, corruption, ...) fails the transaction.
_JOB_ONLY: Final = (
    apsw.ConstraintError,
    apsw.SQLError,
    apsw.MismatchError,
    apsw.RangeError,
    apsw.TooBigError,
)

Row = tuple[int, str, str, str, str, bytes]
Stamped = Callable[[apsw.Connection, int, str], Iterable[tuple[str, bytes]]]
Within = Callable[[apsw.Connection], Iterable[Any]]


@dataclass(slots=True, kw_only=True)
class Job:
    """One caller's append: the payloads (``encoded`` at ``recorded_at``, or what ``within``
    returns, encoded with ``redactor``, or the pairs ``stamped`` yields), and, once done, its
    outcome: ``first``/``count``/``before``/``head`` (the seqs written and the heads around
    them) and the rows with ``keep``, or ``error``."""

    encoded: Iterable[bytes] = ()
    recorded_at: str = ""
    keep: bool = False
    within: Within | None = None
    stamped: Stamped | None = None
    redactor: Redactor = DEFAULT_REDACTOR
    first: int = 0
    count: int = 0
    before: str = ""
    head: str = ""
    rows: list[Row] = field(default_factory=list)
    error: BaseException | None = None
    committed: bool = False
    done: bool = False
    caller: int = 0  # the thread that queued it


@dataclass(slots=True, kw_only=True)
class _Tip:
    """What a committed transaction left, valid on ``conn`` while its ``data_version`` is
    ``version``: the next seq, the head hash and the tree's appender (``None``: no tree)."""

    conn: apsw.Connection
    version: Any
    first: int
    prev: str
    grow: tree.Appender | None


class Committer:
    """The queue of one database file in this process, whether a leader is committing, and
    the head and tree edge the last commit left (see the module docstring)."""

    __slots__ = (
        "__weakref__",
        "_arrived",
        "_cond",
        "_deadline",
        "_leader",
        "_lock",
        "_missing",
        "_queue",
        "_recent",
        "_tip",
        "_waited",
        "_waiting",
        "generation",
        "last_s",
    )

    def __init__(self) -> None:
        self._lock = lock = threading.Lock()  # taken directly: a C-level ``with``
        self._cond = threading.Condition(lock)  # a job is done, or no leader: callers wait
        self._arrived = threading.Condition(lock)  # a job was queued: the leader may wait
        self._queue: list[Job] = []
        self._leader: int | None = None  # the committing thread's ident
        #: The threads whose jobs the last transaction held, and those of them the current
        #: one does not hold yet (it may wait for them until ``_deadline``).
        self._recent: frozenset[int] = frozenset()
        self._missing: set[int] = set()
        self._deadline = 0.0
        self._waited = 0.0  # how long the current leader waited for them, in seconds
        self._waiting = 0  # the callers waiting on ``_cond`` (none: nobody to notify)
        #: How long the last leader's transaction took (its sync included, its waits not).
        self.last_s = 0.0
        self._tip: _Tip | None = None  # read and written by the leader only
        self.generation = _generation  # the fork it was made after

    def forget(self, conn: apsw.Connection) -> None:
        """Drop what is remembered about ``conn`` (its log closes or drops it)."""
        tip = self._tip
        if tip is not None and tip.conn is conn:
            self._tip = None

    def run(self, log: LogHandle, job: Job) -> None:
        """Queue ``job`` and return once it is done (its outcome set on it): committed by
        whichever caller leads, or by this one on ``log``'s writer connection."""
        me = job.caller = threading.get_ident()
        with self._lock:
            if self._leader == me:
                raise StoreError(
                    "cannot append to the audit log from inside an append's transaction"
                )
            self._queue.append(job)
            if self._missing:  # the leader may be waiting for it
                self._arrived.notify()
            while not job.done and self._leader is not None:
                self._waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiting -= 1
            if job.done:
                return
            self._leader = me
            batch, self._queue = self._queue, []
            self._missing.clear()
            if len(self._recent) > 1:  # callers at once: those not here yet may be coming
                self._missing.update(self._recent.difference(j.caller for j in batch))
                self._deadline = time.monotonic() + min(self.last_s / 2, MAX_PAUSE_S)
            self._waited = 0.0
        start = time.monotonic()
        try:
            commit(log, batch, self._take_queued, queue=self)
        finally:
            with self._lock:
                self.last_s = time.monotonic() - start - self._waited
                for j in batch:
                    if not j.committed and j.error is None:  # the leader was interrupted
                        j.error = StoreError("the audit append was interrupted: nothing written")
                    j.done = True
                self._recent = frozenset([j.caller for j in batch])
                self._leader = None
                if self._waiting:  # one thread appending alone wakes nobody
                    self._cond.notify_all()

    def _take_queued(self, batch: list[Job]) -> bool:
        """The leader's, before it commits: move every job queued meanwhile onto ``batch``
        (whether there was one), up to :data:`MAX_JOBS` in all. With none queued, it first
        waits for a caller of the last transaction that this one lacks (see the module
        docstring), until the deadline set when it became the leader."""
        with self._lock:
            room = MAX_JOBS - len(batch)
            if room <= 0:
                return False
            while not self._queue and self._missing:
                now = time.monotonic()
                left = self._deadline - now
                if left <= 0:
                    break
                arrived = self._arrived.wait(left)
                self._waited += time.monotonic() - now
                if not arrived:
                    break
            if not self._queue:
                return False
            taken = self._queue[:room]
            del self._queue[:room]
            batch.extend(taken)
            self._missing.difference_update(j.caller for j in taken)
            return True


#: How many forks this process is from the one that imported this module: a committer made
#: before a fork is never used after it (a lock it held stays held in the child).
_generation = 0
_registry_lock = threading.Lock()
_registry: weakref.WeakValueDictionary[tuple[str, str | None], Committer] = (
    weakref.WeakValueDictionary()
)


def committer_of(key: tuple[str, str | None]) -> Committer:
    """The committer of ``(resolved database path, VFS)`` in this process (made on first use;
    kept while any caller holds it)."""
    with _registry_lock:
        found = _registry.get(key)
        if found is None:
            found = _registry[key] = Committer()
        return found


def queue_of(log: LogHandle) -> Committer:
    """``log``'s committer, kept on it (so what the committer remembers outlives one call)."""
    found = log._queue
    if found is None or found.generation != _generation:
        found = log._queue = committer_of(log._group_key())
    return found


def _after_fork() -> None:
    """A child starts with no commit running: a lock held by a parent's thread at the fork
    would never be released in the child."""
    global _registry_lock, _registry, _generation
    _registry_lock = threading.Lock()
    _registry = weakref.WeakValueDictionary()
    _generation += 1


os.register_at_fork(after_in_child=_after_fork)


def commit(
    log: LogHandle,
    batch: list[Job],
    take: Callable[[list[Job]], bool] | None = None,
    *,
    queue: Committer | None = None,
) -> None:
    """Run ``batch`` in one write transaction on ``log``'s writer (see the module docstring);
    sets every job's outcome, never raises for a job's own failure. ``take(batch)`` (the
    leader's :meth:`Committer._take_queued`), called once the jobs so far have run, adds the
    jobs queued meanwhile to ``batch`` and says whether it did: they run in this transaction
    too, before its commit. ``queue`` is ``log``'s committer, when the caller holds it."""
    if queue is None:
        queue = queue_of(log)
    try:
        conn = log._write_conn()
    except Exception as e:  # the writer cannot be opened: nothing runs
        _fail_all(batch, e)
        return
    tip, queue._tip = queue._tip, None  # remembered again once this transaction commits
    try:
        compress = log._codec(conn).compress
        with conn:  # BEGIN IMMEDIATE: the head cannot move until we commit
            version = conn.execute(_DATA_VERSION).get
            if tip is not None and tip.conn is conn and tip.version == version:
                first, prev, grow = tip.first, tip.prev, tip.grow  # no other commit since
            else:
                first, prev, grow = _read_tip(conn)
            at = 0
            while at < len(batch) or (take is not None and take(batch)):
                job = batch[at]
                at += 1
                alone = at == len(batch) == 1  # nothing else written: no savepoint needed
                try:
                    if alone:
                        _run(conn, job, first, prev, grow, compress)
                    else:
                        with conn:  # SAVEPOINT: this job alone rolls back
                            _run(conn, job, first, prev, grow, compress)
                except _JOB_ONLY as e:  # a statement of this job's refused: the rest is sound
                    if not conn.in_transaction:
                        raise
                    job.error = store_error("cannot append to the audit log", e, log._path)
                    job.error.__cause__ = e
                except apsw.Error:  # the database failed (full, I/O): the whole transaction
                    raise  # fails, and the writer is replaced (below)
                except Exception as e:
                    job.error = e
                if job.error is not None:
                    if alone:  # the whole transaction rolls back (the queue waits for the next)
                        raise _Alone
                    job.rows = []
                    grow = tree.Appender.at(conn, first)  # the tree as the savepoint left it
                    continue
                if job.count:
                    first, prev = first + job.count, job.head
        for job in batch:
            job.committed = job.error is None
        queue._tip = _Tip(conn=conn, version=version, first=first, prev=prev, grow=grow)
    except _Alone:
        batch[0].committed, batch[0].rows = False, []
    except apsw.Error as e:
        _fail_all(batch, log._write_failed("cannot append to the audit log", e), cause=e)


class _Alone(Exception):
    """The only job of a transaction failed: the transaction rolls back, nothing written."""


def _read_tip(conn: apsw.Connection) -> tuple[int, str, tree.Appender | None]:
    """The next seq, the head hash and the tree's appender, read in the caller's write
    transaction (the head may be a sealed segment's when the live table is empty)."""
    row = conn.execute(_HEAD).fetchone() or segments.head_across(conn)
    first, prev = (0, GENESIS_HASH) if row is None else (int(row[0]) + 1, str(row[1]))
    return first, prev, tree.Appender.at(conn, first)


def _fail_all(batch: list[Job], error: Exception, *, cause: BaseException | None = None) -> None:
    """Every job of a transaction that failed as a whole gets the error (a copy each: each
    caller raises its own), unless it has one of its own already."""
    for job in batch:
        job.committed = False
        job.rows = []
        if job.error is None:
            mine = copy.copy(error)
            mine.__cause__ = cause if cause is not None else error.__cause__
            job.error = mine


def _run(
    conn: apsw.Connection,
    job: Job,
    first: int,
    prev: str,
    grow: tree.Appender | None,
    compress: Callable[[bytes], bytes],
) -> None:
    """Link and insert ``job``'s records after ``(first, prev)``, a chunk at a time."""
    job.first, job.before, job.head, job.count = first, prev, "", 0
    encoded = job.encoded
    if job.within is not None:
        redactor = job.redactor
        encoded = [encode_payload(p, redactor) for p in job.within(conn)]
        if not encoded:  # the change alone (a heartbeat): nothing to link
            job.first = 0
            return
    if job.stamped is not None:
        pairs = job.stamped(conn, first, prev)
        if type(pairs) is list and len(pairs) <= APPEND_CHUNK:  # one chunk (a builder's few)
            rows = link_stamped(pairs, seq=first, prev_hash=prev)
            if rows:
                _insert(conn, rows, grow, compress)
                if job.keep:
                    job.rows.extend(rows)
                prev = rows[-1][4]
            job.count, job.head = len(rows), prev
            return
    link: Callable[[int, str], list[Row]]
    if job.stamped is None:  # every record at ``recorded_at``, checked before it was queued
        blobs, at = iter(encoded), job.recorded_at

        def link(seq: int, head: str) -> list[Row]:
            chunk = list(itertools.islice(blobs, APPEND_CHUNK))
            return link_rows(chunk, seq=seq, prev_hash=head, recorded_at=at)

    else:
        chunks = iter(pairs)  # a list too, read once

        def link(seq: int, head: str) -> list[Row]:
            return link_stamped(
                list(itertools.islice(chunks, APPEND_CHUNK)), seq=seq, prev_hash=head
            )

    count = 0
    while rows := link(first + count, prev):
        _insert(conn, rows, grow, compress)
        count += len(rows)
        prev = rows[-1][4]
        if job.keep:
            job.rows.extend(rows)
    job.count, job.head = count, prev


def _insert(
    conn: apsw.Connection,
    rows: list[Row],
    grow: tree.Appender | None,
    compress: Callable[[bytes], bytes],
) -> None:
    """Insert linked ``rows`` (their payloads compressed) and grow the tree by them."""
    conn.executemany(_INSERT, [(*r[:5], compress(r[5])) for r in rows])
    if grow is not None:
        grow.add([r[4] for r in rows])
        grow.flush()
