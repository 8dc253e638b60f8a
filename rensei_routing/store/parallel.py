"""Verification of the audit chain on every core: the chain is cut into seq ranges (guided:
large first, small last, :func:`cut`), each checked with its own read-only connection (links,
hashes and the strict parse of its rows) by this process or one of ``workers - 1`` worker
processes, and the seams are joined in order by :func:`rensei_routing.core.audit.ranges.join`,
so the first broken seq, its reason and its detail are exactly those of the one-process walk.
Owns the worker pool; the rules are the core's (:mod:`..core.audit.chain`, ``.ranges``).

The ranges are bounded by the largest seq stored when the verification starts (read in the
caller's read transaction, with the checkpoints): rows appended while the workers run lie
above every range and are not counted, as a one-process walk in one snapshot does not count
them. Each worker streams its rows through a cursor and returns one seam row and one verdict,
so memory stays flat at any log size. Workers are processes of our own (``python -m`` this module,
see :class:`_Pool`): never a ``fork`` of a process that may hold threads, locks or connections,
and never a second run of the caller's ``__main__``.

The one-process walk is kept (:func:`wanted` says when): for ``workers=1``, for a log of
fewer than :data:`PARALLEL_MIN_RECORDS` records (starting workers costs more than it saves),
and for a connection on a custom VFS (registered in this process only).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import apsw

from ..core.audit.chain import (
    ROW_COLUMNS,
    STRICT_PAYLOADS,
    Checkpoint,
    VerifyResult,
    checkpoint_marks,
    verify_chain,
)
from ..core.audit.ranges import RangeOutcome, check_range, join
from ..core.audit.verdict import GENESIS_HASH
from ..errors import StoreError
from .codec import Codec
from .db import SEGMENT_MIN_VERSION, close_quietly, connect
from .treecheck import RangeCheck, RangeTree

if TYPE_CHECKING:  # not imported by a worker process: its start-up is part of every verify
    from .home import ConnectOptions

__all__ = [
    "GUIDED_FACTOR",
    "MIN_RANGE_RECORDS",
    "PARALLEL_MIN_RECORDS",
    "PARSE_WEIGHT",
    "TreeWork",
    "cut",
    "default_workers",
    "verify_in_workers",
    "walk",
    "wanted",
]

#: Below this many records (judged by the largest seq) one process walks the chain: starting
#: two workers costs ~0.5 s on a busy 2-core machine, what one process needs for ~50-100k small
#: records (docs/performance.md, chain-verify).
PARALLEL_MIN_RECORDS: Final = 250_000
#: The ranges are "guided" (cut by :func:`cut`): each costs the work still to cut divided by
#: this many times the processes, so the first ranges are large (few seams, few messages) and
#: the last are small (when one process is done, the others hold little: at most
#: :data:`_IN_FLIGHT` small ranges each).
GUIDED_FACTOR: Final = 4
#: The smallest range, in records spared the parse (~10 ms of one core): below it, opening a
#: range (one read transaction, one indexed seek, two messages) stops being negligible.
MIN_RANGE_RECORDS: Final = 2_000
#: What a record parsed strictly costs in records spared the parse (its checkpoint's signer
#: proved it strict JSON): ~12 us against ~4.7 us (docs/performance.md), so the tail past the
#: latest checkpoint is cut into ranges of fewer records.
PARSE_WEIGHT: Final = 2.5
#: Ranges handed to each worker ahead of its outcomes: the next is already in its pipe while
#: the parent checks a range of its own or reads the last outcome.
_IN_FLIGHT: Final = 2
#: How often (seconds) the parent reports the workers' progress while it waits.
_POLL: Final = 0.2
_ROWS_AT_ONCE: Final = 256  # rows read, inflated and handed to the tree at a time
#: The stored rows, payloads as stored: :func:`_inflated` gives them their canonical bytes in
#: this process (the codec's own ``inflate``, as the ``rensei_payload()`` SQL function would:
#: ~0.5 us a record less than SQLite calling back into Python and copying the result twice).
_SELECT_ALL: Final = f"SELECT {', '.join(ROW_COLUMNS)} FROM audit_records ORDER BY seq"
_SELECT: Final = _SELECT_ALL.replace("ORDER BY", "WHERE seq >= ? AND seq < ? ORDER BY")

#: One range to check: (index, lo, hi, checkpoint marks, parsed_below, the database holding
#: the tree to check the range's leaves against, or ``None``).
_Task = tuple[int, int, int, dict[int, list[str]], int, str | None]
#: Opens (or returns the one already open) a read-only connection to a database by path.
_Opener = Callable[[str], apsw.Connection]


@dataclass(slots=True)
class TreeWork:
    """The walk checks the stored Merkle tree too (:mod:`.treecheck`), each range the leaves of
    its own rows: ``conn`` is this process's connection to the database holding ``audit_tree``
    (in a read transaction the caller holds), ``path`` that database's file (the workers open
    it); each range's outcome is appended to ``outcomes`` in seq order (one for a one-process
    walk). An outcome of a walk whose chain failed means nothing."""

    conn: apsw.Connection
    path: Path
    outcomes: list[RangeTree] = field(default_factory=list)


#: The directory holding the package, put on the workers' path.
_ROOT: Final = str(Path(__file__).resolve().parent.parent.parent)


def default_workers() -> int:
    """The number of workers ``verify()`` uses by default: every core (``os.cpu_count()``)."""
    return max(1, os.cpu_count() or 1)


def wanted(workers: int, records: int, vfs: str | None) -> bool:
    """Whether a log of about ``records`` records is checked in ``workers`` processes."""
    return workers > 1 and records >= PARALLEL_MIN_RECORDS and vfs is None


def cut(
    start: int, end: int, processes: int, parsed_below: int, *, smallest: int | None = None
) -> list[tuple[int, int]]:
    """The ranges ``[lo, hi)`` that tile ``[start, end)``, in seq order, for ``processes``
    processes checking them: guided, each costing the cost still uncut over
    :data:`GUIDED_FACTOR` times ``processes`` and at least ``smallest`` (default
    :data:`MIN_RANGE_RECORDS`), where a record at or above ``parsed_below`` (parsed strictly)
    costs :data:`PARSE_WEIGHT` and one below it costs 1 (``parsed_below`` 0: every record
    parsed, all alike). Pure; handed out in this order, the large ranges go first and the
    small ones last, so the processes finish close together."""
    least = float(MIN_RANGE_RECORDS if smallest is None else smallest)
    heavy = end if parsed_below <= start else min(max(parsed_below, start), end)
    weight = PARSE_WEIGHT if parsed_below > 0 else 1.0

    def cost(lo: int) -> float:  # of [lo, end)
        return max(0, heavy - lo) + weight * (end - max(lo, heavy))

    out: list[tuple[int, int]] = []
    lo = start
    while lo < end:
        want = max(least, cost(lo) / (GUIDED_FACTOR * max(1, processes)))
        cheap = max(0, heavy - lo)
        if want <= cheap:
            hi = lo + math.ceil(want)
        else:
            hi = max(lo, heavy) + math.ceil((want - cheap) / weight)
        hi = min(end, max(hi, lo + 1))
        out.append((lo, hi))
        lo = hi
    return out


def _send(out: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(struct.pack(">Q", len(data)) + data)
    out.flush()


def _receive(inp: IO[bytes]) -> Any:
    """The next message on ``inp``, or ``None`` at its end."""
    head = inp.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(inp.read(size))


def _inflated(
    rows: Iterable[Sequence[Any]],
    inflate_many: Callable[[Sequence[Any]], list[Any]],
    tree: RangeCheck | None = None,
) -> Iterator[tuple[Any, ...]]:
    """The rows with their stored payloads inflated (see :data:`_SELECT_ALL`), each record hash
    handed to ``tree`` on the way (so the tree is checked from the rows the chain reads): taken
    :data:`_ROWS_AT_ONCE` at a time, split into columns, payloads inflated and record hashes
    handed on together, rows put back as asked for; no Python code runs per row here
    (:func:`_inflated_plain` is the row-by-row reference)."""
    it = iter(rows)
    batches = iter(lambda: list(itertools.islice(it, _ROWS_AT_ONCE)), [])

    def columns(batch: list[Any]) -> Iterator[tuple[Any, ...]]:
        seqs, stamps, prevs, p_hashes, r_hashes, stored = zip(*batch, strict=True)
        if tree is not None:
            tree.add_many(r_hashes)
        return zip(seqs, stamps, prevs, p_hashes, r_hashes, inflate_many(stored), strict=True)

    return itertools.chain.from_iterable(map(columns, batches))


def _inflated_plain(
    rows: Iterable[Sequence[Any]], inflate: Callable[[Any], Any], tree: RangeCheck | None = None
) -> Iterator[tuple[Any, ...]]:
    """:func:`_inflated` row by row (the reference the tests hold it to)."""
    for seq, recorded_at, prev_hash, p_hash, r_hash, stored in rows:
        if tree is not None:
            tree.add(r_hash)
        yield seq, recorded_at, prev_hash, p_hash, r_hash, inflate(stored)


def _check(
    conn: apsw.Connection, task: _Task, report: Callable[[Any], None], open_tree: _Opener
) -> tuple[str, int, Any]:
    """Check the range ``[lo, hi)`` in one read transaction: ``("ok", index, (outcome, tree
    outcome or None))`` or ``("error", index, message)`` (an exception is not sent: a typed
    error may not unpickle); ``report`` gets the progress messages meanwhile. The tree (when
    the task names its database) is read through ``open_tree``'s connection: ``conn`` itself
    when the records are the home's, in the same transaction."""
    index, lo, hi, marks, parsed_below, tree_path = task

    def progress(seq: int) -> None:
        report(("progress", index, seq - lo))

    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(conn)
            tree: RangeCheck | None = None
            if tree_path is not None:
                tree_conn = open_tree(tree_path)
                if tree_conn is not conn:
                    stack.enter_context(tree_conn)
                tree = RangeCheck(tree_conn, lo)
                stack.callback(tree.close)
            inflate = Codec.load(conn).inflate_many
            cursor = conn.execute(_SELECT, (lo, hi))
            try:
                rows = _inflated(cursor, inflate, tree)
                outcome = check_range(rows, marks, parsed_below=parsed_below, progress=progress)
            finally:
                cursor.close(True)
            found = None if tree is None else tree.outcome()
    except Exception as e:
        return "error", index, f"{type(e).__name__}: {e}"
    return "ok", index, (outcome, found)


class _Connections:
    """Read-only connections by path, opened on first use: a process's own database and the
    home database holding the tree (when the records are a sealed segment's)."""

    def __init__(self, busy_timeout_ms: int) -> None:
        self._busy_timeout_ms = busy_timeout_ms
        self._open: dict[str, apsw.Connection] = {}

    def get(self, path: str, *, min_version: int | None = None) -> apsw.Connection:
        conn = self._open.get(path)
        if conn is None:
            if min_version is None:
                conn = connect(Path(path), write=False, busy_timeout_ms=self._busy_timeout_ms)
            else:
                conn = connect(
                    Path(path),
                    write=False,
                    busy_timeout_ms=self._busy_timeout_ms,
                    min_version=min_version,
                )
            self._open[path] = conn
        return conn

    def close(self) -> None:
        for conn in self._open.values():
            close_quietly(conn)
        self._open.clear()


def serve(path: Path, busy_timeout_ms: int) -> int:
    """A worker process (``python -m rensei_routing.store.parallel DB BUSY_MS``): its own
    read-only connection; ranges in on stdin, progress and outcomes out on stdout, until stdin
    ends. Only ever started by :func:`_run`, which trusts what it reads back."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    conns = _Connections(busy_timeout_ms)
    try:
        conn = conns.get(str(path), min_version=SEGMENT_MIN_VERSION)
    except Exception as e:
        _send(out, ("error", -1, f"{type(e).__name__}: {e}"))
        return 1
    _send(out, ("ready", -1, None))

    def report(message: Any) -> None:
        _send(out, message)

    try:
        while (task := _receive(inp)) is not None:
            _send(out, _check(conn, task, report, conns.get))
    finally:
        conns.close()
    return 0


def walk(
    conn: apsw.Connection,
    path: Path,
    checkpoints: Sequence[Checkpoint],
    *,
    origin: str,
    signature_ok: Callable[[Checkpoint], bool] | None,
    progress: Callable[[int], None] | None,
    workers: int | None,
    options: ConnectOptions,
    start_seq: int = 0,
    start_hash: str = GENESIS_HASH,
    tree: TreeWork | None = None,
) -> VerifyResult:
    """:func:`.chain.verify_chain` over every row of ``conn`` (in a read transaction the caller
    holds), in ``workers`` processes (``None``: :func:`default_workers`) when :func:`wanted`,
    else in this one. ``start_seq``/``start_hash``: the rows begin after a trusted prefix (a
    sealed or pruned segment's head, see :mod:`.segments`), as in ``verify_chain``. With
    ``tree``, the leaves of the rows are checked against the stored tree as they are read.

    Raises:
        StoreError: a worker could not read its range, or a worker process failed.
        apsw.Error: this process could not read the rows.
    """
    n = default_workers() if workers is None else workers
    row = conn.execute("SELECT max(seq) FROM audit_records").fetchone()
    top = -1 if row is None or row[0] is None else int(row[0])
    if wanted(n, top + 1 - start_seq, options.vfs):
        spare = max((c.size for c in checkpoints if STRICT_PAYLOADS in c.extensions), default=0)
        return verify_in_workers(
            path,
            checkpoints,
            top=top,
            origin=origin,
            signature_ok=signature_ok,
            progress=progress,
            workers=n,
            busy_timeout_ms=options.busy_timeout_ms,
            parsed_below=spare,
            start_seq=start_seq,
            start_hash=start_hash,
            tree=tree,
        )
    cursors: list[apsw.Cursor] = []
    inflate = Codec.load(conn).inflate_many
    check = None if tree is None else RangeCheck(tree.conn, start_seq)

    def rows(leaves: RangeCheck | None = None) -> Iterator[tuple[Any, ...]]:
        """The rows from genesis, in the caller's read transaction (so the same snapshot:
        ``verify_chain`` walks them a second time to name a failure below a checkpoint)."""
        cursors.append(conn.execute(_SELECT_ALL))
        return _inflated(cursors[-1], inflate, leaves)

    try:
        result = verify_chain(
            rows(check),
            checkpoints=checkpoints,
            origin=origin,
            signature_ok=signature_ok,
            progress=progress,
            rows_again=rows,
            start_seq=start_seq,
            start_hash=start_hash,
        )
        if tree is not None and check is not None:
            tree.outcomes.append(check.outcome())
        return result
    finally:
        for cursor in cursors:
            cursor.close(True)
        if check is not None:
            check.close()


def verify_in_workers(
    path: Path,
    checkpoints: Sequence[Checkpoint],
    *,
    top: int,
    origin: str,
    signature_ok: Callable[[Checkpoint], bool] | None,
    progress: Callable[[int], None] | None,
    workers: int,
    busy_timeout_ms: int,
    parsed_below: int,
    start_seq: int = 0,
    start_hash: str = GENESIS_HASH,
    tree: TreeWork | None = None,
) -> VerifyResult:
    """:func:`.chain.verify_chain`'s verdict on the rows of ``path`` with seq ``start_seq..top``
    (the largest stored, read by the caller with the checkpoints), reached in ``workers``
    processes; ``tree`` as :func:`walk`'s.
    ``parsed_below`` as there (the largest checkpoint carrying ``payloads: strict-json``): a
    failure below it is looked for again with every payload parsed, so the verdict is a full
    strict walk's.

    Raises:
        StoreError: a worker could not read its range, or a worker process failed.
    """
    marks = checkpoint_marks(checkpoints, origin=origin, signature_ok=signature_ok)
    if isinstance(marks, VerifyResult):
        return marks
    start = (start_seq, start_hash)
    result = _run(
        path,
        marks,
        len(checkpoints),
        top,
        workers,
        busy_timeout_ms,
        parsed_below,
        progress,
        start,
        tree,
    )
    seq = result.first_broken_seq
    if parsed_below and seq is not None and seq < parsed_below:
        # The chain failed: the tree's outcomes mean nothing, and are not looked for again.
        result = _run(path, marks, len(checkpoints), top, workers, busy_timeout_ms, 0, None, start)
    return result


def _run(
    path: Path,
    marks: dict[int, list[str]],
    count: int,
    top: int,
    workers: int,
    busy_timeout_ms: int,
    parsed_below: int,
    progress: Callable[[int], None] | None,
    start: tuple[int, str] = (0, GENESIS_HASH),
    tree: TreeWork | None = None,
) -> VerifyResult:
    """One walk over ``[start seq, top]`` in ranges; see :func:`verify_in_workers`. This
    process checks ranges beside ``workers - 1`` worker processes (it would otherwise only
    wait, and one interpreter fewer starts)."""
    cuts = cut(start[0], top + 1, workers, parsed_below)
    tree_path = None if tree is None else str(tree.path)
    tasks = [(i, lo, hi, marks, parsed_below, tree_path) for i, (lo, hi) in enumerate(cuts)]
    pool = _Pool(path, busy_timeout_ms, max(0, min(workers, len(tasks)) - 1))
    # The workers count records checked; a single walk reports the next seq (from the start).
    counted = None if progress is None else (lambda n: progress(start[0] + n))
    try:
        result = join(
            pool.outcomes(
                tasks,
                counted,
                _Local(path, busy_timeout_ms),
                None if tree is None else tree.outcomes,
            ),
            marks,
            checkpoints=count,
            parsed_below=parsed_below,
            start_seq=start[0],
            start_hash=start[1],
        )
    finally:
        pool.close()
    if progress is not None:
        progress(result.records_checked)
    return result


class _Local:
    """The parent's own checking of ranges, beside its workers: on a read-only connection of
    its own, opened on first use and closed by :meth:`close`."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self._path = str(path)
        self._conns = _Connections(busy_timeout_ms)

    def check(self, task: _Task, report: Callable[[Any], None]) -> tuple[str, int, Any]:
        """:func:`_check` of ``task`` in this process (a failure to connect is an ``error``
        outcome, as a worker's would be)."""
        try:
            conn = self._conns.get(self._path)
        except Exception as e:
            return "error", task[0], f"{type(e).__name__}: {e}"
        return _check(conn, task, report, self._conns.get)

    def close(self) -> None:
        self._conns.close()


class _Pool:
    """Worker processes of our own (not ``multiprocessing``: its ``spawn`` and ``forkserver``
    run the caller's ``__main__`` again in every worker, and a plain ``fork`` would copy this
    process's SQLite locks and threads). Each is ``python -m`` this module; a reader thread
    per worker queues what it sends."""

    def __init__(self, path: Path, busy_timeout_ms: int, count: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_ROOT, env.get("PYTHONPATH"))))
        self._messages: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._procs: list[subprocess.Popen[bytes]] = []
        for k in range(count):
            proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(path), str(busy_timeout_ms)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            self._procs.append(proc)
            threading.Thread(target=self._read, args=(k, proc), daemon=True).start()

    def _read(self, k: int, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        try:
            while (message := _receive(proc.stdout)) is not None:
                self._messages.put((k, message))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            pass
        self._messages.put((k, None))

    def _give(self, k: int, task: _Task) -> None:
        stdin = self._procs[k].stdin
        assert stdin is not None
        try:
            _send(stdin, task)
        except OSError as e:
            raise StoreError(f"an audit verify worker stopped: {e}") from e

    def outcomes(
        self,
        tasks: list[_Task],
        progress: Callable[[int], None] | None,
        local: _Local,
        trees: list[RangeTree] | None = None,
    ) -> Iterator[RangeOutcome]:
        """The ranges' outcomes in seq order (their trees' outcomes appended to ``trees`` as
        each is yielded). Ranges are handed out in order: to each worker
        :data:`_IN_FLIGHT` ahead, the next to a worker as it sends an outcome, and the next to
        ``local`` (this process) whenever no worker message is waiting; ``progress`` gets the
        records checked so far (in any range)."""
        pending = collections.deque(tasks)
        for _ in range(_IN_FLIGHT):
            for k in range(len(self._procs)):
                if pending:
                    self._give(k, pending.popleft())
        done: dict[int, tuple[RangeOutcome, RangeTree | None]] = {}
        counts = [0] * len(tasks)
        shown = wanted_index = 0

        def mine(message: Any) -> None:
            counts[message[1]] = message[2]  # a progress message of this process's range

        try:
            while wanted_index < len(tasks):
                if wanted_index in done:
                    outcome, found = done.pop(wanted_index)
                    if trees is not None and found is not None:
                        trees.append(found)
                    yield outcome
                    wanted_index += 1
                    continue
                k = -1
                if pending and self._messages.empty():
                    message = local.check(pending.popleft(), mine)
                else:
                    try:
                        k, message = self._messages.get(timeout=_POLL)
                    except queue.Empty:
                        continue
                if message is None:
                    code = self._procs[k].poll()
                    raise StoreError(f"an audit verify worker exited early (status {code})")
                status, index, value = message
                if status == "error":
                    raise StoreError(f"cannot read the audit log: {value}")
                if status == "progress":
                    counts[index] = value
                elif status == "ok":
                    done[index] = value
                    counts[index] = tasks[index][2] - tasks[index][1]
                    if k >= 0 and pending:
                        self._give(k, pending.popleft())
                if progress is not None and (total := sum(counts)) > shown:
                    shown = total
                    progress(total)
        finally:
            local.close()

    def close(self) -> None:
        """End every worker (they may be mid-range when the verdict is already known)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()


if __name__ == "__main__":
    raise SystemExit(serve(Path(sys.argv[1]), int(sys.argv[2])))
