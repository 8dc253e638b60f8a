"""What the console keeps in memory between requests: the chain's verification, doctor's
checks and what-if comparisons, each computed by a background thread and shown with the time
it was made. Nothing is written anywhere: a restart starts them again.

A page never waits for a verification (one over a million records takes seconds): until the
first one finishes the chain shows as "not verified yet", never as fine; a finished one says
how many records it covered, so records appended since show as not yet verified. The thread
looks every :data:`POLL_S` seconds for any change to the database (:mod:`.chainwatch`: any
commit by anyone, a replaced file, a changed segment): records appended after the verified head
are verified alone, from it; any other change (a record below the head rewritten, a checkpoint
or segment added or removed) walks the whole chain again (at once, or within
:data:`REWALK_DUTY` times a walk's duration of the last one), and so does the schedule, every
:data:`FULL_EVERY_S` seconds whatever changed. Doctor reruns on the same changes.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import apsw

from ..core.audit.chain import VerifyResult, checkpoint_origin
from ..core.routing.policy import PolicySnapshot
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.whatif import WhatIfSummary
from ..errors import RenseiRoutingError
from ..host.cache import host_cache
from ..ops.doctor import Check, home_checks, host_cache_check
from ..shadow.whatif import compare_chain
from ..store.audit import AuditLog
from ..store.db import store_error
from ..store.home import Home
from .chainwatch import ChainMark, ChangeWatch, extend, mark

__all__ = ["Doctor", "Verified", "Verifier", "WhatIfJob", "WhatIfJobs"]

#: Seconds between looks for a change to the database (a change is verified again).
POLL_S: Final = 2.0
#: Seconds between full walks of the chain, whatever changed (appends alone are verified
#: incrementally meanwhile; a full walk also catches what no commit announced).
FULL_EVERY_S: Final = 300.0
#: A change that is not an append walks the whole chain at once, unless the last full walk ended
#: less than this many times its own duration ago: then at the first look after that. A database
#: that keeps changing without appends (session heartbeats) so costs the console at most about a
#: tenth of one core, and a rewrite still shows within ten walks' time.
REWALK_DUTY: Final = 10.0
#: Seconds between doctor runs while the database keeps changing.
DOCTOR_EVERY_S: Final = 60.0
#: Seconds after which doctor reruns even if nothing changed (its host-cache check ages).
DOCTOR_RERUN_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class Verified:
    """One finished verification: its result (or the error that stopped it) and when; the head
    it covered; when the last full walk under it began (``full_at``; ``at`` for a full walk),
    and how many records this look walked (all of them for a full walk, the appended ones for
    an increment)."""

    result: VerifyResult | None
    error: str | None
    at: datetime
    head: tuple[int, str]
    full_at: datetime | None = None
    walked: int = 0
    full: bool = True
    #: The first seq held (records below it were pruned after their export): the walk covered
    #: ``result.records_checked - first_seq`` records.
    first_seq: int = 0


def _head(home: Home) -> tuple[int, str]:
    with closing(AuditLog.open(home, read_only=True)) as log:
        return log.head()


class _Watch(abc.ABC):
    """A daemon thread calling ``step`` now and then until :meth:`stop`."""

    def __init__(self, name: str, every_s: float) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
                self._wake.wait(self._every)
                self._wake.clear()
        finally:
            self.finish()

    @abc.abstractmethod
    def finish(self) -> None:
        """Release what the watch holds, on leaving its thread (each subclass's own)."""

    @abc.abstractmethod
    def step(self) -> None:
        """One round of the watch's work (each subclass's own)."""

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


class Verifier(_Watch):
    """The chain's verification against every stored checkpoint: in full at start, on a change
    that is not an append, and every ``full_every_s``; an append alone is verified from the last
    verified head (see the module docstring)."""

    def __init__(
        self,
        home: Home,
        clock: Callable[[], datetime],
        *,
        every_s: float = POLL_S,
        full_every_s: float = FULL_EVERY_S,
        rewalk_duty: float = REWALK_DUTY,
    ) -> None:
        super().__init__("verify", every_s)
        self._home = home
        self._clock = clock
        self._full_every = full_every_s
        self._duty = rewalk_duty
        self._pending = False  # a change not yet walked (postponed by the duty bound)
        self._walk_s = 0.0  # how long the last full walk took (monotonic seconds)
        self._walk_end = 0.0
        self._watch = ChangeWatch(home)
        self._mark: ChainMark | None = None
        self.last: Verified | None = None
        self.running_since: datetime | None = None

    def step(self) -> None:
        try:
            changed = self._watch.changed()
        except RenseiRoutingError as e:
            self._mark = None
            self.last = Verified(None, str(e), self._clock(), (0, ""))
            return
        began = self._clock()
        last = self.last
        due = (
            last is None
            or last.full_at is None
            or (began - last.full_at).total_seconds() >= self._full_every
        )
        if not changed and not due and not self._pending:
            return
        self.running_since = began
        try:
            if not due and not self._pending and self._extended():
                return
            if not due and time.monotonic() - self._walk_end < self._duty * self._walk_s:
                self._pending = True  # walked a moment ago: at the first look after the bound
                return
            self._walk(began)
        except RenseiRoutingError as e:
            self._mark = None
            self.last = Verified(None, str(e), self._clock(), (0, ""))
        finally:
            self.running_since = None

    def _extended(self) -> bool:
        """Verify the records appended after the last passed verification, alone; ``False``
        when the change was not (only) an append, or the increment failed."""
        last, seen = self.last, self._mark
        if last is None or last.result is None or not last.result or seen is None:
            return False
        if self._watch.replaced:
            return False  # another file (or segment) than the one verified: walk it whole
        info = self._home.info()
        found = extend(
            self._watch.conn,
            verified=last.result,
            seen=seen,
            origin=checkpoint_origin(info.org),
            public=self._home.public_key(),
        )
        if found is None or not found[0]:
            return False  # a full walk decides (and names the first broken seq)
        result, self._mark, walked = found
        head = (result.records_checked, result.head_hash)
        self.last = Verified(
            result, None, self._clock(), head, last.full_at, walked, False, last.first_seq
        )
        return True

    def _walk(self, began: datetime) -> None:
        """Walk the whole chain (every segment, every checkpoint), read-only."""
        head = _head(self._home)
        try:
            seen = mark(self._watch.conn)
        except apsw.Error as e:
            raise store_error("cannot read the audit log", e, self._home.db_path) from e
        self._pending = False
        start = time.monotonic()
        with closing(AuditLog.open(self._home, read_only=True)) as log:
            result = log.verify()
            first = max(0, result.records_checked - log.count()) if result else 0
        self._walk_end = time.monotonic()
        self._walk_s = self._walk_end - start
        if result:
            head = (result.records_checked, result.head_hash)
        self._mark = seen if result else None
        walked = result.records_checked - first
        self.last = Verified(result, None, self._clock(), head, began, walked, first_seq=first)

    def finish(self) -> None:
        self._watch.close()


class Doctor(_Watch):
    """``rensei doctor``'s home and host-cache checks, rerun when the database changed (at most
    once a minute) and every :data:`DOCTOR_RERUN_S` seconds whatever changed."""

    def __init__(self, home: Home, clock: Callable[[], datetime]) -> None:
        super().__init__("doctor", DOCTOR_EVERY_S)
        self._home = home
        self._clock = clock
        self._watch = ChangeWatch(home)
        self.checks: list[Check] | None = None
        self.at: datetime | None = None

    def step(self) -> None:
        try:
            changed = self._watch.changed()
        except RenseiRoutingError:
            changed = True  # an unreadable database is a finding: doctor says what it is
        moment = self._clock()
        due = self.at is None or (moment - self.at).total_seconds() >= DOCTOR_RERUN_S
        if self.checks is not None and not changed and not due:
            return
        checks = home_checks(self._home, now=moment)
        checks.append(host_cache_check(host_cache(Path(self._home.path)), now=moment))
        self.checks, self.at = checks, moment

    def finish(self) -> None:
        self._watch.close()


@dataclass(slots=True)
class WhatIfJob:
    """One comparison of the chain against a candidate: queued, running, done or failed. It
    compares the records below ``stop`` (the chain's next seq when it started), so it ends on a
    chain that keeps growing; records appended since are left for the next comparison."""

    label: str
    number: int
    requested: datetime
    started: datetime | None = None
    stop: int | None = None
    done: datetime | None = None
    summary: WhatIfSummary | None = None
    error: str | None = None
    skipped: int = 0
    current_revision: int = 0


#: What-if comparisons run one at a time, in one thread; at most this many more wait their turn
#: (a request for another candidate beyond that is told the console is busy).
WHATIF_WAITING: Final = 3
#: Finished comparisons kept for their pages (the least recently asked for is dropped first).
WHATIF_KEPT: Final = 16

_log = logging.getLogger("rensei_routing.console")
_Run = tuple[WhatIfJob, Callable[[], tuple[PolicySnapshot, str]], Callable[[], PolicySnapshot]]


class WhatIfJobs:
    """What-if comparisons by candidate: one job per candidate (asked for again while it runs,
    it is the same job), run one at a time by a single worker thread up to the chain's head
    when each starts, with a bounded queue. A finished job stays until it is asked to run again
    (:meth:`get` with ``again``) or dropped as the least recently used of :data:`WHATIF_KEPT`;
    only finished jobs are dropped, so nothing runs that no page can show."""

    def __init__(self, home: Home, clock: Callable[[], datetime], vocabulary: Vocabulary) -> None:
        self._home = home
        self._clock = clock
        self._vocabulary = vocabulary
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, WhatIfJob] = OrderedDict()
        self._queue: deque[_Run] = deque()
        self._running: WhatIfJob | None = None
        self._worker: threading.Thread | None = None
        self._numbered = 0

    def get(
        self,
        label: str,
        current: Callable[[], tuple[PolicySnapshot, str]],
        candidate: Callable[[], PolicySnapshot],
        *,
        again: int | None = None,
    ) -> WhatIfJob | None:
        """The job for ``label``: the one queued, running or done, else a new one queued. With
        ``again``, a done job whose ``number`` is ``again`` is replaced by a new one (so the
        page that asked for it, reloaded, does not start a third). ``None`` when the queue is
        full (a new job would wait behind :data:`WHATIF_WAITING` others): nothing is started."""
        with self._lock:
            job = self._jobs.get(label)
            if job is not None and (job.done is None or again != job.number):
                self._jobs.move_to_end(label)
                return job
            if len(self._queue) + (self._running is not None) > WHATIF_WAITING:
                return None
            self._numbered += 1
            job = WhatIfJob(label=label, number=self._numbered, requested=self._clock())
            self._jobs[label] = job
            self._jobs.move_to_end(label)
            self._queue.append((job, current, candidate))
            finished = [k for k, j in self._jobs.items() if j.done is not None]
            for k in finished[: max(0, len(self._jobs) - WHATIF_KEPT)]:
                del self._jobs[k]
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name="whatif", daemon=True)
                self._worker.start()
        return job

    def pending(self) -> int:
        """Jobs queued or running."""
        with self._lock:
            return len(self._queue) + (self._running is not None)

    def _drain(self) -> None:
        """Run the queued jobs one after another; the thread ends when the queue is empty."""
        while True:
            with self._lock:
                if not self._queue:
                    self._worker = None
                    return
                job, current, candidate = self._queue.popleft()
                self._running = job
            try:
                self._run(job, current, candidate)
            finally:
                with self._lock:
                    self._running = None

    def _run(
        self,
        job: WhatIfJob,
        current: Callable[[], tuple[PolicySnapshot, str]],
        candidate: Callable[[], PolicySnapshot],
    ) -> None:
        skipped: list[int] = []
        job.started = self._clock()
        try:
            now_snapshot = current()
            job.current_revision = now_snapshot[0].revision
            with closing(AuditLog.open(self._home, read_only=True)) as log:
                job.stop = log.head()[0]
                job.summary = compare_chain(
                    log,
                    now_snapshot,
                    candidate(),
                    examples=5,
                    stop=job.stop,
                    skipped=skipped.append,
                    vocabulary=self._vocabulary,
                )
        except RenseiRoutingError as e:
            job.error = str(e)
        except Exception:  # a bug: logged with its traceback; the queue goes on
            _log.exception("what-if comparison %s failed", job.label)
            job.error = "the comparison stopped on an internal error (see the console's log)"
        job.skipped = len(skipped)
        job.done = self._clock()
